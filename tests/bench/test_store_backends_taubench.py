"""tau-bench episodes through the SQLite and the Postgres store: the benchmark rows
computed on the views each store gives back equal the in-process rows, and every
``Memory.retrieve`` answer is the same on both (a few episodes of seed 1000, a
development seed; ``benchmarks/store_backends_taubench.py`` runs evaluation seed 0)."""

from __future__ import annotations

import secrets

import pytest


@pytest.mark.data
def test_taubench_rows_and_answers_equal_on_both_backends(shared_data, pg_server, tmp_path):
    from osumem.bench.store_backends import compare_backends
    from osumem.bench.taubench import TauBenchConfig
    from osumem.bench.taubench_report import build_taubench

    cfg = TauBenchConfig(n_episodes=3)
    eps, _ = build_taubench(
        shared_data / "taubench" / "gpt-4o-airline.json", cfg, [1000], encoder="hashing"
    )
    locations = {
        "sqlite": str(tmp_path / "tau.db"),
        "postgres": pg_server.url(schema="t_" + secrets.token_hex(8)),
    }
    methods, budgets = ["osumem", "flat", "osumem_hybrid"], [64, 256]
    out = compare_backends(eps, locations, methods, budgets)
    assert out["rows"] > 0 and out["answers"] > 0
    for name in locations:
        assert out["backends"][name]["rows_equal_in_process"] == out["rows"], out
    assert out["backends"]["postgres"]["answers_equal_sqlite"] == out["answers"], out
