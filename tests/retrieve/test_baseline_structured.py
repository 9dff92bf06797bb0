"""Disjoint Hierarchy and Tree Abstraction on small hand-checkable cases, plus budget
and causality invariants of their descents."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_view
from osumem.errors import ConfigError
from osumem.retrieve import create
from osumem.retrieve.hierarchy import subgoal_partition
from osumem.retrieve.tree import build_tree


def select(name, view, q, budget, before=None, seed=0, **params):
    r = create(name, {k: str(v) for k, v in params.items()}, seed=seed).fit(view)
    return r.retrieve(q, budget, before=before).positions.tolist()


# --- Disjoint Hierarchy ------------------------------------------------------------


def test_subgoal_partition_by_label_gap_and_blocks():
    sg = np.array(["a", "a", "b", "", "", "a", "b", "", "a"], dtype=object)
    # max_gap 3: a = {0, 1, 5} (gap 4 splits 1|5) -> {0,1}, {5, 8}? 8-5 = 3 <= 3 -> {5, 8}
    # b = {2, 6} (gap 4) -> {2}, {6}; unlabeled blocks of 4: {3} (block 0), {4, 7} (block 1)
    part = subgoal_partition(sg, max_gap=3, unlabeled_block=4)
    # ids numbered by first position: {0,1}=0, {2}=1, {3}=2, {4,7}=3, {5,8}=4, {6}=5
    assert part.tolist() == [0, 0, 1, 2, 3, 4, 5, 3, 4]
    # no gap limit: one partition per label
    part = subgoal_partition(sg, max_gap=None, unlabeled_block=4)
    assert part.tolist() == [0, 0, 1, 2, 3, 0, 1, 3, 0]
    assert subgoal_partition(np.array([], dtype=object), max_gap=3, unlabeled_block=4).size == 0


@settings(max_examples=50, deadline=None)
@given(
    labels=st.lists(st.sampled_from(["", "a", "b", "c"]), min_size=1, max_size=60),
    max_gap=st.integers(1, 10),
    block=st.integers(1, 10),
)
def test_subgoal_partition_is_a_partition_of_single_label_gap_bounded_parts(labels, max_gap, block):
    sg = np.array(labels, dtype=object)
    part = subgoal_partition(sg, max_gap=max_gap, unlabeled_block=block)
    n_parts = part.max() + 1
    assert sorted(set(part.tolist())) == list(range(n_parts))  # every id used, one per step
    firsts = [int(np.flatnonzero(part == p)[0]) for p in range(n_parts)]
    assert firsts == sorted(firsts)  # numbered by first position
    for p in range(n_parts):
        pos = np.flatnonzero(part == p)
        assert len(set(sg[pos])) == 1
        if sg[pos[0]]:
            assert (np.diff(pos) <= max_gap).all()
        else:
            assert len(set((pos // block).tolist())) == 1


def test_disjoint_hierarchy_selects_partition_by_centroid_then_top_cosine():
    # Partition A (steps 0-3, subgoal a): each step has cosine .7 with q (orthogonal
    # remainders, so A's centroid has cosine .7 / sqrt(.49 + .51/4) ≈ .89).
    # Partition B (steps 4-7, subgoal b): step 4 has cosine .8, the rest -.3
    # (B's centroid cosine is low). Flat takes 4 then 0; the hierarchy with K = 1
    # (rho = 1, B = 20, mean partition cost 40) takes the two best of A.
    c = np.array([0.7, 0.7, 0.7, 0.7, 0.8, -0.3, -0.3, -0.3])
    emb = np.zeros((8, 9))
    emb[:, 0] = c
    emb[np.arange(8), np.arange(8) + 1] = np.sqrt(1 - c**2)
    view = make_view(8, 9, embeddings=emb, costs=[10] * 8, subgoals=["a"] * 4 + ["b"] * 4)
    q = np.eye(9)[0]
    assert select("flat", view, q, 20) == [4, 0]
    got = select("disjoint_hierarchy", view, q, 20, coarse_ratio=1.0, fill_leftover=False)
    assert got == [0, 1]
    # B = 60 without fill: only A's 4 steps (40 tokens) are reachable
    got = select("disjoint_hierarchy", view, q, 60, coarse_ratio=0.5, fill_leftover=False)
    assert got == [0, 1, 2, 3]
    # with fill the leftover 20 tokens go to the flat ranking: 4, then 5 (ties by position)
    assert select("disjoint_hierarchy", view, q, 60, coarse_ratio=0.5) == [0, 1, 2, 3, 4, 5]
    # causality: before = 4 leaves only A visible
    assert select("disjoint_hierarchy", view, q, 1000, before=4) == [0, 1, 2, 3]


def test_disjoint_hierarchy_rejects_bad_config():
    with pytest.raises(ConfigError, match="max_gap"):
        create("disjoint_hierarchy", {"max_gap": "0"})
    with pytest.raises(ConfigError, match="coarse_ratio"):
        create("disjoint_hierarchy", {"coarse_ratio": "0"})


# --- Tree Abstraction ----------------------------------------------------------------


def _two_clusters(seed=0):
    """Steps 0-7 near e0, steps 8-15 near e1 (d = 8, cost 10 each)."""
    rng = np.random.default_rng(seed)
    emb = 0.05 * rng.standard_normal((16, 8))
    emb[:8, 0] += 1.0
    emb[8:, 1] += 1.0
    return make_view(16, 8, embeddings=emb, costs=[10] * 16)


def test_build_tree_levels_and_parents():
    view = _two_clusters()
    nodes, parents = build_tree(view.embeddings, branching=8, n_init=3, seed=0)
    assert [v.shape[0] for v in nodes] == [16, 2]
    assert len(parents) == 1
    # k-means separates the two clusters exactly
    assert len(set(parents[0][:8].tolist())) == 1 and len(set(parents[0][8:].tolist())) == 1
    assert parents[0][0] != parents[0][8]
    # summary nodes are unit-length mean embeddings of their children
    top0 = parents[0][0]
    mean = view.embeddings[:8].mean(axis=0)
    np.testing.assert_allclose(nodes[1][top0], mean / np.linalg.norm(mean), rtol=1e-5)
    # recursion: 200 random steps, branching 4 -> 200, 50, 13, 4 nodes
    rng = np.random.default_rng(1)
    big = rng.standard_normal((200, 8)).astype(np.float32)
    nodes, parents = build_tree(big, branching=4, n_init=1, seed=0)
    assert [v.shape[0] for v in nodes] == [200, 50, 13, 4]
    for level, p in enumerate(parents):
        assert p.shape[0] == nodes[level].shape[0]
        assert sorted(set(p.tolist())) == list(range(nodes[level + 1].shape[0]))


def test_build_tree_handles_tiny_and_duplicate_inputs():
    nodes, parents = build_tree(np.ones((3, 4), np.float32), branching=2, n_init=1, seed=0)
    assert [v.shape[0] for v in nodes] == [3, 1] and parents[0].tolist() == [0, 0, 0]
    nodes, parents = build_tree(np.zeros((0, 4), np.float32), branching=2, n_init=1, seed=0)
    assert len(nodes) == 1 and parents == []


def test_tree_descends_into_the_cluster_nearest_the_query():
    view = _two_clusters()
    q = np.eye(8)[1] + 0.3 * np.eye(8)[0]
    # rho·B = 50 <= 80 (cluster e1's cost): the descent keeps only the e1 node
    got = select("tree", view, q, 100, coarse_ratio=0.5, fill_leftover=False)
    assert sorted(got) == list(range(8, 16))
    # leftover 20 tokens are filled from the flat ranking (cluster e0's best two)
    got = select("tree", view, q, 100, coarse_ratio=0.5)
    flat = select("flat", view, q, 1000)
    assert got[:8] == [p for p in flat if p >= 8] and got[8:] == [p for p in flat if p < 8][:2]
    # a budget big enough to need both nodes reaches every step
    got = select("tree", view, q, 1000, fill_leftover=False)
    assert sorted(got) == list(range(16))


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 60),
    seed=st.integers(0, 1000),
    budget=st.integers(1, 400),
    frac=st.floats(0.05, 1.0),
    method=st.sampled_from(["tree", "disjoint_hierarchy"]),
)
def test_descent_respects_budget_and_causality(n, seed, budget, frac, method):
    rng = np.random.default_rng(seed)
    view = make_view(
        n,
        6,
        seed=seed,
        costs=list(rng.integers(3, 30, n)),
        subgoals=[f"s{k}" if k else "" for k in rng.integers(0, 4, n)],
    )
    before = max(1, int(frac * n))
    q = rng.standard_normal(6)
    r = create(method, {"branching": "3"} if method == "tree" else {}, seed=seed).fit(view)
    sel = r.retrieve(q, budget, before=before)
    pos = sel.positions
    assert sel.cost <= budget and sel.cost == int(view.costs[pos].sum())
    assert len(set(pos.tolist())) == pos.size
    assert (pos < before).all()
    # with leftover filling, nothing that still fits is left out
    if pos.size < before:
        left = np.setdiff1d(np.arange(before), pos)
        assert view.costs[left].min() > budget - sel.cost


def test_tree_is_deterministic_given_its_seed_and_rejects_bad_config():
    view = make_view(60, 6, seed=4)
    q = np.ones(6)
    a = select("tree", view, q, 120, seed=7, branching=4)
    assert a == select("tree", view, q, 120, seed=7, branching=4)
    with pytest.raises(ConfigError, match="branching"):
        create("tree", {"branching": "1"})
