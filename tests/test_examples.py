"""The examples run offline and do what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str) -> str:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""},
    )
    return out.stdout


def test_ingest_formats_example_reads_every_fixture() -> None:
    out = run_example("ingest_formats.py")
    for line in (
        "anthropic.json: anthropic, 5 steps",
        "openai.json: openai, 5 steps",
        "openai_legacy.json: openai-legacy, 5 steps",
        "toolbench_dfs.json: toolbench-dfs, 5 steps",
        "toolbench_dfs_tree.json: toolbench-dfs, 5 steps",
    ):
        assert line in out


def test_agent_loop_example_remembers_across_turns() -> None:
    out = run_example("agent_loop.py")
    assert "memory holds 8 steps" in out
    # the last turn answers from a step retrieved from an earlier turn
    assert ">>> From earlier: [step 5] call: refund_order(" in out
