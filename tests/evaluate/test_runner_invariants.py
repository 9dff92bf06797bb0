"""Behaviour the refactor must keep: the parallel runner gives the serial rows, the
union-cost K rule covers ρ·B distinct tokens, the similarity view refreshes on its
geometric schedule and then equals a batch build."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import make_view
from osumem.bench.synthetic import SyntheticConfig, generate
from osumem.evaluate.runner import parse_method_runs, run
from osumem.osu.config import OSUConfig
from osumem.osu.pool import OSUPool
from osumem.retrieve.registry import create

TIMING = ["latency_s", "build_share_s", "build_s"]


@pytest.mark.slow  # starts worker processes
def test_parallel_runner_gives_the_serial_rows() -> None:
    eps = [(s, ep) for s in (0, 1) for ep in generate(SyntheticConfig(n_episodes=2), s)]
    runs = parse_method_runs(["flat", "osumem", "tree", "osumem_gf"])
    serial = run(eps, runs, [64, 256], benchmark="synthetic", jobs=1, progress=False)
    parallel = run(eps, runs, [64, 256], benchmark="synthetic", jobs=2, progress=False)
    assert len(serial) == sum(len(ep.queries) for _, ep in eps) * 4 * 2
    pd.testing.assert_frame_equal(serial.drop(columns=TIMING), parallel.drop(columns=TIMING))


@pytest.mark.parametrize("budget", [32, 128, 512])
def test_union_cost_keeps_the_fewest_osus_covering_rho_b_distinct_tokens(budget: int) -> None:
    ep = next(generate(SyntheticConfig(n_episodes=1), 3))
    r = create("osumem", {"coarse_k_rule": "union_cost"}).fit(ep.view)
    q = r.view_.check_query(ep.queries[0].vector)
    res = r.coarse(q, budget, ep.view.n, None)
    target = r.config.coarse_ratio * budget

    def distinct_cost(osus: np.ndarray) -> int:
        steps = np.unique(res.members[:, osus].indices)
        return int(ep.view.costs[steps].sum())

    kept = res.kept
    assert kept.size >= 1
    if kept.size < int((np.diff(res.members.indptr) > 0).sum()):  # the pool was not exhausted
        assert distinct_cost(kept) >= target
    assert distinct_cost(kept[:-1]) < target
    # under overlap a step counted twice by mean_cost counts once here: K is never smaller
    mean_k = create("osumem").fit(ep.view).coarse(q, budget, ep.view.n, None).kept.size
    assert kept.size >= mean_k


def test_similarity_view_refreshes_geometrically_and_then_equals_a_batch_build() -> None:
    view = make_view(70, 8, seed=4)
    cfg = OSUConfig(views=("similarity",), similarity_refresh=4, similarity_refresh_ratio=1.0)
    pool = OSUPool(cfg, seed=0)
    refreshed_at = []
    covered = 0
    for n in range(1, view.n + 1):
        pool.add(view.prefix(n))
        members = [int(m) for g in pool.raw_groups() for m in g[2]]
        upto = max(members) + 1 if members else 0
        if upto > covered:
            refreshed_at.append(n)
            covered = upto
            batch = OSUPool.build(view.prefix(n), cfg, seed=0)
            assert [(k, m.tolist()) for _, k, m in pool.raw_groups()] == [
                (k, m.tolist()) for _, k, m in batch.raw_groups()
            ]
        assert upto <= refreshed_at[-1] if refreshed_at else upto == 0
    # due = max(4, 1.0 × covered): refreshes at 4, 8, 16, 32, 64
    assert refreshed_at == [4, 8, 16, 32, 64]


def test_methods_sharing_pool_settings_give_the_rows_they_give_alone() -> None:
    from osumem.evaluate.runner import evaluate_episode

    runs = parse_method_runs(
        [
            "osumem",
            "osumem_no_novelty",
            "osumem_gf",
            "osumem[max_memberships=1]",
            "osumem_disjoint",
            "flat",
        ]
    )
    timing = ("latency_s", "build_share_s", "build_s")
    for ep in generate(SyntheticConfig(n_episodes=2), 1001):
        together = evaluate_episode(ep, runs, [64, 512], benchmark="s", seed=1001)
        alone = [
            row
            for r in runs
            for row in evaluate_episode(ep, [r], [64, 512], benchmark="s", seed=1001)
        ]
        strip = [
            [{k: v for k, v in row.items() if k not in timing} for row in rows]
            for rows in (together, alone)
        ]
        assert strip[0] == strip[1]
        # a shared build reports the time of the build it shares
        by = {(r["method"], r["t"]): r["build_s"] for r in together}
        assert all(by[("osumem", t)] == by[("osumem_gf", t)] for (m, t) in by if m == "osumem")


def test_runs_of_one_method_under_two_labels_are_computed_once(monkeypatch) -> None:
    """``osumem`` and ``osumem[max_memberships=5]`` are one class with one config: the
    runner evaluates it once and gives the second label the same rows, timing
    included; a run with another config is computed on its own."""
    from osumem.evaluate.runner import evaluate_episode
    from osumem.retrieve.base import Retriever

    calls: list[str] = []
    original = Retriever.retrieve_unit

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(type(self).__name__ + str(self.config.max_memberships))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Retriever, "retrieve_unit", counted)
    ep = next(iter(generate(SyntheticConfig(n_episodes=1), 1000)))
    runs = parse_method_runs(["osumem", "osumem[max_memberships=5]", "osumem_disjoint"])
    rows = evaluate_episode(ep, runs, [64, 256], benchmark="s", seed=1000)
    n = len(ep.queries) * 2
    assert len(rows) == 3 * n
    assert len(calls) == 2 * n  # the default once, the disjoint variant once
    first, second = rows[:n], rows[n : 2 * n]
    assert [r["method"] for r in second] == ["osumem[max_memberships=5]"] * n
    assert [{**r, "method": "x"} for r in first] == [{**r, "method": "x"} for r in second]


@pytest.mark.parametrize(
    "method", ["flat", "flat_mmr", "osumem", "osumem_coverage", "tree", "osumem_adaptive"]
)
def test_retrieve_unit_answers_what_retrieve_answers(method: str) -> None:
    """The runner's path (a query normalised once, then ``retrieve_unit``) selects what
    ``retrieve`` selects for the raw vector, with and without a causal limit."""
    view = make_view(120, 16, seed=3, costs=list(np.random.default_rng(3).integers(5, 40, 120)))
    r = create(method, seed=0).fit(view)
    rng = np.random.default_rng(4)
    for _ in range(10):
        raw = rng.standard_normal(16) * 7.0
        unit = view.check_query(raw)
        for before in (None, 60):
            a = r.retrieve(raw, 200, before=before)
            b = r.retrieve_unit(unit, 200, before=before)
            assert a.positions.tolist() == b.positions.tolist() and a.cost == b.cost


def test_retrieve_unit_refuses_a_query_not_in_check_query_form() -> None:
    from osumem.errors import DimensionError

    view = make_view(20, 8)
    r = create("flat").fit(view)
    with pytest.raises(DimensionError, match="float32 vector of dimension 8"):
        r.retrieve_unit(np.ones(8), 64)  # float64
    with pytest.raises(DimensionError, match="dimension 8"):
        r.retrieve_unit(np.ones(7, dtype=np.float32), 64)


def test_shared_communities_partitions_a_graph_once_and_gives_the_same_pools(
    monkeypatch,
) -> None:
    """Inside ``shared_communities`` a similarity graph seen before is not partitioned
    again; pools built with it equal pools built without it, and outside the block
    every call runs the detection."""
    from osumem.osu import views

    calls: list[int] = []
    original = views._communities

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(views, "_communities", counted)
    view = make_view(300, 16, seed=7)
    configs = [OSUConfig(views=("similarity",), max_memberships=m) for m in (1, 5)]
    alone = [OSUPool.build(view, c, seed=3) for c in configs]
    assert len(calls) == 2
    calls.clear()
    with views.shared_communities():
        shared = [OSUPool.build(view, c, seed=3) for c in configs]
        again = OSUPool.build(make_view(300, 16, seed=8), configs[0], seed=3)
    assert len(calls) == 2  # the two configs share one partition; another view has its own
    for a, b in zip(alone, shared, strict=True):
        assert (a.members != b.members).nnz == 0
        np.testing.assert_array_equal(a.centroids, b.centroids)
    assert again.n_steps == 300
    calls.clear()
    OSUPool.build(view, configs[0], seed=3)
    assert len(calls) == 1
