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
