"""Scale paths: incremental pool equal to batch bit for bit, the flat head equal to a
full sort, the HNSW similarity path, and `osumem bench scale` end to end."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_view
from osumem.bench.synthetic import SyntheticConfig, generate_episode
from osumem.osu import OSUConfig, OSUPool
from osumem.osu import views as views_mod
from osumem.retrieve.packing import flat_first_fit, pack_first_fit, top_order
from osumem.retrieve.registry import create

PUBLIC = ("view_codes", "centroids", "costs", "spans", "sizes", "coherence")


def assert_same_pool(a: OSUPool, b: OSUPool) -> None:
    assert (a.members != b.members).nnz == 0
    assert a.members.shape == b.members.shape
    assert list(a.keys) == list(b.keys)
    for name in PUBLIC:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("m_max", [1, 2, 5])
def test_incremental_equals_batch_bit_for_bit_on_annotation_views(m_max):
    view = generate_episode(SyntheticConfig(n_episodes=1), 1001, 0).view
    cfg = OSUConfig(views=("entity", "tool", "subgoal"), max_memberships=m_max)
    inc = OSUPool(cfg, seed=0)
    for t in range(1, view.n + 1):
        inc.add(view.prefix(t))
        if t % 37 == 0:  # reading in between changes nothing
            assert_same_pool(inc, OSUPool.build(view.prefix(t), cfg, seed=0))
    assert_same_pool(inc, OSUPool.build(view, cfg, seed=0))


def test_incremental_equals_batch_when_every_add_refreshes_similarity():
    view = generate_episode(SyntheticConfig(n_episodes=1), 1002, 0).view
    cfg = OSUConfig(similarity_refresh=1, similarity_refresh_ratio=0.0, max_memberships=2)
    inc = OSUPool(cfg, seed=0)
    for t in range(5, view.n + 1, 5):
        inc.add(view.prefix(t))
    inc.add(view)
    assert_same_pool(inc, OSUPool.build(view, cfg, seed=0))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 40),
    seed=st.integers(0, 1000),
    m_max=st.integers(1, 4),
    chunks=st.lists(st.integers(1, 7), min_size=1, max_size=8),
)
def test_incremental_equals_batch_on_random_annotations(n, seed, m_max, chunks):
    rng = np.random.default_rng(seed)
    ents = [set(rng.choice(list("abcd"), size=rng.integers(0, 3)).tolist()) for _ in range(n)]
    tools = rng.choice(["", "t1", "t2"], size=n).tolist()
    subs = rng.choice(["", "s1"], size=n).tolist()
    view = make_view(n, 6, seed=seed, entities=ents, tool_signatures=tools, subgoals=subs)
    cfg = OSUConfig(views=("entity", "tool", "subgoal"), max_memberships=m_max, max_osu_size=4)
    inc = OSUPool(cfg, seed=0)
    t = 0
    for c in chunks:
        t = min(n, t + c)
        inc.add(view.prefix(t))
    inc.add(view)
    assert_same_pool(inc, OSUPool.build(view, cfg, seed=0))


def test_osu_slots_of_follows_osus_of():
    view = generate_episode(SyntheticConfig(n_episodes=1), 1000, 0).view
    pool = OSUPool.build(view, OSUConfig(), seed=0)
    for p in range(0, view.n, 7):
        slots = pool.osu_slots_of(p)
        assert [pool.canonical_key(g)[2] for g in slots] == [
            str(pool.keys[j]) for j in pool.osus_of(p)
        ]


@settings(max_examples=80, deadline=None)
@given(
    scores=st.lists(st.integers(-3, 3), min_size=1, max_size=60),
    k=st.integers(0, 70),
)
def test_top_order_equals_stable_argsort(scores, k):
    s = np.asarray(scores, dtype=np.float32)
    assert top_order(s, k).tolist() == np.argsort(-s, kind="stable")[:k].tolist()


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(1, 3000),
    seed=st.integers(0, 10_000),
    budget=st.integers(1, 3000),
    ties=st.booleans(),
)
def test_flat_first_fit_equals_packing_the_full_sort(n, seed, budget, ties):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 5, n).astype(np.float32) if ties else rng.random(n, dtype=np.float32)
    costs = rng.integers(1, 60, n)
    full = pack_first_fit(np.argsort(-scores, kind="stable"), costs, budget)
    assert flat_first_fit(scores, costs, budget).tolist() == full.tolist()


def test_hnsw_knn_graph_matches_exact_on_clustered_data(monkeypatch):
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((20, 32)).astype(np.float32)
    emb = centres[rng.integers(0, 20, 600)] + 0.3 * rng.standard_normal((600, 32)).astype(
        np.float32
    )
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    src_e, dst_e = views_mod.knn_edges(emb, 10)
    monkeypatch.setattr(views_mod, "EXACT_KNN_MAX", 100)
    src_a, dst_a = views_mod.knn_edges(emb, 10)
    assert src_a.tolist() == src_e.tolist()
    assert not (src_a == dst_a).any()
    exact = dst_e.reshape(600, 10)
    approx = dst_a.reshape(600, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(approx, exact, strict=True)])
    assert recall > 0.9


def test_large_similarity_view_refreshes_from_the_previous_partition(monkeypatch):
    import osumem.osu.construct as construct_mod

    monkeypatch.setattr(construct_mod, "EXACT_KNN_MAX", 50)
    view = generate_episode(SyntheticConfig(n_episodes=1), 1000, 0).view
    cfg = OSUConfig(views=("similarity",), similarity_refresh=20, similarity_refresh_ratio=0.0)
    inc = OSUPool(cfg, seed=0)
    for t in range(60, view.n + 1, 20):
        inc.add(view.prefix(t))
    assert (
        inc.similarity.knn is not None
        and inc.similarity.knn.size == inc.similarity.partition.shape[0]
    )
    assert inc.n_osus > 1
    assert inc.sizes.max() <= cfg.max_osu_size
    # a batch build over the same steps takes the same (approximate) path
    batch = OSUPool.build(view.prefix(inc.similarity.upto), cfg, seed=0)
    assert batch.n_osus > 1


def test_bench_scale_cli_writes_table_json_and_png(tmp_path):
    from osumem.cli import main

    out = tmp_path / "scale"
    res = CliRunner().invoke(
        main,
        [
            "bench", "scale", "--sizes", "300,600", "--dim", "16", "--queries", "5",
            "--agent-steps", "3", "--memory-max", "300", "--agent-max", "300",
            "--out", str(out),
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    data = json.loads((out / "scale.json").read_text())
    methods = {(r["n"], r["method"]) for r in data["rows"]}
    assert {(300, "osumem"), (600, "flat"), (600, "ann_hnsw")} <= methods
    assert any(m.startswith("Memory[") for _, m in methods)
    assert {"osumem", "flat"} <= {r["method"] for r in data["ratios"]}
    assert (out / "scale.png").stat().st_size > 0
    # above --agent-max no agent rounds run (NaN), and the plot still draws
    rounds = [r["agent_step"]["rounds"] for r in data["rows"] if r["n"] == 600]
    assert rounds and set(rounds) == {0}
    assert "| n | method |" in (out / "scale.md").read_text()


def test_bench_scale_rejects_unknown_methods(tmp_path):
    from osumem.cli import main

    res = CliRunner().invoke(
        main, ["bench", "scale", "--sizes", "300", "--methods", "nope", "--out", str(tmp_path)]
    )
    assert res.exit_code == 2
    assert "unknown method" in res.output


def _big_view(n=1500, dim=24, seed=0):
    from osumem.bench.scale import generate

    return generate(n, dim, seed, n_queries=20)


def test_ann_paths_stay_within_budget_and_near_the_exact_answer(monkeypatch):
    import osumem.retrieve.step_index as step_index

    data = _big_view()
    exact = {m: create(m, seed=0).fit(data.view) for m in ("flat", "flat_mmr", "osumem")}
    answers = {
        m: [set(r.retrieve(q, 256).positions.tolist()) for q in data.queries]
        for m, r in exact.items()
    }
    monkeypatch.setattr(step_index, "ANN_MIN_STEPS", 1000)
    for m in ("flat", "flat_mmr", "osumem"):
        r = create(m, seed=0).fit(data.view)
        overlap = []
        for q, want in zip(data.queries, answers[m], strict=True):
            sel = r.retrieve(q, 256)
            assert sel.cost <= 256
            got = set(sel.positions.tolist())
            overlap.append(len(got & want) / max(1, len(want)))
        assert r.step_index.hnsw is not None and r.step_index.hnsw.size == data.view.n
        assert np.mean(overlap) > 0.8, m
        # causal queries never use the index
        assert (r.retrieve(data.queries[0], 256, before=500).positions < 500).all()


def test_fit_builds_the_step_index_as_the_first_query_would(monkeypatch):
    """The step index built on a second thread during fit is the one a first query
    builds (single-threaded insertion): the same answers, query for query."""
    import osumem.retrieve.step_index as step_index

    monkeypatch.setattr(step_index, "ANN_MIN_STEPS", 1000)
    data = _big_view()
    eager = create("osumem", seed=0).fit(data.view)
    assert eager.step_index.hnsw is not None and eager.step_index.hnsw.size == data.view.n
    assert eager._centroid_index is not None
    lazy = create("osumem", seed=0).fit(data.view)
    lazy.step_index.reset()  # as before: built by the first query
    lazy._centroid_index = None
    for q in data.queries:
        assert eager.retrieve(q, 256).positions.tolist() == lazy.retrieve(q, 256).positions.tolist()
        np.testing.assert_array_equal(
            eager.step_index.top(eager.view_, q, 40), lazy.step_index.top(lazy.view_, q, 40)
        )


def test_ann_fill_skips_excluded_steps_as_the_cost_trick_did(monkeypatch):
    """The index fill drops excluded steps from the head; the result equals first fit
    over the head with those steps priced out of the budget."""
    import osumem.retrieve.step_index as step_index
    from osumem.retrieve.packing import pack_first_fit

    monkeypatch.setattr(step_index, "ANN_MIN_STEPS", 1000)
    data = _big_view()
    r = create("flat", seed=0).fit(data.view)
    costs = data.view.costs
    cheapest = np.flatnonzero(costs == costs.min())
    for i, q in enumerate(data.queries):
        budget = 100 + 40 * i
        exclude = r.step_index.top(r.view_, q, 30)[i % 3 :: 3]
        if i % 4 == 0:
            exclude = np.concatenate([exclude, cheapest])  # every cheapest step excluded
        got = r._flat_pack(q, data.view.n, budget, exclude=exclude)
        priced = costs.copy()
        priced[exclude] = budget + 1
        k = max(32, 4 * int(np.ceil(budget / float(costs.mean()))))
        while True:  # the former loop: a growing head, stopped when nothing can fit
            want = pack_first_fit(r.step_index.top(r.view_, q, k), priced, budget)
            if k >= data.view.n or budget - int(priced[want].sum()) < int(priced.min()):
                break
            k = min(data.view.n, 4 * k)
        assert got.tolist() == want.tolist()
        assert not set(got.tolist()) & set(exclude.tolist())


def _grown_with_centroid_index(monkeypatch, n=1400):
    """An osumem retriever on the centroid index path, grown by one step per round from
    1,200 steps (a query after each add), and its data."""
    import osumem.retrieve.step_index as step_index

    monkeypatch.setattr(step_index, "ANN_MIN_STEPS", 1000)
    data = _big_view(n)
    r = create("osumem", seed=0).fit(data.view.prefix(1200))
    r.retrieve(data.queries[0], 256)
    for t in range(1201, n + 1):
        r.update(data.view.prefix(t)).retrieve(data.queries[t % 20], 256)
    return r, data


def test_centroid_index_follows_the_pool_through_adds(monkeypatch):
    """Every live OSU is in the index at its current centroid or pending (answered by
    every query); dead ones are in neither; at most PENDING_MAX are pending. The index
    holds each distinct centroid once, under a label standing for the slots that
    share it, and no other label is searched."""
    from osumem.retrieve.centroids import PENDING_MAX

    r, _ = _grown_with_centroid_index(monkeypatch)
    index = r._centroid_index
    assert index is not None
    index.sync()
    pool = r.fitted_pool
    live = set(pool.live_arrays()[0].tolist())
    pending = set(index._pending)
    assert 0 < len(pending) <= PENDING_MAX and pending <= live
    groups = index.groups()
    indexed = {s for slots in groups.values() for s in slots}
    assert sum(len(slots) for slots in groups.values()) == len(indexed)  # one group each
    assert indexed | pending == live
    searched = set(index._index.get_ids_list()) - set(index._free)
    assert searched == set(groups)
    rows, _, _ = pool.slot_arrays()
    cents = pool.live_arrays()[1]
    held = {g: np.asarray(index._index.get_items([g]))[0] for g in groups}
    assert len({v.tobytes() for v in held.values()}) == len(held)  # distinct centroids
    for g, slots in groups.items():
        for s in set(slots) - pending:
            np.testing.assert_allclose(held[g], cents[rows[s]], atol=1e-6)


def test_centroid_index_answers_the_pending_osus_and_indexes_each_once(monkeypatch):
    """A query's candidates include every pending OSU (so the coarse stage keeps the
    exact scan's OSUs after adds, as it does after a fit), and an OSU that changes at
    many adds in a row is (re)indexed fewer times than it changed."""
    import osumem.retrieve.centroids as centroids

    added: list[int] = []
    real = centroids.CentroidIndex._index_oldest

    def counting(self, pending, count):
        added.extend(list(pending)[: max(0, count)])
        return real(self, pending, count)

    monkeypatch.setattr(centroids.CentroidIndex, "_index_oldest", counting)
    changed: list[int] = []
    real_sync = centroids.CentroidIndex.sync

    def sync(self):
        if self._index is not None and self.epoch == self.pool.epoch:
            found = self.pool.changes_since(self.epoch, self.position)
            sizes = self.pool.slot_arrays()[2]
            changed.extend(g for g in dict.fromkeys(found or []) if sizes[g] > 0)
        return real_sync(self)

    monkeypatch.setattr(centroids.CentroidIndex, "sync", sync)
    monkeypatch.setattr(centroids, "PENDING_MAX", 8)
    r, data = _grown_with_centroid_index(monkeypatch)
    assert added and len(added) < len(changed) / 2
    assert len(r._centroid_index._pending) <= 8
    exact = create("osumem", seed=0).fit(data.view)
    index = r._centroid_index
    # a re-indexed OSU leaves its group and an emptied group's label is reused: the
    # index holds no more labels than there are live OSUs
    n_live = r.fitted_pool.live_arrays()[0].size
    assert index._n_labels == len(index.groups()) + len(index._free) <= n_live
    pending = set(index._pending)
    same = []
    for q in data.queries:
        qn = exact.view_.check_query(q)
        found = index.query(qn, 5)
        assert found is not None and pending <= set(found.tolist())
        assert len(set(found.tolist())) == found.shape[0]
        got = set(r._coarse_positions(qn, 256).tolist())
        want = set(exact._coarse_positions(qn, 256).tolist())
        same.append(len(got & want) / max(1, len(want)))
    assert np.mean(same) > 0.9


def test_without_hnswlib_large_graphs_are_exact_blockwise(monkeypatch):
    rng = np.random.default_rng(3)
    emb = rng.standard_normal((300, 8)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    src, dst = views_mod.knn_edges(emb, 5)
    monkeypatch.setattr(views_mod, "hnsw_available", lambda: False)
    monkeypatch.setattr(views_mod, "EXACT_KNN_MAX", 64)
    src_b, dst_b = views_mod.knn_edges(emb, 5)
    assert src_b.tolist() == src.tolist()
    assert [set(r) for r in dst_b.reshape(300, 5).tolist()] == [
        set(r) for r in dst.reshape(300, 5).tolist()
    ]


def test_osus_of_reads_the_rows_and_matches_the_membership_matrix():
    view = generate_episode(SyntheticConfig(n_episodes=1), 1001, 0).view
    pool = OSUPool.build(view.prefix(120), OSUConfig(), seed=0)
    pool.add(view)
    got = [pool.osus_of(p).tolist() for p in range(view.n)]  # before any assembly
    csr = pool.members.tocsr()
    assert got == [
        sorted(csr.indices[csr.indptr[p] : csr.indptr[p + 1]].tolist()) for p in range(view.n)
    ]


def _grown_step_index(data, keep_up: int):
    import osumem.retrieve.step_index as step_index

    r = create("osumem", seed=0)
    r.step_index.background = True
    r.fit(data.view.prefix(1200))
    r.wait_ready()
    sizes = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(step_index, "KEEP_UP_STEPS", keep_up)
        for t in range(1201, 1401):
            r.update(data.view.prefix(t))
            sizes.append(r.step_index.hnsw.size)
    r.wait_ready()
    return r, sizes


def test_step_index_keeps_up_at_updates_with_the_same_graph(monkeypatch):
    """With background builds, an update inserts the steps the step index lacks once
    at least KEEP_UP_STEPS wait (at most CATCHUP_STEPS), so no single query inserts a
    long run; fewer wait for a query or a later update. The index then holds the steps
    in the same order as one extended only when asked: the same graph, byte for byte,
    and the same answers."""
    import osumem.retrieve.step_index as step_index

    monkeypatch.setattr(step_index, "ANN_MIN_STEPS", 1000)
    data = _big_view(1400)
    kept, sizes = _grown_step_index(data, step_index.KEEP_UP_STEPS)
    k = step_index.KEEP_UP_STEPS
    assert sizes == [1200 + (t - 1200) // k * k for t in range(1201, 1401)]
    lazy, lazy_sizes = _grown_step_index(data, 10**9)  # never at an update
    assert lazy_sizes == [1200] * 200
    a, b = (
        kept.step_index.hnsw.knn._index.__getstate__()[0],
        lazy.step_index.hnsw.knn._index.__getstate__()[0],
    )
    assert a["cur_element_count"] == b["cur_element_count"] == 1400
    for name in ("data_level0", "link_lists", "label_lookup_external"):
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    np.testing.assert_array_equal(a["element_levels"][:1400], b["element_levels"][:1400])
    for q in data.queries:
        for budget in (256, 1024):
            np.testing.assert_array_equal(
                kept.retrieve(q, budget).positions, lazy.retrieve(q, budget).positions
            )
