"""Several servers on one store: each sees the others' adds before it answers (no
restart; on Postgres and on one SQLite file), and on Postgres, with one of them killed
with SIGKILL again and again under load, no acknowledged add is lost and every server
answers as a fresh open."""

from __future__ import annotations

import secrets
import signal

import pytest

from osumem.memory import Memory
from osumem.serve.service import MemoryService
from serve_helpers import turn


@pytest.fixture
def url(pg_server) -> str:
    return pg_server.url(schema="t_" + secrets.token_hex(8))


@pytest.fixture(params=["postgres", "sqlite"])
def shared(request, tmp_path) -> str:
    """A new store that two services share."""
    if request.param == "sqlite":
        return str(tmp_path / "shared.db")
    return request.getfixturevalue("url")


def test_two_services_on_one_store_see_each_others_adds(shared):
    url = shared
    with (
        MemoryService(url, encoder="hashing:d64", readers=2) as a,
        MemoryService(url, encoder="hashing:d64", readers=2) as b,
    ):
        a.add_messages("ns", turn(0))
        assert [s.text for s in b.retrieve("R0", 64, namespace="ns").steps]  # loaded warm
        added = a.add_messages("ns", turn(1)).step_ids
        got = b.retrieve("reservation R1 HAT001", 512, namespace="ns")
        assert set(added) <= {s.step_id for s in got.steps}
        page = b.steps("ns", grep="R1(?![0-9])")
        assert page["total"] == len(added) and all(s["osus"] for s in page["steps"])
        for k, method in ((2, None), (3, "flat")):  # the other methods' memories follow too
            b.retrieve("warm", 64, namespace="ns", method=method)
            new = a.add_messages("ns", turn(k)).step_ids
            assert new
            seen = b.retrieve(f"R{k} HAT00{k}", 512, namespace="ns", method=method)
            assert set(new) <= {s.step_id for s in seen.steps}
        assert b.delete_namespace("ns") == 8
        assert a.retrieve("R2", 64, namespace="ns").steps == ()  # deleted elsewhere
        with Memory.open(url, method="osumem") as fresh:
            a.add_messages("ns", turn(5))
            for q in ("R5", "passenger P5", "voucher"):
                assert b.retrieve(q, 256, namespace="ns").to_dict() == (
                    fresh.retrieve(q, 256, namespace="ns").to_dict()
                )


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_two_servers_under_load_with_one_killed_lose_nothing(url):
    """The benchmark's run, bounded: 2 servers, 4 clients, 3 SIGKILLs of one server."""
    from osumem.bench.serve_cluster import ClusterBenchConfig, run_cluster_bench

    cfg = ClusterBenchConfig(
        store=url, steps=60, clients=4, ops_per_client=8, kills=3, queries=5, time_limit=90
    )
    result = run_cluster_bench(cfg)
    assert result["kills"] == 3
    assert result["acknowledged_adds"] > 0 and result["lost_acknowledged_steps"] == 0
    con = result["concurrent"]
    assert con["n_errors"] == 0, con["errors"]
    assert con["read_after_write_misses"] == 0, con["read_after_write_missed"]
    assert result["reads_equal_fresh_open"] and result["reads_compared"] == 5 * 3
