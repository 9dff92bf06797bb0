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
