"""The batch construction's flat-array pieces give exactly what the per-group
definitions give: member sums bit for bit, the same raw groups, the same pool."""

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from restore_case import restore_case

from conftest import make_view
from osumem.osu import OSUConfig, OSUPool, construct
from osumem.osu.sums import STATS_CHUNK, member_stats, row_sum, segment_stats
from osumem.osu.views import (
    annotation_group_arrays,
    community_group_arrays,
    split_segments,
    step_keys,
)


def _random_groups(rng: np.random.Generator, n: int, n_groups: int) -> list[np.ndarray]:
    return [
        np.sort(rng.choice(n, size=int(rng.integers(1, 21)), replace=False))
        for _ in range(n_groups)
    ]


@pytest.mark.parametrize("n_groups", [1, 7, STATS_CHUNK + 45])
def test_segment_stats_equal_member_stats_bit_for_bit(n_groups):
    """Sums in the same order give the same bits: norms and centroids of groups given
    as segments equal those of the same groups as sparse columns, over several chunks,
    with exact zeros, negative zeros and a zero row in the embeddings."""
    rng = np.random.default_rng(n_groups)
    n, d = 400, 24
    emb = rng.standard_normal((n, d)).astype(np.float32)
    emb[rng.random((n, d)) < 0.2] = 0.0
    emb[rng.random((n, d)) < 0.1] = -0.0
    emb[3] = 0.0
    groups = _random_groups(rng, n, n_groups)
    groups[0] = np.array([3])  # a group whose sum is zero
    steps = np.concatenate(groups)
    bounds = np.r_[0, np.cumsum([g.shape[0] for g in groups])].astype(np.int64)
    gids = np.repeat(np.arange(n_groups), np.diff(bounds))
    mat = sp.csc_matrix((np.ones(steps.shape[0]), (steps, gids)), shape=(n, n_groups))
    want_c = np.empty((n_groups, d), dtype=np.float32)
    want = member_stats(mat, emb, np.arange(n_groups), out=want_c)
    got_c = np.empty((n_groups, d), dtype=np.float32)
    got = segment_stats(emb, steps, bounds, out=got_c)
    assert got.tobytes() == want.tobytes()
    assert got_c.tobytes() == want_c.tobytes()
    assert segment_stats(emb, steps, bounds).tobytes() == want.tobytes()
    assert got[0] == 0.0 and not got_c[0].any()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_row_sum_is_a_loop_of_additions_bit_for_bit(seed):
    """The incremental path's group sum: the bits (zeros' signs included) of adding the
    rows one after another to 0.0 in float64, in the given order, for any row count."""
    rng = np.random.default_rng(seed)
    n, d = 300, 40
    emb = rng.standard_normal((n, d)).astype(np.float32) * 10.0 ** rng.integers(-6, 6, (n, 1))
    emb[rng.random((n, d)) < 0.2] = 0.0
    emb[rng.random((n, d)) < 0.1] = -0.0
    emb[:5] = -0.0
    for k in (0, 1, 2, 3, 17, 64, 299):
        rows = [int(r) for r in rng.permutation(n)[:k]] if k > 5 else list(range(k))
        want = np.zeros((1, d), dtype=np.float64)
        for r in rows:
            want[0] += emb[r]
        got = row_sum(emb, rows)
        assert got.shape == (1, d) and got.dtype == np.float64
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("seed", [0, 1])
def test_annotation_group_arrays_equal_per_key_split_with_non_string_keys(seed):
    """Keys that are not strings (numbers) or empty (None, "") are read as the per-step
    definition reads them: falsy values carry no key, the rest by ``str``."""
    rng = np.random.default_rng(seed)
    n = 200
    values = ["", None, 7, "t1", "t2", 0, "7"]
    tools = [values[int(i)] for i in rng.integers(0, len(values), size=n)]
    subs = [str(rng.choice(["", "s1", "s2"])) for _ in range(n)]
    ents = [set(rng.choice(list("abcde"), size=rng.integers(0, 3)).tolist()) for _ in range(n)]
    view = make_view(n, 8, entities=ents, tool_signatures=tools, subgoals=subs)
    cfg = OSUConfig(gap=2, max_osu_size=4)
    for name in ("entity", "tool", "subgoal"):
        by_key: dict[str, list[int]] = defaultdict(list)
        for p, key in step_keys(view, name):
            by_key[key].append(p)
        want = [
            (key, seg.tolist())
            for key, pos in by_key.items()
            for seg in split_segments(np.asarray(pos), cfg.split_threshold(name), 4)
        ]
        keys, pos, bounds = annotation_group_arrays(view, name, cfg)
        got = [
            (k, pos[a:b].tolist()) for k, a, b in zip(keys, bounds[:-1], bounds[1:], strict=True)
        ]
        assert got == want
        assert all(type(k) is str for k in keys)
    # a view of a prefix reads only its own steps
    keys, pos, _ = annotation_group_arrays(view.prefix(50), "tool", cfg)
    assert pos.size and pos.max() < 50


def test_community_group_arrays_equal_per_community_chunks():
    rng = np.random.default_rng(3)
    scope = np.sort(rng.choice(500, size=120, replace=False)).astype(np.int64)
    labels = rng.integers(0, 9, size=scope.shape[0])
    comms = [np.flatnonzero(labels == c) for c in range(9)]
    keys, pos, bounds = community_group_arrays(scope, comms, OSUConfig(max_osu_size=5))
    want = [
        (f"community{c}", seg.tolist())
        for c, members in enumerate(comms)
        for seg in split_segments(scope[members], float("inf"), 5)
    ]
    got = [(k, pos[a:b].tolist()) for k, a, b in zip(keys, bounds[:-1], bounds[1:], strict=True)]
    assert got == want
    empty = community_group_arrays(scope, [], OSUConfig())
    assert empty[0] == [] and empty[1].size == 0 and empty[2].tolist() == [0]


def test_build_equals_a_rederivation_of_its_own_slots():
    """The batch build derives from the arrays it grouped; re-deriving the same pool
    from its slots (the path a similarity refresh takes) changes nothing."""
    rng = np.random.default_rng(5)
    n = 240
    ents = [set(rng.choice(list("abcdefgh"), size=rng.integers(0, 3)).tolist()) for _ in range(n)]
    tools = [str(rng.choice(["", "t1", "t2", "t3"])) for _ in range(n)]
    view = make_view(n, 16, entities=ents, tool_signatures=tools, seed=5)
    for cfg in (OSUConfig(), OSUConfig(similarity_scope="all", max_memberships=2)):
        pool = OSUPool.build(view, cfg, seed=1)
        before = pool.state()
        cent = pool.slots.live_cent.v.copy()
        keys, members = list(pool.slots.keys), list(pool.slots.members)
        construct.rebuild(pool, view, construct.refresh_similarity(pool, view))
        after = pool.state()
        assert pool.slots.keys == keys and pool.slots.members == members
        assert before.keys() == after.keys()
        for k in before:
            assert np.array_equal(before[k], after[k]), k
        assert pool.slots.live_cent.v.tobytes() == cent.tobytes()


def test_leiden_partition_is_reused_for_the_same_graph_only(monkeypatch):
    """Inside ``shared_communities``, two pools whose settings differ only in the
    membership cap run Leiden once; the remembered partition is the one a fresh run
    gives; another seed or graph runs Leiden again, and so does every build outside."""
    import leidenalg

    from osumem.osu import views

    calls = []
    real = leidenalg.find_partition

    def counting(*args, **kwargs):
        calls.append(kwargs.get("seed"))
        return real(*args, **kwargs)

    monkeypatch.setattr(leidenalg, "find_partition", counting)
    view = make_view(150, 16, seed=2)
    with views.shared_communities():
        a = OSUPool.build(view, OSUConfig(views=("similarity",)), seed=4)
        b = OSUPool.build(view, OSUConfig(views=("similarity",), max_memberships=1), seed=4)
        assert len(calls) == 1
        assert repr(a.raw_groups()) == repr(b.raw_groups())
        OSUPool.build(view, OSUConfig(views=("similarity",)), seed=5)
        OSUPool.build(view.prefix(149), OSUConfig(views=("similarity",)), seed=4)
        assert len(calls) == 3
        comms = views.communities(150, np.array([0, 1]), np.array([1, 2]), "leiden", 0)
        again = views.communities(150, np.array([0, 1]), np.array([1, 2]), "leiden", 0)
        assert len(calls) == 4
        with pytest.raises(ValueError):
            again[0][0] = 7
        assert [c.tolist() for c in comms] == [c.tolist() for c in again]
    fresh = OSUPool.build(view, OSUConfig(views=("similarity",)), seed=4)
    assert len(calls) == 5  # outside the block every build runs Leiden
    assert repr(fresh.raw_groups()) == repr(a.raw_groups())
    fresh_state, a_state = fresh.state(), a.state()
    for g in fresh_state:
        assert np.array_equal(fresh_state[g], a_state[g])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_labels_to_incidence_and_coarse_to_fine_read_the_csr_arrays_exactly(seed):
    """The incidence built from CSR arrays equals the COO-built one entry for entry,
    and coarse-to-fine's member hits equal the sparse slicing they replace."""
    from osumem.retrieve.groups import _column_sums, coarse_to_fine, labels_to_incidence

    rng = np.random.default_rng(seed)
    n = 300
    labels = rng.integers(-1, 25, size=n)
    got = labels_to_incidence(labels)
    keep = labels >= 0
    want = sp.csr_matrix(
        (np.ones(int(keep.sum()), dtype=np.float32), (labels[keep], np.flatnonzero(keep))),
        shape=(int(labels.max()) + 1, n),
    )
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.array_equal(got.indptr, want.indptr)
    assert np.array_equal(got.indices, want.indices)
    assert np.array_equal(got.data, want.data)
    assert labels_to_incidence(np.full(4, -1)).shape == (0, 4)
    step_cos = rng.standard_normal(200)
    centroid_cos = rng.standard_normal(got.shape[0])
    for members in (got, sp.csr_matrix(rng.random((25, n)) < 0.05, dtype=np.float32)):
        for k in (1, 5, 25):
            order = np.argsort(-centroid_cos, kind="stable")[:k]
            want_sums = np.asarray(members[order][:, :200].sum(axis=0)).ravel()
            sums = _column_sums(members, order, 200)
            assert sums.tobytes() == want_sums.tobytes()
            hit = want_sums > 0
            cand = np.flatnonzero(hit)
            cand = cand[np.argsort(-step_cos[cand], kind="stable")]
            got_cand, got_order = coarse_to_fine(step_cos, centroid_cos, members, k)
            assert got_cand.tolist() == cand.tolist() and got_order.tolist() == order.tolist()
    # other sparse formats take the general path
    csc = got.tocsc()
    assert np.array_equal(
        _column_sums(csc, np.array([0, 3]), 50), _column_sums(got, np.array([0, 3]), 50)
    )


def test_the_state_written_later_is_the_state_at_the_call(monkeypatch):
    """A snapshot's second part, run after the pool took further adds (which extend
    slots' member lists and add slots), writes the arrays the pool had at the first
    part's call, bit for bit, across several pieces of slots."""
    from osumem.osu import pool_state
    from osumem.osu.construct import grown_prefix

    monkeypatch.setattr(pool_state, "LATER_PIECE", 7)
    view = make_view(
        160,
        8,
        seed=4,
        tool_signatures=[f"t{i % 5}" for i in range(160)],
        entities=[{f"e{i % 11}"} for i in range(160)],
    )
    pool = OSUPool.build(grown_prefix(view, 100), OSUConfig(), seed=0)
    want = pool_state.pool_arrays(pool)
    later = pool.state_later()
    for t in range(101, 161):
        pool.add(grown_prefix(view, t))
    got = later()
    assert list(got) == list(want) == list(pool_state.ORDER)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        assert got[name].tobytes() == want[name].tobytes(), name
    assert pool_state.pool_arrays(pool)["g_members"].shape[0] > want["g_members"].shape[0]


def test_restored_centroids_skip_units_that_are_not_live_bit_for_bit():
    """A restore's centroids equal :func:`member_stats` of the live units' columns."""
    from osumem.osu.pool_state import _restore_centroids

    slots, view, live, n, g = restore_case()
    kept = slots.kept.v
    assert np.isin(kept, [3, 17, 29]).any()
    _restore_centroids(slots, view, live, n, g)
    step_idx, col = np.nonzero(kept >= 0)
    mat = sp.csc_matrix(
        (np.ones(step_idx.shape[0], dtype=np.float32), (step_idx, kept[step_idx, col])),
        shape=(n, g),
    )
    want = np.empty((live.shape[0], view.dim), dtype=np.float32)
    member_stats(mat, view.embeddings, live, out=want)
    out = slots.live_cent.a
    assert out[: live.shape[0]].tobytes() == want.tobytes()
    assert not out[int(np.searchsorted(live, 8))].any()


def test_a_restore_with_units_that_are_not_live_imports_no_sparse_matrices():
    """SciPy's sparse package costs 0.2 s to import: a restore (the first retrieve of
    a reopened memory) does not need it, whatever units the state holds."""
    code = (
        "import sys; from restore_case import restore_case; "
        "from osumem.osu.pool_state import _restore_centroids; "
        "_restore_centroids(*restore_case()); print('scipy.sparse' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root / 'tests'}{os.pathsep}{root / 'tests' / 'osu'}"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
