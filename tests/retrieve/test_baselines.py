"""Baselines on small hand-checkable cases: shared group utilities, Replay, Sliding
Window, Periodic Summary, Coverage-Aware and Flat + MMR."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_view
from osumem.errors import ConfigError
from osumem.retrieve import create
from osumem.retrieve.groups import (
    budget_prefix,
    coarse_k,
    coarse_to_fine,
    group_argmax,
    group_centroids,
    group_costs,
    incidence,
    label_codes,
    labels_to_incidence,
    recency_order,
    with_fallback,
)
from osumem.retrieve.summary import central_steps


def exact_cosine_view(cosines, costs=None, subgoals=None):
    """Steps whose cosine with the query e0 is exactly ``cosines[i]``: step i is
    c_i·e0 + sqrt(1 - c_i²)·e_{i+1} (orthogonal remainders, so steps are unrelated)."""
    n = len(cosines)
    emb = np.zeros((n, n + 1))
    emb[:, 0] = cosines
    emb[np.arange(n), np.arange(n) + 1] = np.sqrt(1 - np.asarray(cosines) ** 2)
    q = np.zeros(n + 1)
    q[0] = 1.0
    kw = {"subgoals": subgoals} if subgoals is not None else {}
    return make_view(n, n + 1, embeddings=emb, costs=costs or [10] * n, **kw), q


def select(name, view, q, budget, before=None, **params):
    r = create(name, {k: str(v) for k, v in params.items()}).fit(view)
    return r.retrieve(q, budget, before=before).positions.tolist()


# --- groups.py --------------------------------------------------------------------


def test_incidence_centroids_and_costs():
    emb = np.array([[1, 0], [0, 1], [1, 0], [3, 4]], dtype=np.float32)
    m = incidence([[0, 1], [2], [1, 1, 3], []], 4)
    assert m.toarray().tolist() == [[1, 1, 0, 0], [0, 0, 1, 0], [0, 1, 0, 1], [0, 0, 0, 0]]
    c = group_centroids(emb, m)
    s = np.sqrt(0.5)
    # (1,0)+(0,1) -> (1,1)/√2 ; (1,0) ; (0,1)+(3,4) = (3,5)/√34 ; empty -> 0
    np.testing.assert_allclose(c, [[s, s], [1, 0], [3 / 34**0.5, 5 / 34**0.5], [0, 0]], rtol=1e-6)
    assert group_costs(np.array([1, 2, 4, 8]), m).tolist() == [3, 4, 10, 0]


def test_labels_to_incidence_skips_negative():
    m = labels_to_incidence(np.array([1, 0, -1, 1]))
    assert m.toarray().tolist() == [[0, 1, 0, 0], [1, 0, 0, 1]]


def test_group_argmax_ties_go_to_earliest_and_empty_groups_get_minus_one():
    vals = np.array([0.5, 0.9, 0.9, 0.1, 0.7])
    gid = np.array([0, 0, 0, 2, 2])
    assert group_argmax(vals, gid, 3).tolist() == [1, -1, 4]


def test_coarse_k_and_budget_prefix():
    assert coarse_k(256, 100.0, 2.0) == 6  # ceil(512 / 100)
    assert coarse_k(10, 1000.0, 2.0) == 1
    assert budget_prefix(np.array([30, 30, 30]), 50) == 2  # 30 < 50 <= 60
    assert budget_prefix(np.array([30, 30, 30]), 60) == 2
    assert budget_prefix(np.array([30, 30, 30]), 1000) == 3
    assert budget_prefix(np.array([30]), 1) == 1
    assert budget_prefix(np.array([]), 1) == 0


def test_coarse_to_fine_picks_groups_then_ranks_members_causally():
    members = incidence([[0, 1, 5], [2, 3], [4]], 6)
    step_cos = np.array([0.1, 0.3, 0.9, 0.2, 0.95])  # 5 visible steps; step 5 is future
    cand, chosen = coarse_to_fine(step_cos, np.array([0.8, 0.1, 0.5]), members, 2)
    assert chosen.tolist() == [0, 2]
    assert cand.tolist() == [4, 1, 0]  # step 5 dropped (not visible)
    cand, chosen = coarse_to_fine(
        step_cos, np.array([0.8, 0.1, 0.5]), members, 2, group_ok=np.array([False, True, True])
    )
    assert chosen.tolist() == [2, 1] and cand.tolist() == [4, 2, 3]


def test_with_fallback_recency_and_label_codes():
    assert with_fallback(np.array([3, 1]), np.array([0, 1, 2, 3, 4]), 5).tolist() == [
        3,
        1,
        0,
        2,
        4,
    ]
    assert recency_order(4).tolist() == [3, 2, 1, 0]
    assert recency_order(5, 2).tolist() == [4, 3, 2]
    codes = label_codes(np.array(["b", "", "a", "b"], dtype=object))
    assert codes.tolist() == [1, -1, 0, 1]


# --- Budget-Truncated Replay and Sliding Window ------------------------------------


def test_replay_returns_most_recent_steps_that_fit():
    view = make_view(5, 4, costs=[10, 10, 30, 10, 10])
    q = np.ones(4)
    assert select("truncated_replay", view, q, 25) == [4, 3]  # 20 used, step 2 (30) > 5 left
    # 45: take 4, 3 (20), skip 2 (30 > 25 left), take 1, 0 (40)
    assert select("truncated_replay", view, q, 45) == [4, 3, 1, 0]
    assert select("truncated_replay", view, q, 45, before=3) == [2, 1]


@settings(max_examples=40, deadline=None)
@given(
    costs=st.lists(st.integers(1, 30), min_size=1, max_size=40),
    budget=st.integers(1, 200),
    data=st.data(),
)
def test_replay_equals_a_plain_backward_walk(costs, budget, data):
    before = data.draw(st.integers(1, len(costs)))
    view = make_view(len(costs), 4, costs=costs)
    expected, left = [], budget
    for i in range(before - 1, -1, -1):
        if costs[i] <= left:
            expected.append(i)
            left -= costs[i]
    assert select("truncated_replay", view, np.ones(4), budget, before=before) == expected


def test_sliding_window_stays_inside_its_window():
    # mean cost 15, B = 30 -> W = 2: window {4, 5}; step 4 (40) does not fit
    view = make_view(6, 4, costs=[10, 10, 10, 10, 40, 10])
    q = np.ones(4)
    assert select("sliding_window", view, q, 30) == [5]
    assert select("truncated_replay", view, q, 30) == [5, 3, 2]  # Replay reaches back
    # W is at least one step: B = 12 < mean cost 15 -> W = 1
    assert select("sliding_window", view, q, 12) == [5]
    # equal costs: W = B / cost exactly
    view = make_view(8, 4, costs=[10] * 8)
    assert select("sliding_window", view, q, 35) == [7, 6, 5]


# --- Periodic Summary ---------------------------------------------------------------


def test_central_step_is_the_one_closest_to_the_chunk_centroid():
    emb = np.array([[1, 0], [0, 1], [1, 1]], dtype=np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    steps, cent = central_steps(emb, np.zeros(3, dtype=np.int64))
    assert steps.tolist() == [2]
    np.testing.assert_allclose(cent[0], [2**-0.5, 2**-0.5], rtol=1e-6)


def _chunked_view(n=50, chunk=10, dim=16, seed=0):
    """Chunk k's steps are e_k plus small noise, except step 10k+3 which is e_k itself
    (so it is the chunk's most central step)."""
    rng = np.random.default_rng(seed)
    emb = 0.05 * rng.standard_normal((n, dim))
    emb[np.arange(n), np.arange(n) // chunk] += 1.0
    centre = np.arange(0, n, chunk) + 3
    emb[centre] = 0.0
    emb[centre, np.arange(centre.shape[0])] = 1.0
    return make_view(n, dim, embeddings=emb, costs=[10] * n)


def test_periodic_summary_recent_half_then_chunk_summaries():
    view = _chunked_view()
    q = np.zeros(16)
    q[1] = 1.0
    # B = 100: recent window = last 5 steps (50 tokens); older part 0..44 = chunks
    # 0-9, 10-19, 20-29, 30-39 and the cut chunk 40-44 (its central step is 43)
    got = select(
        "periodic_summary",
        view,
        q,
        100,
        chunk_size=10,
        summary_order="recency",
        fill_leftover=False,
    )
    assert got == [49, 48, 47, 46, 45, 43, 33, 23, 13, 3]
    # query order: the chunk whose centroid matches q (chunk 1) first
    got = select(
        "periodic_summary", view, q, 70, chunk_size=10, summary_order="query", fill_leftover=False
    )
    assert got[:3] == [49, 48, 47] and got[3] == 13 and len(got) == 7


def test_periodic_summary_fills_leftover_with_recent_steps():
    view = _chunked_view(n=30)
    q = np.ones(16)
    # B = 200: window = last 10 steps (100); summaries of chunks 0-9, 10-19 (2 steps);
    # 80 tokens left -> the 8 most recent non-summary older steps
    got = select("periodic_summary", view, q, 200, chunk_size=10, summary_order="recency")
    assert got[:12] == [*range(29, 19, -1), 13, 3]
    assert got[12:] == [19, 18, 17, 16, 15, 14, 12, 11]
    assert (
        select(
            "periodic_summary",
            view,
            q,
            200,
            chunk_size=10,
            summary_order="recency",
            fill_leftover=False,
        )
        == got[:12]
    )


def test_periodic_summary_rejects_bad_config():
    with pytest.raises(ConfigError, match="summary_order"):
        create("periodic_summary", {"summary_order": "random"})
    with pytest.raises(ConfigError, match="chunk_size"):
        create("periodic_summary", {"chunk_size": "0"})


# --- Coverage-Aware and Flat + MMR ------------------------------------------------


def test_coverage_bonus_prefers_a_new_subgoal():
    # cosines .9 (a), .85 (a), .8 (b), .84 (none); costs 10, B = 20
    view, q = exact_cosine_view([0.9, 0.85, 0.8, 0.84], subgoals=["a", "a", "b", ""])
    assert select("flat", view, q, 20) == [0, 1]
    # β = .12: 0 (1.02) first; then 1 has lost its bonus (.85) and 2 has .92 -> 2
    assert select("coverage", view, q, 20) == [0, 2]
    # a step with no subgoal never gets the bonus: β = .05 -> 0, then 2 (.85) ties 1
    # (.85, earlier in rank order) -> 1
    assert select("coverage", view, q, 20, subgoal_bonus=0.05) == [0, 1]
    assert select("coverage", view, q, 40, subgoal_bonus=0.12) == [0, 2, 1, 3]


random_views = st.builds(
    lambda n, seed, budget, k: (
        make_view(
            n,
            6,
            seed=seed,
            costs=list(np.random.default_rng(seed).integers(3, 25, n)),
            subgoals=[f"s{i}" for i in np.random.default_rng(seed + 1).integers(0, k, n)],
        ),
        np.random.default_rng(seed + 2).standard_normal(6),
        budget,
    ),
    st.integers(1, 40),
    st.integers(0, 10_000),
    st.integers(1, 300),
    st.integers(1, 5),
)


@settings(max_examples=40, deadline=None)
@given(case=random_views)
def test_coverage_with_zero_beta_equals_flat(case):
    view, q, budget = case
    assert select("coverage", view, q, budget, subgoal_bonus=0.0) == select("flat", view, q, budget)


@settings(max_examples=40, deadline=None)
@given(case=random_views)
def test_mmr_with_lambda_one_equals_flat(case):
    view, q, budget = case
    assert select("flat_mmr", view, q, budget, mmr_lambda=1.0) == select("flat", view, q, budget)


def test_coverage_rejects_negative_beta():
    with pytest.raises(ConfigError, match="subgoal_bonus"):
        create("coverage", {"subgoal_bonus": "-0.1"})
