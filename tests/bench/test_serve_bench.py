"""`osumem bench serve` end to end on a small store: every phase runs (the echo
endpoint's too), every acknowledged add is found after the SIGKILL, and the report
renders."""

from __future__ import annotations

import pytest

from osumem.bench.serve import ServeBenchConfig, render_report, run_serve_bench
from osumem.errors import ConfigError
from serve_helpers import serve_env


def test_small_serve_bench(tmp_path, monkeypatch):
    for key, value in serve_env().items():
        monkeypatch.setenv(key, value)
    cfg = ServeBenchConfig(steps=120, clients=3, ops_per_client=6, add_share=0.5, queries=5)
    result = run_serve_bench(cfg, tmp_path)
    assert result["store"]["steps"] >= 120
    seq, con = result["sequential"], result["concurrent"]
    assert seq["in_process"]["n"] == seq["http"]["n"] == 5
    assert seq["both_nonempty"] == 5
    assert con["operations"] == 18 and con["n_errors"] == 0
    assert result["acknowledged_adds"] >= 1
    assert result["lost_acknowledged_steps"] == 0
    assert result["store"]["steps_after"] == result["store"]["steps"] + result["acknowledged_steps"]
    echo = result["echo"]
    for run in (echo["before"], echo["after"]):  # the same load against the echo endpoint
        assert run["operations"] == 18 and run["n_errors"] == 0
    assert echo["ratio"] == pytest.approx(con["throughput_ops_s"] / echo["throughput_ops_s"])
    report = render_report(result)
    assert "HTTP / in-process" in report and "lost after SIGKILL + reopen: 0" in report
    assert "osumem serve / echo" in report
    assert "4 server reader threads" in report  # the server's own default


def test_the_server_runs_with_its_own_default_readers():
    from osumem.serve.service import ServiceThreads

    assert ServeBenchConfig().readers == ServiceThreads().readers


def test_bench_config_is_checked():
    with pytest.raises(ConfigError, match="clients"):
        ServeBenchConfig(clients=0)
    with pytest.raises(ConfigError, match="add_share"):
        ServeBenchConfig(add_share=1.5)
    with pytest.raises(ConfigError, match="readers"):
        ServeBenchConfig(readers=0)


def test_a_chat_log_file_is_cycled_up_to_the_steps(tmp_path):
    """`--data` with fewer steps than `--steps`: the logs are added again as further
    copies (each its own log id), not skipped as duplicates, until the store holds the
    steps asked for; a file that cannot give them is a clear error."""
    import json

    from osumem.bench.serve import NAMESPACE, _build
    from osumem.memory import Memory

    logs = [
        [
            {"role": "user", "content": f"Change the bags on reservation R{k:05d}."},
            {"role": "assistant", "content": f"Done for R{k:05d}."},
        ]
        for k in range(2)
    ]
    data = tmp_path / "logs.jsonl"
    data.write_text("\n".join(json.dumps(log) for log in logs), encoding="utf-8")
    cfg = ServeBenchConfig(steps=11, data=data)
    built = _build(cfg, tmp_path / "bench.db", lambda _: None)
    assert built["steps"] >= 11
    with Memory.open(tmp_path / "bench.db") as mem:
        texts = [s.text for s in mem.steps(NAMESPACE)]
    assert len(texts) == built["steps"] and len(set(texts)) == 4  # copies of the 4 steps
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps([{"role": "system", "content": "nothing to store"}]))
    with pytest.raises(ConfigError, match="fewer than --steps"):
        _build(ServeBenchConfig(steps=5, data=empty), tmp_path / "other.db", lambda _: None)
