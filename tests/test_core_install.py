"""The core memory works without the benchmark-only dependencies (the `bench` extra):
importing and using osumem.memory never imports pandas or pyarrow, and works when
pandas, pyarrow and matplotlib cannot be imported at all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

USE_MEMORY = """
import json, sys
from osumem.memory import Memory
log = json.load(open(sys.argv[1]))["messages"]
with Memory.open(None, encoder="hashing") as memory:
    memory.add_messages(log, namespace="t")
    result = memory.retrieve("which flight was booked?", 64, namespace="t")
print(json.dumps({"steps": len(result.steps),
                  "loaded": sorted(m for m in ("pandas", "pyarrow") if m in sys.modules)}))
"""

BLOCK = "import sys\nfor m in ('pandas', 'pyarrow', 'matplotlib'):\n    sys.modules[m] = None\n"
LOG = str(Path(__file__).resolve().parents[1] / "examples" / "logs" / "openai.json")


def run(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, LOG],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": SRC, "PATH": ""},
        check=True,
    )
    return json.loads(out.stdout)


def test_memory_never_imports_pandas_or_pyarrow() -> None:
    got = run(USE_MEMORY)
    assert got["steps"] >= 1 and got["loaded"] == []


def test_memory_works_without_the_bench_extra() -> None:
    assert run(BLOCK + USE_MEMORY)["steps"] >= 1


#: The core install (pyproject's ``dependencies``) and the modules that left it.
CORE = {"numpy", "scipy", "igraph", "leidenalg", "click", "threadpoolctl"}
NOT_CORE = ("sklearn", "networkx", "joblib", "tqdm", "pandas", "pyarrow")

USE_DEFAULT_METHOD = """
import json, sys
from importlib.metadata import packages_distributions
from osumem.cli import main  # the command line is part of the core install
from osumem.memory import Memory
log = json.load(open(sys.argv[1]))["messages"]
with Memory.open(None, encoder="hashing") as memory:
    assert memory.config.method == "osumem"
    for k in range(40):  # enough steps that the similarity view finds communities
        memory.add_messages(log, namespace="t", log_id=str(k))
    memory.retrieve("which flight was booked?", 64, namespace="t")
owners = packages_distributions()
top = {m.split(".")[0] for m, mod in sys.modules.items() if mod is not None}
top -= set(sys.stdlib_module_names)
dists = {d.lower() for m in top for d in owners.get(m, [])}
print(json.dumps({"dists": sorted(dists), "modules": sorted(top)}))
"""


def test_the_core_dependencies_are_what_the_default_memory_imports() -> None:
    import tomllib

    project = tomllib.loads((Path(SRC).parent / "pyproject.toml").read_text())["project"]
    declared = {
        d.split(">")[0].split("=")[0].split("[")[0].strip() for d in project["dependencies"]
    }
    assert declared == CORE
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys\nfor m in {NOT_CORE!r}:\n    sys.modules[m] = None\n" + USE_DEFAULT_METHOD,
            LOG,
        ],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": SRC, "PATH": ""},
        check=True,
    )
    got = json.loads(out.stdout)
    # each one is needed; SciPy's sparse matrices are imported at their first use (a
    # reopened memory's snapshot), not by this fresh memory
    assert set(got["dists"]) >= CORE - {"scipy"}, got["dists"]
    assert not set(NOT_CORE) & set(got["modules"])  # and the memory works without the rest


def test_a_baseline_without_its_extra_names_the_extra() -> None:
    code = (
        "import sys\nsys.modules['sklearn'] = None\n"
        "from osumem.memory import Memory\n"
        "m = Memory.open(None, encoder='hashing', method='tree')\n"
        "m.add_messages([{'role': 'user', 'content': f'turn {k}'} for k in range(40)])\n"
        "try:\n    m.retrieve('turn', 64)\nexcept Exception as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        env={"PYTHONPATH": SRC, "PATH": ""}, check=True,
    )  # fmt: skip
    assert out.stdout.startswith("MissingExtraError") and "osumem[baselines]" in out.stdout
