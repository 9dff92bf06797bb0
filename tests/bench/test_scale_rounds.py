"""``osumem bench scale``'s tail numbers: p50 / p99 / max of the add, the retrieve and
both per agent round, the sqlite3 floor of an add, and the first retrieve after a bulk
ingest."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("hnswlib")

from osumem.bench.scale import ScaleConfig, agent_rounds, generate, grown_view, markdown, run_scale


def test_agent_rounds_time_the_add_and_the_query_apart():
    calls: list[str] = []

    def add(t: int):
        calls.append(f"prepare {t}")
        return lambda: calls.append(f"add {t}")

    wall: list[float] = []
    adds, gets, both = agent_rounds(range(3), add, lambda t: calls.append(f"query {t}"), 60.0, wall)
    assert len(adds) == len(gets) == len(both) == len(wall) == 3
    assert all(w >= 0 for w in wall)
    assert calls[:3] == ["prepare 0", "add 0", "query 0"]
    assert all(a + g == pytest.approx(b) for a, g, b in zip(adds, gets, both, strict=True))


def test_scale_rows_carry_the_tail_the_floor_and_the_bulk_ingest():
    cfg = ScaleConfig(
        sizes=(400,), dim=16, methods=("osumem",), queries=5, agent_steps=40,
        memory_max=400, bulk_sizes=(600,),
    )  # fmt: skip
    rows = run_scale(cfg, log=lambda line: None)
    by = {r["method"]: r for r in rows}
    agent = by["osumem"]
    assert agent["agent_step"]["rounds"] == 40
    for part in ("agent_add", "agent_retrieve", "agent_step", "agent_step_wall", "retrieve"):
        p = agent[part]
        assert p["p50_ms"] <= p["p99_ms"] <= p["max_ms"]
    mem = by["Memory[osumem, hashing]"]
    assert mem["sqlite_floor_add"]["p50_ms"] > 0
    assert mem["add_p50_over_floor"] > 0 and not math.isnan(mem["add_p50_over_floor"])
    bulk = by["bulk Memory[osumem, hashing]"]
    assert bulk["n"] == 600 and bulk["texts"] == "generated"
    assert bulk["first_retrieve_cpu_s"] >= 0 and bulk["ingest_cpu_s"] > 0
    text = markdown(rows)
    assert "sqlite3 floor add p50" in text and "Bulk ingest" in text
    assert "add+retrieve wall p50 | wall p99 | wall max" in text
    assert mem["agent_step_wall"]["p50_ms"] > 0


def test_grown_view_is_the_prefix_without_copying_tuple_columns():
    from osumem.retrieve import create
    from osumem.types import ListPrefix

    view = generate(600, 16, 0, 5).view
    grown = grown_view(view, 450)
    plain = view.prefix(450)
    assert isinstance(grown.entities, ListPrefix) and isinstance(plain.entities, tuple)
    assert grown.entities == plain.entities and grown.n == plain.n == 450
    np.testing.assert_array_equal(grown.embeddings, plain.embeddings)
    for c in plain.column_names():
        if c != "embeddings":
            assert list(getattr(grown, c)) == list(getattr(plain, c)), c
    # a retriever grown through either view answers the same
    a = create("osumem", seed=0).fit(view.prefix(400))
    b = create("osumem", seed=0).fit(view.prefix(400))
    for t in range(401, 451):
        a.update(view.prefix(t))
        b.update(grown_view(view, t))
    q = view.embeddings[7]
    np.testing.assert_array_equal(a.retrieve(q, 256).positions, b.retrieve(q, 256).positions)
