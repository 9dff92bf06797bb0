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
    r = run(main, ["ingest", str(log), "--store", str(store), "--encoder", "hashing", "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["logs"] == 2 and summary["steps_added"] == 3 + 1
    assert summary["encoder"] == "hashing:d256:n1"
    r = run(main, ["query", "flight JFK to SEA", "--store", str(store), "--budget", "40", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert 0 < out["cost"] <= 40 and out["method"] == "osumem"
    assert any("JFK to SEA" in s["text"] for s in out["steps"])
    # two logs in one namespace: sources are default/0, default/1 and entities prefixed
    with Memory.open(store) as mem:
        v = mem.view()
        assert list(v.sources) == ["default/0"] * 3 + ["default/1"]
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
    r = run(main, ["ingest", str(bad), "--store", str(store), "--encoder", "hashing"])
    assert r.exit_code == 2 and "unknown role 'robot'" in r.output
    with Memory.open(store) as mem:
        assert mem.namespaces() == [] and mem.store.encoder_id == ""  # nothing written
    r = run(main, ["ingest", str(bad), "--store", str(store), "--encoder", "bogus"])
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


def _err_line(r) -> str:
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("osumem: error:"), r.stderr
    return lines[0]


def test_double_ingest_adds_nothing(tmp_path):
    log = tmp_path / "log.json"
    log.write_text(json.dumps([{"traj": LOG}, {"messages": LOG[1:2] + LOG[4:]}]))
    store = tmp_path / "mem.db"
    run = CliRunner().invoke
    args = ["ingest", str(log), "--store", str(store), "--encoder", "hashing", "--json"]
    first = json.loads(run(main, args).stdout)
    second = run(main, args)
    assert second.exit_code == 0, second.output
    again = json.loads(second.stdout)
    assert again["steps_added"] == 0 and again["logs_skipped_as_duplicates"] == 2
    assert again["steps_in_namespace"] == first["steps_in_namespace"]
    line = _err_line(run(main, [*args, "--on-duplicate", "error"]))
    assert "added before" in line and "nothing from" in line
    r = run(main, [*args, "--on-duplicate", "append"])
    assert json.loads(r.stdout)["steps_in_namespace"] == 2 * first["steps_in_namespace"]


def test_ingest_is_one_transaction_per_file_and_names_the_log(tmp_path):
    log = tmp_path / "log.json"
    bad = [{"role": "user", "content": "fine"}, {"role": "wizard", "content": "x"}]
    log.write_text(json.dumps([{"traj": LOG}, {"messages": bad}]))
    store = tmp_path / "mem.db"
    run = CliRunner().invoke
    line = _err_line(run(main, ["ingest", str(log), "--store", str(store), "--encoder", "hashing"]))
    assert f"log 1 of {log}" in line and "unknown role 'wizard'" in line
    assert f"nothing from {log} was stored" in line
    assert not store.exists()  # a new store that got nothing is not left behind
    good = tmp_path / "good.json"
    good.write_text(json.dumps(LOG))
    assert (
        run(main, ["ingest", str(good), "--store", str(store), "--encoder", "hashing"]).exit_code
        == 0
    )
    with Memory.open(store) as mem:
        n = mem.n_steps()
    _err_line(run(main, ["ingest", str(log), "--store", str(store)]))
    with Memory.open(store) as mem:
        assert mem.n_steps() == n  # the good first log of the bad file was rolled back


@pytest.mark.parametrize(
    "args,text",
    [
        (["--limit", "-1"], "--limit"),
        (["--encoder", "no-such-model"], "encoder 'no-such-model'"),
    ],
)
def test_bad_ingest_options_leave_no_file(tmp_path, args, text):
    log = tmp_path / "log.json"
    log.write_text(json.dumps(LOG))
    store = tmp_path / "mem.db"
    line = _err_line(CliRunner().invoke(main, ["ingest", str(log), "--store", str(store), *args]))
    assert text in line
    assert not store.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["log.json"]


@pytest.mark.parametrize("encoding", ["utf-16", "latin-1"])
def test_ingest_of_a_non_utf8_file_is_one_line(tmp_path, encoding):
    log = tmp_path / "log.json"
    log.write_bytes(
        json.dumps([{"role": "user", "content": "caf\u00e9"}], ensure_ascii=False).encode(encoding)
    )
    line = _err_line(
        CliRunner().invoke(
            main, ["ingest", str(log), "--store", str(tmp_path / "m.db"), "--encoder", "hashing"]
        )
    )
    assert "not UTF-8" in line


def test_query_empty_text_and_check_command(tmp_path):
    log = tmp_path / "log.json"
    log.write_text(json.dumps(LOG))
    store = tmp_path / "mem.db"
    run = CliRunner().invoke
    assert (
        run(main, ["ingest", str(log), "--store", str(store), "--encoder", "hashing"]).exit_code
        == 0
    )
    assert "empty text" in _err_line(run(main, ["query", "", "--store", str(store)]))
    assert "empty text" in _err_line(run(main, ["query", "  ", "--store", str(store)]))
    empty_ns = ["query", "", "--store", str(store), "--namespace", "nope"]
    assert "empty text" in _err_line(run(main, empty_ns))  # one line, no note before it
    r = run(main, ["check", "--store", str(store), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["ok"] is True and json.loads(r.stdout)["steps"] == 3
    assert "not found" in _err_line(run(main, ["check", "--store", str(tmp_path / "none.db")]))
