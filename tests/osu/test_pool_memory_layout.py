"""Memory-saving details of the OSU pool that must not change what it holds."""

from __future__ import annotations

import numpy as np

import osumem.osu.construct as construct_mod
from osumem.bench.scale import generate as generate_scale
from osumem.bench.synthetic import SyntheticConfig, generate_episode
from osumem.osu.config import OSUConfig
from osumem.osu.heap import release_free_memory
from osumem.osu.pool import OSUPool
from osumem.osu.slots import GrowArray
from osumem.osu.views import KnnIndex, similarity_scope


def test_grow_new_entries_hold_fill_whatever_the_spare_capacity_held():
    g = GrowArray((2,), np.int64, fill=-1)
    g.resize(40)
    assert (g.v == -1).all()
    g.a[:40] = 7
    g.resize(10)
    g.a[10:40] = 5  # spare capacity written behind the logical length
    g.resize(41)
    assert (g.v[:10] == 7).all() and (g.v[10:] == -1).all()
    g.resize(42)
    assert (g.v[41] == -1).all()


def test_built_pool_drops_similarity_index_and_later_refresh_matches_kept_index(monkeypatch):
    monkeypatch.setattr(construct_mod, "EXACT_KNN_MAX", 40)
    view = generate_episode(SyntheticConfig(n_episodes=1), 1000, 0).view
    cfg = OSUConfig(similarity_refresh=10, similarity_refresh_ratio=0.0, similarity_scope="all")
    head = view.prefix(min(view.n - 30, 120))
    built = OSUPool.build(head, cfg, 0)
    assert built.similarity.knn is None and built.similarity.knn_pending > 0
    kept = OSUPool.build(head, cfg, 0)
    # as the pool used to keep it: the index over the same scope steps, built at once
    kept.similarity.knn = KnnIndex(head.dim, seed=0)
    kept.similarity.knn.add(
        head.embeddings[similarity_scope(head, cfg)[: kept.similarity.knn_pending]]
    )
    kept.similarity.knn_pending = 0
    for t in range(head.n + 10, view.n + 1, 10):
        built.add(view.prefix(t))
        kept.add(view.prefix(t))
    np.testing.assert_array_equal(built.similarity.partition, kept.similarity.partition)
    assert (built.members != kept.members).nnz == 0
    np.testing.assert_array_equal(built.centroids, kept.centroids)
    release_free_memory()  # harmless anywhere (a no-op without glibc)


def test_grow_headroom_leaves_a_quarter_spare_below_the_size_threshold():
    g = GrowArray((3,), np.float32)
    g.resize(100, headroom=True)
    assert g.n == 100 and g.a.shape[0] == 125
    exact = GrowArray((3,), np.float32)
    exact.resize(100)
    assert exact.a.shape[0] == 100


def test_large_pool_live_centroids_have_headroom_and_small_ones_exact_size(monkeypatch):
    view = generate_scale(2000, 16, 0).view
    head = view.prefix(view.n - 300)
    small = OSUPool.build(head, OSUConfig(), 0)
    n_live = small.slots.live_slot.n
    assert small.slots.live_cent.a.shape[0] == n_live  # the efficiency tables' size
    monkeypatch.setattr(construct_mod, "HEADROOM_MIN", head.n)  # "a large pool"
    large = OSUPool.build(head, OSUConfig(), 0)
    assert large.slots.live_slot.n == n_live
    table = large.slots.live_cent.a
    assert table.shape[0] == n_live + n_live // 4
    for t in range(head.n + 1, view.n + 1):
        large.add(view.prefix(t))
        small.add(view.prefix(t))
    assert large.slots.live_slot.n > n_live  # new OSUs went live ...
    assert large.slots.live_slot.n <= table.shape[0]
    assert large.slots.live_cent.a is table  # ... into the spare rows, no copy
    np.testing.assert_array_equal(large.centroids, small.centroids)


def test_similarity_index_prepared_ahead_gives_the_same_refreshes(monkeypatch):
    monkeypatch.setattr(construct_mod, "EXACT_KNN_MAX", 40)
    view = generate_episode(SyntheticConfig(n_episodes=1), 1000, 0).view
    cfg = OSUConfig(similarity_refresh=10, similarity_refresh_ratio=0.0, similarity_scope="all")
    head = view.prefix(min(view.n - 30, 120))
    plain = OSUPool.build(head, cfg, 0)
    prepared = OSUPool.build(head, cfg, 0)
    assert prepared.prepare_refresh()
    scopes = []
    real_scope = construct_mod.similarity_scope
    monkeypatch.setattr(
        construct_mod, "similarity_scope", lambda *a: scopes.append(1) or real_scope(*a)
    )
    assert not prepared.prepare_refresh()  # under way already: not started twice
    assert scopes == []  # ... and known without reading the scope (every server warm-up asks)
    pre = prepared.similarity.prebuild
    assert pre is not None and pre.size == prepared.similarity.knn_pending
    ahead = pre.result()
    for t in range(head.n + 10, view.n + 1, 10):
        plain.add(view.prefix(t))
        prepared.add(view.prefix(t))
        assert prepared.similarity.prebuild is None
    assert prepared.similarity.knn is ahead  # the refresh took the index built ahead
    np.testing.assert_array_equal(plain.similarity.partition, prepared.similarity.partition)
    assert (plain.members != prepared.members).nnz == 0
    np.testing.assert_array_equal(plain.centroids, prepared.centroids)
    assert not prepared.prepare_refresh()  # the index is held now: nothing to build


def test_similarity_index_is_not_prepared_where_a_refresh_uses_none():
    view = generate_episode(SyntheticConfig(n_episodes=1), 300, 0).view
    pool = OSUPool.build(view, OSUConfig(similarity_scope="all"), 0)  # exact k-NN scope
    assert not pool.prepare_refresh() and pool.similarity.prebuild is None


def test_units_at_equals_units_of_step_by_step():
    """The batched read of the selected steps' units is the per-step one: the same
    units in the same order, for steps given in any order, repeated or not, on a pool
    grown by adds (OSUs split, capped and refreshed)."""
    view = generate_episode(SyntheticConfig(n_episodes=2), 400, 1).view
    cfg = OSUConfig(similarity_refresh=40, max_osu_size=6)
    pool = OSUPool.build(view.prefix(200), cfg, 0)
    for t in range(210, view.n + 1, 10):
        pool.add(view.prefix(t))
    rng = np.random.default_rng(0)
    steps = rng.integers(0, view.n, 300).tolist() + list(range(view.n))
    assert pool.units_at(steps) == [pool.units_of(p) for p in steps]
    assert any(len(pool.units_of(p)) > 1 for p in steps)  # orders are exercised
    assert pool.units_at([]) == []


def test_member_groups_leave_the_garbage_collectors_tracking():
    """A unit's raw members are a tuple of ints, which the collector stops tracking at
    its first collection: a full collection of a large memory does not walk one object
    per unit. Built, grown one step at a time, and restored from its state alike."""
    import gc

    view = generate_scale(600, 16, 0, 10).view
    pool = OSUPool.build(view.prefix(500), OSUConfig(), 0)
    for t in range(501, view.n + 1):
        pool.add(view.prefix(t))
    restored = OSUPool.from_state(view, OSUConfig(), 0, pool.state())
    gc.collect()
    for p in (pool, restored):
        groups = p.slots.members
        assert len(groups) > 100 and all(type(m) is tuple for m in groups)
        assert not any(gc.is_tracked(m) for m in groups)
    assert restored.slots.members == pool.slots.members
