"""The query path imports no heavy library it does not use: ``import osumem.memory``,
the command line and the server's modules leave SciPy's sparse matrices, igraph,
leidenalg, scikit-learn and pandas unimported until a call needs them
(:mod:`osumem.lazy`); a query on a stored snapshot does not load ``numpy.ma``
either (:func:`osumem.types.distinct` stands in for ``np.unique``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from osumem.lazy import LazyModule, lazy_module

SRC = str(Path(__file__).resolve().parents[1] / "src")
HEAVY = ("scipy.sparse", "scipy", "igraph", "leidenalg", "sklearn", "pandas", "hnswlib", "torch")
# what a query must not load either (np.unique imports it at its first call)
QUERY_PATH_LEAN = ("numpy.ma",)


def _last_line(code: str) -> str:
    """The last line ``code`` prints, run in a fresh interpreter on the source tree."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": SRC, "PATH": ""},
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY + QUERY_PATH_LEAN!r} if m in sys.modules]))"
    return list(json.loads(_last_line(probe)))


@pytest.mark.parametrize(
    "code",
    [
        "import osumem.memory",
        "from osumem.memory import Memory, MemoryConfig",
        "from osumem.cli import main",
        "import osumem.retrieve.osumem, osumem.osu.pool, osumem.retrieve.groups",
        "import osumem.serve.service",
    ],
)
def test_importing_the_query_path_loads_no_heavy_library(code: str) -> None:
    assert _loaded_after(code) == []


def test_the_command_line_loads_no_asyncio() -> None:
    """`osumem query` reads the server's option defaults from a module of constants,
    not from the connection guard (which needs asyncio)."""
    code = "import sys\nfrom osumem.cli import main\nprint('asyncio' in sys.modules)"
    assert _last_line(code) == "False"


def test_a_hashing_memory_answers_without_sklearn_or_pandas() -> None:
    code = (
        "from osumem.memory import Memory\n"
        "with Memory.open(None, encoder='hashing') as m:\n"
        "    m.add('book the aisle seat on HAT001')\n"
        "    m.retrieve('which seat?', 64)\n"
    )
    loaded = _loaded_after(code)
    assert not {"sklearn", "pandas", "torch"} & set(loaded), loaded


def test_a_query_on_a_stored_snapshot_loads_no_scipy(tmp_path) -> None:
    """What ``osumem query`` does on a warm store: open it, restore the stored pool
    snapshot (the centroids come from the kept members without a sparse matrix) and
    answer; neither SciPy's sparse matrices nor igraph are imported."""
    db = tmp_path / "q.db"
    build = (
        "from osumem.memory import Memory\n"
        f"with Memory.open({str(db)!r}, encoder='hashing') as m:\n"
        "    for k in range(200):\n"
        "        m.add_messages([{'role': 'user', 'content': f'book HAT{k % 30:03d} for P{k % 11}'},\n"
        "                        {'role': 'assistant', 'content': f'Booked, reservation R{k}.'}])\n"
        "    m.retrieve('which flight?', 256)\n"
    )
    _loaded_after(build)
    query = (
        "from osumem.memory import Memory\n"
        f"with Memory.open({str(db)!r}, read_only=True) as m:\n"
        "    assert m.retrieve('which flight did P3 book?', 256).positions\n"
    )
    loaded = _loaded_after(query)
    assert not {"scipy.sparse", "igraph", "leidenalg", "numpy.ma"} & set(loaded), loaded


def test_a_lazy_module_imports_at_the_first_attribute_read() -> None:
    mod = lazy_module("json")
    assert isinstance(mod, LazyModule) and "json" in repr(mod)
    assert mod.dumps([1]) == "[1]"
    assert "dumps" in vars(mod)  # kept: the next read is a plain attribute
    assert mod.dumps is json.dumps


def test_a_lazy_module_is_not_imported_by_probes_or_a_failed_name() -> None:
    code = (
        "import copy, sys\n"
        "from osumem.lazy import lazy_module\n"
        "m = lazy_module('sklearn')\n"
        "assert not hasattr(m, '__wrapped__') and not hasattr(m, '__len__')\n"
        "copy.copy(m)\n"
    )
    assert _loaded_after(code) == []
    with pytest.raises(ModuleNotFoundError):
        _ = lazy_module("osumem_no_such_module").anything


#: What a cold ``osumem query`` on a warm store has no use for: the serving commands,
#: the annotators and log readers, the C-library loader of the heap trim, and hnswlib
#: below the ANN size.
NOT_FOR_A_QUERY = (
    "osumem.cli.serve",
    "osumem.annotate",
    "osumem.ingest",
    "ctypes.util",
    "hnswlib",
)


def test_a_cold_command_line_query_imports_only_what_it_uses(tmp_path) -> None:
    db = tmp_path / "q.db"
    _loaded_after(
        "from osumem.memory import Memory\n"
        f"with Memory.open({str(db)!r}, encoder='hashing') as m:\n"
        "    for k in range(60):\n"
        "        m.add(f'book HAT{k % 30:03d} for P{k % 11}')\n"
        "    m.retrieve('which flight?', 256)\n"
    )

    def query(*flags: str) -> tuple[list[str], str]:
        probe = (
            "import io, json, sys, contextlib\n"
            "from osumem.cli import main\n"
            f"sys.argv = ['osumem', 'query', 'which flight did P3 book?', '--store', {str(db)!r}, *{flags!r}]\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
            "    main()\n"
            f"print(json.dumps([[m for m in {NOT_FOR_A_QUERY!r} if m in sys.modules], out.getvalue()]))"
        )
        loaded, printed = json.loads(_last_line(probe))
        return loaded, printed

    loaded, printed = query()
    assert loaded == [] and "HAT" in printed
    # the store's snapshot recorded a similarity refresh under way, so the query
    # resumes it and its daemon thread is still alive at exit: the exit must not freeze
    # (it crashed about one run in three when it did)
    for _ in range(4):
        assert query()[0] == []
    loaded, printed = query("--explain")
    assert loaded == [] and "cosine" in printed


def test_the_stale_result_error_is_importable_where_it_was() -> None:
    import osumem.memory
    import osumem.memory.explain
    from osumem.errors import StaleResultError

    assert osumem.memory.StaleResultError is StaleResultError
    assert osumem.memory.explain.StaleResultError is StaleResultError


def test_a_command_freezes_the_collector_at_exit_and_a_library_import_does_not() -> None:
    """The interpreter's last collection skips what the command made (``gc.freeze`` in
    an ``atexit`` handler, about 15 ms of a cold query), unless another thread is still
    alive; importing the command line as a library registers nothing."""
    check = (
        "import atexit, gc, os\n"
        "atexit.register(lambda: os.write(1, b'frozen=%d' % (gc.get_freeze_count() > 0)))\n"
    )
    command = "import sys\nfrom osumem.cli import main\nsys.argv = ['osumem', 'methods']\n"
    runs = {
        "command": check + command + "main()\n",
        "import": check + "from osumem.cli import main\n",
        "another thread alive": check
        + "import threading, time\n"
        + "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        + command
        + "main()\n",
    }
    seen = {name: _last_line(code)[-8:] for name, code in runs.items()}
    assert seen == {
        "command": "frozen=1",
        "import": "frozen=0",
        "another thread alive": "frozen=0",
    }
