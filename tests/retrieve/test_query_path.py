"""OSU-Mem's query path: the faster novelty greedy, the skipped fill and the cached
cost statistics give the answers of the reference construction, exact and with the
HNSW indexes."""

import numpy as np
import pytest

from conftest import make_view
from osumem.retrieve.packing import greedy_pack, novelty_pack, pack_first_fit
from osumem.retrieve.registry import create


def _greedy_reference(r, cand, relevance, budget, gamma):
    """The novelty greedy as :func:`greedy_pack` with the penalty as its update."""
    H = r.view_.embeddings[cand]
    max_sim = np.zeros(cand.shape[0])

    def on_pick(j):
        nonlocal max_sim
        new_max = np.maximum(max_sim, (H @ H[j]).astype(np.float64))
        delta = -gamma * (new_max - max_sim)
        max_sim = new_max
        return delta

    return greedy_pack(relevance.astype(np.float64), cand, r.view_.costs, budget, on_pick)


@pytest.mark.parametrize("seed", range(12))
def test_novelty_pack_equals_greedy_pack_with_the_penalty(seed):
    rng = np.random.default_rng(seed)
    n, dim = int(rng.integers(1, 90)), 6
    emb = rng.standard_normal((n, dim))
    emb[1::4] = emb[0]  # duplicates: equal scores and equal penalties
    costs = rng.integers(1, 60, size=n)
    r = create("osumem", seed=0).fit(make_view(n, dim, embeddings=emb, costs=costs.tolist()))
    q = r.view_.check_query(rng.standard_normal(dim))
    for budget in (1, 40, 150, 1000):
        for gamma in (0.0, 0.2, 1.5):
            cand = rng.permutation(n)[: int(rng.integers(0, n + 1))].astype(np.int64)
            rel = (r.view_.embeddings[cand] @ q).astype(np.float32)
            rel[::3] = np.round(rel[::3], 1)  # ties in relevance
            got = novelty_pack(r.view_.embeddings, r.view_.costs, cand, rel, budget, gamma)
            want = _greedy_reference(r, cand, rel, budget, gamma)
            assert got.tolist() == want.tolist()
            rows = r.view_.embeddings[cand]  # the candidates' rows gathered by the caller
            again = novelty_pack(r.view_.embeddings, r.view_.costs, cand, rel, budget, gamma, rows)
            assert again.tolist() == want.tolist()
            assert int(costs[got].sum()) <= budget


def _reference_select(r, q, budget):
    """OSU-Mem's selection as constructed before the query-path changes: coarse
    positions, the greedy reference, and the flat fill whenever budget is left."""
    cfg = r.config
    costs = r.view_.costs
    cand = r._coarse_positions(q, budget)
    ann = r.step_index.uses_ann(r.view_, r.view_.n)
    cos = r.view_.embeddings[cand] @ q if ann else r._cosines(q, r.view_.n)[cand]
    order = np.argsort(-cos, kind="stable")
    cand, rel = cand[order], cos[order]
    if cfg.novelty and budget >= cfg.novelty_min_budget and cand.size:
        chosen = _greedy_reference(r, cand, rel, budget, cfg.novelty_weight)
    else:
        chosen = pack_first_fit(cand, costs, budget)
    left = budget - int(costs[chosen].sum())
    if left <= 0:
        return chosen
    return np.concatenate([chosen, r._flat_pack(q, r.view_.n, left, exclude=chosen)])


@pytest.mark.parametrize("ann", [False, True])
def test_selection_equals_the_reference_construction(ann):
    from osumem.bench.scale import generate

    data = generate(1500, 24, 0, n_queries=12)
    r = create("osumem", seed=0)
    if ann:
        r.ann_min_steps = 1000
    r.fit(data.view)
    assert r.step_index.uses_ann(r.view_, data.view.n) == ann
    skipped = 0
    for i, q in enumerate(data.queries):
        qn = r.view_.check_query(q)
        for budget in (64, 200, 256, 700):
            got = r.retrieve(q, budget).positions
            want = _reference_select(r, qn, budget)
            assert got.tolist() == want.tolist(), (i, budget)
            left = budget - int(data.view.costs[got].sum())
            skipped += 0 < left < int(data.view.costs.min())
    assert skipped  # the skipped fill was exercised


def test_cost_stats_carried_over_through_adds_equal_a_fresh_computation():
    from osumem.bench.scale import generate

    data = generate(400, 16, 1, n_queries=2)
    r = create("osumem", seed=0).fit(data.view.prefix(300))
    r.retrieve(data.queries[0], 256)
    for t in range(301, 401, 7):
        view = data.view.prefix(t)
        r.update(view)
        mean, low, n_low = r.step_index.cost_stats(r.view_)
        costs = view.costs
        assert r.step_index._cost_view is view
        assert mean == float(costs.mean())
        assert low == int(costs.min())
        assert n_low == int(np.count_nonzero(costs == costs.min()))
        for tokens in (0, int(costs.min()), int(np.median(costs)), int(costs.max()), 10**6):
            want = int(np.count_nonzero(costs <= tokens))
            assert r.step_index.n_costing_at_most(r.view_, tokens) == want, (t, tokens)
    # a view that is not an extension of the cached one is recomputed, not carried
    other = make_view(50, 16, costs=[5] * 50)
    r.fit(other)
    assert r.step_index.cost_stats(r.view_) == (5.0, 5, 50)
    assert r.step_index.n_costing_at_most(r.view_, 4) == 0
    assert r.step_index.n_costing_at_most(r.view_, 5) == 50


def test_steps_costing_past_the_histogram_are_counted():
    """Costs above the histogram's range are counted too, carried through adds."""
    from osumem.retrieve.step_index import COST_HIST_MAX

    big = [3, COST_HIST_MAX, COST_HIST_MAX + 1, 5 * COST_HIST_MAX, 7]
    view = make_view(60, 8, costs=(big * 12))
    r = create("flat", seed=0).fit(view.prefix(30))
    r.step_index.cost_stats(r.view_)
    r.step_index.extend_cost_stats(r.view_, view)
    costs = view.costs
    for tokens in (2, 3, COST_HIST_MAX - 1, COST_HIST_MAX, COST_HIST_MAX + 1, 6 * COST_HIST_MAX):
        want = int(np.count_nonzero(costs <= tokens))
        assert r.step_index.n_costing_at_most(view, tokens) == want, tokens


@pytest.mark.parametrize("refresh_every", [0, 4])
def test_live_units_total_cost_kept_through_adds_equals_a_fresh_count(refresh_every):
    """The pool's running total of the live units' cost (the coarse stage's mean unit
    cost reads it) equals summing the live units' costs, after every add, with and
    without similarity refreshes (full re-derivations) among them."""
    from osumem.bench.scale import generate

    data = generate(400, 16, 1, n_queries=2)
    cfg = {"similarity_refresh": refresh_every, "similarity_refresh_ratio": 0.0}
    cfg = cfg if refresh_every else {}
    r = create("osumem", cfg, seed=0).fit(data.view.prefix(250))
    r.retrieve(data.queries[0], 256)
    epochs = set()
    for t in range(251, 401, 2):
        r.update(data.view.prefix(t))
        pool = r.fitted_pool
        epochs.add(pool.epoch)
        live = pool.live_arrays()[0]
        want = int(pool.slot_arrays()[1][live].sum())
        assert pool.slots.live_cost() == want
        assert r._mean_osu_cost() == float(want) / live.size
        r.retrieve(data.queries[t % 2], 256)
    assert (len(epochs) > 5) == bool(refresh_every)


def test_kept_union_is_the_union_of_the_slots_members():
    from osumem.bench.scale import generate

    data = generate(800, 16, 2, n_queries=1)
    r = create("osumem", seed=0).fit(data.view)
    pool = r.fitted_pool
    rng = np.random.default_rng(0)
    for size in (0, 1, 2, 5, 40):
        slots = rng.choice(pool.n_slots, size=size, replace=False).astype(np.int64)
        want = sorted({p for s in slots.tolist() for p in pool.slot_members(s)})
        got = pool.kept_union(slots)
        assert got.dtype == np.int64
        assert got.tolist() == want


def test_coarse_positions_cover_the_exact_top_k_with_the_centroid_index():
    """The centroid index path keeps the same OSUs as the exact scan on a small
    memory (its candidates are re-scored exactly)."""
    from osumem.bench.scale import generate

    data = generate(1500, 24, 0, n_queries=12)
    ann = create("osumem", seed=0)
    ann.ann_min_steps = 1000
    ann.fit(data.view)
    exact = create("osumem", seed=0).fit(data.view)
    same = []
    for q in data.queries:
        qn = exact.view_.check_query(q)
        for budget in (128, 512):
            a = set(ann._coarse_positions(qn, budget).tolist())
            e = set(exact._coarse_positions(qn, budget).tolist())
            same.append(len(a & e) / max(1, len(e)))
    assert ann._centroid_index is not None
    assert np.mean(same) > 0.9


@pytest.mark.parametrize("m", [3, 10, 64, 65, 300])
def test_top_slots_take_the_best_k_with_ties_by_canonical_order(m):
    from osumem.bench.scale import generate
    from osumem.retrieve.centroids import top_slots

    data = generate(800, 16, 2, n_queries=1)
    pool = create("osumem", seed=0).fit(data.view).fitted_pool
    rng = np.random.default_rng(m)
    live = pool.live_arrays()[0]
    for trial in range(20):
        slots = rng.choice(live, size=min(m, live.size), replace=False).astype(np.int64)
        scores = rng.integers(0, 4 if trial % 2 else 1000, size=slots.size) / 7.0
        for k in (1, 2, slots.size // 2, slots.size - 1, slots.size):
            if k < 1:
                continue
            got = set(top_slots(pool, slots, scores.astype(np.float32), k).tolist())
            ranked = sorted(
                range(slots.size), key=lambda i: (-scores[i], pool.canonical_key(int(slots[i])))
            )
            assert got == {int(slots[i]) for i in ranked[:k]}


@pytest.mark.parametrize("widened_finds_it", [True, False])
def test_coarse_stage_widens_a_stuck_centroid_beam_then_scans(widened_finds_it, monkeypatch):
    """A centroid index answer the safeguard is unsure of is asked again with a wider
    beam, kept when that answer is clear, and replaced by scoring every centroid when
    it is not: either way the coarse stage keeps the exact scan's OSUs here."""
    from osumem.bench.scale import generate
    from osumem.retrieve.centroids import CentroidIndex

    data = generate(1500, 24, 0, n_queries=12)
    ann = create("osumem", seed=0)
    ann.ann_min_steps = 1000
    ann.fit(data.view)
    exact = create("osumem", seed=0).fit(data.view)
    pool = ann.fitted_pool
    slots, cents = pool.live_arrays()
    asked = []

    def query(self, q, k, ef=None):
        asked.append(ef)
        scores = cents @ q
        if ef is None or not widened_finds_it:
            scores = -scores  # a beam stuck far from the query
        return slots[np.argsort(-scores, kind="stable")[:k]]

    monkeypatch.setattr(CentroidIndex, "query", query)
    for q in data.queries:
        qn = exact.view_.check_query(q)
        got = ann._coarse_positions(qn, 256)
        assert got.tolist() == exact._coarse_positions(qn, 256).tolist()
    index = ann._centroid_index
    assert len(asked) == 2 * len(data.queries) and None not in asked[1::2]
    if widened_finds_it:
        assert (index.raised, index.fallbacks) == (len(data.queries), 0)
    else:
        assert (index.raised, index.fallbacks) == (0, len(data.queries))


def test_sample_mean_gives_the_mean_cosine_of_its_rows():
    from osumem.retrieve.step_index import SampleMean, clear_share

    rng = np.random.default_rng(3)
    rows = rng.standard_normal((300, 24)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    for sample in (rows, rows[::7], rows[:1]):  # whole, strided, one row
        for q in rows[:20]:
            got = SampleMean(sample).cosine(q)
            want = float((sample.astype(np.float64) @ q.astype(np.float64)).mean())
            assert isinstance(got, float) and got == pytest.approx(want, abs=1e-6)
    assert SampleMean(rows[:0]).cosine(rows[0]) is None
    found = np.array([0.9, 0.8], dtype=np.float32)
    assert clear_share(found, None, 2, 300) == 0.0  # no background: nothing is clear
    # far = 1 - 0.1 = 0.9 against 1.5 * (1 - cos): 0.15 and 0.3 are both clear
    assert clear_share(found, 0.1, 2, 300) == 1.0
    # far = 0.3: cosines .9 and .8 are clear (1.5 x .1 and 1.5 x .2 <= .3), .7 is not
    assert clear_share(np.array([0.9, 0.8, 0.7]), 0.7, 3, 300) == pytest.approx(2 / 3)


def test_safeguard_samples_are_summed_once_per_state(monkeypatch):
    """The coarse stage's sample of the live centroids is summed once per pool state,
    the step index's sample of the steps once per view: queries of an unchanged
    memory each take one dot product; a changed one is summed again."""
    from osumem.bench.scale import generate
    from osumem.retrieve import osumem as osumem_module
    from osumem.retrieve import step_index as step_index_module

    made = []
    real = step_index_module.SampleMean

    def counting(rows):
        made.append(rows.shape[0])
        return real(rows)

    monkeypatch.setattr(osumem_module, "SampleMean", counting)
    monkeypatch.setattr(step_index_module, "SampleMean", counting)
    data = generate(1500, 24, 0, n_queries=6)
    r = create("osumem", seed=0)
    r.ann_min_steps = 1000
    r.fit(data.view.prefix(1400))
    for q in data.queries:
        r._coarse_positions(r.view_.check_query(q), 256)
        r.step_index.top(r.view_, r.view_.check_query(q), 16)
    assert len(made) == 2  # one centroid sample, one step sample
    r.update(data.view.prefix(1401))
    r._coarse_positions(r.view_.check_query(data.queries[0]), 256)
    r.step_index.top(r.view_, r.view_.check_query(data.queries[0]), 16)
    assert len(made) == 4
