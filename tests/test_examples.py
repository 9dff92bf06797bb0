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


def test_langgraph_example_keeps_facts_in_the_store() -> None:
    out = run_example("langgraph_store.py")
    assert "answer: Ana prefers aisle seats." in out
    assert "store: ['Ana is vegetarian', 'Ana prefers aisle seats']" in out
    assert "trajectory memory holds 7 steps" in out


def test_openai_agents_example_budgets_the_third_turn() -> None:
    out = run_example("openai_agents_session.py")
    assert "agent: It was paid by card." in out
    # the third run's model got the retrieved context first, not the whole history
    assert out.splitlines()[-3] == "  model input: 4 items, the first a system message"
    assert "trajectory memory holds 7 steps" in out


def test_langchain_example_retrieves_with_explanations() -> None:
    out = run_example("langchain_retriever.py")
    first = out.splitlines()[0]
    assert first.startswith("[step 3] cosine") and "B-42: not shipped" in first
    assert "answer: Order B-42 has not shipped yet." in out


def test_llamaindex_example_puts_flushed_turns_in_the_prompt() -> None:
    out = run_example("llamaindex_block.py")
    assert "# Retrieved memory" in out
    assert "[step 0] user: My booking reference is R77 on flight HAT077." in out
