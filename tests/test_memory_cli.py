"""`osumem ingest` / `osumem query` end to end, and the memory on real tau-bench data
with the real SBERT encoder."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import sbert_available
from osumem.cli import main
from osumem.memory import Memory

LOG = [
    {"role": "system", "content": "airline agent"},
    {"role": "user", "content": "Please cancel reservation ABC123"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "function": {
                    "name": "get_reservation_details",
                    "arguments": '{"reservation_id": "ABC123"}',
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "ABC123: JFK to SEA, economy"},
    {"role": "assistant", "content": "Your flight ABC123 goes from JFK to SEA."},
]


def test_ingest_then_query(tmp_path):
    log = tmp_path / "log.json"
    log.write_text(json.dumps([{"traj": LOG}, {"messages": LOG[1:2]}]))  # two logs
    store = tmp_path / "mem.db"
    run = CliRunner().invoke
    r = run(main, ["ingest", str(log), "--store", str(store), "--model", "hashing", "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["logs"] == 2 and summary["steps_added"] == 3 + 1
    assert summary["model"] == "hashing:d256:n1"
    r = run(main, ["query", "flight JFK to SEA", "--store", str(store), "--budget", "40", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert 0 < out["cost"] <= 40 and out["method"] == "osumem"
    assert any("JFK to SEA" in s["text"] for s in out["steps"])
    # two logs in one namespace: sources are default/0, default/1 and entities prefixed
    with Memory.open(store) as mem:
        v = mem.view()
        assert list(v.namespaces) == ["default/0"] * 3 + ["default/1"]
        assert v.entities[1] == frozenset({"default/0::ABC123"})
    r = run(main, ["query", "cancel", "--store", str(store), "--method", "flat"])
    assert r.exit_code == 0 and r.stdout.startswith("# Retrieved memory (")


def test_cli_errors_exit_2(tmp_path):
    run = CliRunner().invoke
    r = run(main, ["query", "x", "--store", str(tmp_path / "missing.db")])
    assert r.exit_code == 2 and "memory store not found" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"role": "user", "content": "hi"}, {"role": "robot"}]))
    store = tmp_path / "m.db"
    r = run(main, ["ingest", str(bad), "--store", str(store), "--model", "hashing"])
    assert r.exit_code == 2 and "unknown role 'robot'" in r.output
    with Memory.open(store) as mem:
        assert mem.namespaces() == [] and mem.store.model_id == ""  # nothing written
    r = run(main, ["ingest", str(bad), "--store", str(store), "--model", "bogus"])
    assert r.exit_code == 2 and "encoder 'bogus'" in r.output


@pytest.mark.sbert
@pytest.mark.data
@pytest.mark.skipif(not sbert_available(), reason="needs the sbert extra")
def test_real_taubench_trajectory_with_sbert(shared_data, tmp_path):
    from osumem.embed import SBERTEncoder

    items = json.loads((shared_data / "taubench" / "gpt-4o-airline.json").read_text())
    traj = items[0]["traj"]
    enc = SBERTEncoder()
    path = tmp_path / "mem.db"
    with Memory.open(path, encoder=enc) as mem:
        ids = mem.add_messages(traj, namespace="task0")
        question = "Which flights did the user book from New York to Seattle?"
        r = mem.retrieve(question, 256, namespace="task0")
        assert len(ids) == mem.n_steps("task0") > 10
        assert 0 < r.cost <= 256
        # the user's opening request ("... from New York to Seattle on May 20th") is
        # the closest step in SBERT space and is selected first
        assert "New York to Seattle" in r.steps[0].text
    with Memory.open(path, encoder=enc) as again:
        assert again.retrieve(question, 256, namespace="task0").positions == r.positions
