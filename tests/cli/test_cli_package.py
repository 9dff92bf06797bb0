"""The command line as a package: every command is registered once, importing it stays
light, and the checks behind ``osumem bench`` work without click (they live in
``osumem.evaluate.options``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from osumem.bench.synthetic import SyntheticConfig, generate
from osumem.cli import main
from osumem.cli.memory import _renamed
from osumem.errors import ConfigError, OSUMemError, StoreBusyError
from osumem.evaluate.options import apply_overrides, check_experiment, run_experiment

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _paths(group: click.Group, prefix: tuple[str, ...] = ()) -> set[str]:
    out = set()
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # the lazily imported ones too
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        out.add(" ".join((*prefix, name)))
        if isinstance(cmd, click.Group):
            out |= _paths(cmd, (*prefix, name))
    return out


def test_every_command_is_registered() -> None:
    assert _paths(main) == {
        "bench",
        "bench compare",
        "bench efficiency",
        "bench locomo",
        "bench scale",
        "bench serve",
        "bench synthetic",
        "bench taubench",
        "bench toolbench",
        "check",
        "export",
        "import",
        "ingest",
        "methods",
        "namespaces",
        "query",
        "report",
        "results",
        "reproduce",
        "reproduce locomo",
        "reproduce synthetic",
        "reproduce taubench",
        "reproduce toolbench",
        "serve",
        "show",
        "view",
    }


def _python(code: str) -> str:
    """What ``python -c code`` prints, with this checkout's package on the path."""
    env = {"PYTHONPATH": SRC, "PATH": ""}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_importing_the_command_line_loads_no_heavy_library() -> None:
    code = (
        "import json, sys, osumem.cli\n"
        "heavy = ('numpy', 'pandas', 'pyarrow', 'matplotlib', 'torch', 'sentence_transformers',"
        " 'sklearn', 'scipy', 'joblib', 'osumem.evaluate.runner', 'osumem.bench')\n"
        "print(json.dumps(sorted(m for m in heavy if m in sys.modules)))\n"
    )
    assert json.loads(_python(code)) == []


def test_a_command_loads_its_own_family_only() -> None:
    code = (
        "import json, sys, click, osumem.cli as cli\n"
        "before = sorted(m for m in sys.modules if m.startswith('osumem.cli.'))\n"
        "cli.main.get_command(click.Context(cli.main), 'query')\n"
        "after = sorted(m for m in sys.modules if m.startswith('osumem.cli.'))\n"
        "print(json.dumps([before, after]))\n"
    )
    before, after = json.loads(_python(code))
    assert before == ["osumem.cli._common"]
    assert after == ["osumem.cli._common", "osumem.cli.memory"]


def test_python_dash_m_runs_the_command_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "osumem", "methods"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": SRC, "PATH": ""},
    )
    assert out.returncode == 0 and out.stderr == ""
    assert "flat" in out.stdout.split() and "osumem" in out.stdout.split()


def test_renamed_error_keeps_its_type_or_falls_back() -> None:
    again = _renamed(StoreBusyError("locked"), "log 1 of x.json: locked")
    assert type(again) is StoreBusyError and str(again) == "log 1 of x.json: locked"

    class TwoArgs(OSUMemError):
        def __init__(self, what: str, where: str) -> None:
            super().__init__(f"{what} at {where}")

    fallback = _renamed(TwoArgs("bad", "here"), "log 0: bad at here")
    assert type(fallback) is OSUMemError and str(fallback) == "log 0: bad at here"


def test_check_experiment_names_every_problem_at_once() -> None:
    problems, _ = check_experiment(
        "synthetic",
        bench_config=SyntheticConfig,
        methods="flat,osumem[max_memberships=abc]",
        budgets="64,x",
        episodes="0",
        seeds="1",
        jobs="0",
        overrides=("synthetic.noise_scale=abc", "nosuch.param=1", "broken"),
    )
    text = "\n".join(problems)
    assert len(problems) == 7, problems
    for part in (
        "--jobs",
        "--episodes",
        "--budgets",
        "synthetic.noise_scale",
        "'nosuch'",
        "NAME.PARAM=VALUE",
        "--methods osumem[max_memberships=abc]: max_memberships",
    ):
        assert part in text
    ok, values = check_experiment(
        "synthetic",
        bench_config=SyntheticConfig,
        methods="flat",
        budgets="64",
        episodes="2",
        seeds=None,
        jobs="auto",
        overrides=("synthetic.noise_scale=1.1",),
    )
    assert ok == [] and values == {"jobs": "auto", "episodes": 2}


def test_apply_overrides_reports_unknown_and_unreadable_together() -> None:
    with pytest.raises(ConfigError) as err:
        apply_overrides(SyntheticConfig(), {"nope": "1", "noise_scale": "abc"}, "synthetic")
    assert "unknown parameter(s) ['nope']" in str(err.value)
    assert "synthetic.noise_scale: expected a number, got 'abc'" in str(err.value)
    cfg = apply_overrides(SyntheticConfig(), {"n_episodes": "3"}, "synthetic")
    assert cfg.n_episodes == 3


def test_run_experiment_writes_rows_and_the_method_table(tmp_path: Path) -> None:
    eps = [(0, ep) for ep in generate(SyntheticConfig(n_episodes=2), 0)]
    rows, path = run_experiment(
        benchmark="synthetic",
        episodes=eps,
        methods="flat,osumem[max_memberships=2]",
        budgets=[64],
        jobs=1,
        out=tmp_path,
        overrides={},
        meta={"seeds": [0]},
        progress=False,
    )
    assert path == tmp_path / "synthetic.parquet" and path.exists()
    assert set(rows["method"]) == {"flat", "osumem[max_memberships=2]"}
    meta = json.loads((tmp_path / "synthetic.json").read_text())
    assert meta["seeds"] == [0] and meta["budgets"] == [64]
    assert [m["label"] for m in meta["method_table"]] == ["flat", "osumem[max_memberships=2]"]
    rows_only, none = run_experiment(
        benchmark="synthetic",
        episodes=eps,
        methods="flat",
        budgets=[64],
        jobs=1,
        out=None,
        overrides={},
        meta={},
        progress=False,
    )
    assert none is None and len(rows_only) == len(rows) // 2


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["/venv/bin/osumem", "query", "q", "--store", "m.db"], {}, "1"),
        (["/src/osumem/__main__.py", "serve", "m.db", "--blas-threads", "3"], {}, "3"),
        (["osumem", "ingest", "log.json", "--blas-threads=2"], {}, "2"),
        (["osumem", "query", "q", "--blas-threads", "0"], {}, None),  # the library's own
        (["osumem", "query", "q"], {"OPENBLAS_NUM_THREADS": "4"}, "4"),  # the user's
        (["osumem", "query", "q"], {"MKL_NUM_THREADS": "4"}, None),  # the user chose
        (["osumem", "bench", "serve"], {}, None),  # not a memory command
        (["osumem", "--help"], {}, None),
        (["/usr/bin/myagent", "query", "q"], {}, None),  # another program importing the CLI
    ],
)
def test_a_memory_command_starts_numpy_with_its_blas_threads(argv, environ, expected) -> None:
    from osumem.cli import blas_at_start
    from osumem.process import BLAS_THREAD_VARIABLES

    chosen = dict(environ)
    blas_at_start(argv, environ, modules=set())
    assert environ.get("OPENBLAS_NUM_THREADS") == expected
    if not chosen:  # every BLAS's variable, or none
        assert {environ.get(v) for v in BLAS_THREAD_VARIABLES} == {expected}
    else:
        assert environ == chosen
    environ = {}
    assert blas_at_start([*argv[:1], "query"], environ, modules={"numpy"}) is None
    assert environ == {}  # NumPy already loaded: too late, nothing changes


def test_osumem_query_runs_numpy_with_one_blas_thread() -> None:
    code = (
        "import sys; sys.argv = ['/venv/bin/osumem', 'query', 'q']\n"
        "import osumem.cli, numpy, threadpoolctl\n"
        "print(max(i['num_threads'] for i in threadpoolctl.threadpool_info()"
        " if i['user_api'] == 'blas'))\n"
    )
    assert _python(code).split() == ["1"]


def test_a_command_that_started_its_blas_limited_skips_the_lookup() -> None:
    """After the command line set every BLAS variable before NumPy loaded, a memory
    call with that limit (or more) has nothing to lower and does not look the
    libraries up (threadpoolctl is not even imported); the BLAS runs with one thread.
    A variable changed since, or a lower limit, brings the lookup back."""
    code = (
        "import os, sys; sys.argv = ['/venv/bin/osumem', 'query', 'q']\n"
        "import osumem.cli\n"
        "from osumem.memory import Memory\n"
        "with Memory.open(None, encoder='hashing') as m:\n"
        "    m.add('book the aisle seat on HAT001')\n"
        "    m.retrieve('which seat?', 64)\n"
        "print('threadpoolctl' in sys.modules)\n"
        "from osumem.memory.blas import _limited_at_start\n"
        "print(_limited_at_start(1), _limited_at_start(2))\n"
        "os.environ['MKL_NUM_THREADS'] = '8'\n"
        "print(_limited_at_start(1))\n"
        "import threadpoolctl\n"
        "print(max(i['num_threads'] for i in threadpoolctl.threadpool_info()"
        " if i['user_api'] == 'blas'))\n"
    )
    assert _python(code).split() == ["False", "True", "True", "False", "1"]
    library = "from osumem.memory.blas import _limited_at_start\nprint(_limited_at_start(1))\n"
    assert _python(library).split() == ["False"]  # a program using the library
