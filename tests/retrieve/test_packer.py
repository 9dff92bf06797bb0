"""The shared packer: first fit, never over budget."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from osumem.errors import BudgetError
from osumem.retrieve.base import check_budget, greedy_pack, pack_first_fit
from osumem.retrieve.packing import PACK_LOOP_MAX


def reference_first_fit(order, costs, budget):
    """The packing rule written as plainly as possible."""
    out, left = [], budget
    for i in order:
        if costs[i] <= left:
            out.append(i)
            left -= costs[i]
    return out


def test_first_fit_skips_what_does_not_fit_and_keeps_going():
    costs = np.array([10, 50, 5, 20, 3])
    # budget 20: take 0 (10 left), skip 1 (50), take 2 (5 left), skip 3 (20), take 4 (2 left)
    assert pack_first_fit([0, 1, 2, 3, 4], costs, 20).tolist() == [0, 2, 4]


def test_first_fit_exact_budget_is_allowed():
    assert pack_first_fit([1, 0], np.array([6, 4]), 10).tolist() == [1, 0]


def test_first_fit_nothing_fits():
    assert pack_first_fit([0, 1], np.array([30, 40]), 20).tolist() == []


@settings(max_examples=200, deadline=None)
@given(
    costs=st.lists(st.integers(1, 40), min_size=0, max_size=60),
    budget=st.integers(1, 300),
    seed=st.integers(0, 10_000),
)
def test_first_fit_equals_reference_and_respects_budget(costs, budget, seed):
    costs = np.asarray(costs, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(len(costs))
    got = pack_first_fit(order, costs, budget)
    assert got.tolist() == reference_first_fit(order, costs, budget)
    assert costs[got].sum() <= budget


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(PACK_LOOP_MAX - 3, 3 * PACK_LOOP_MAX),
    budget=st.integers(1, 3000),
    seed=st.integers(0, 10_000),
)
def test_first_fit_of_long_rankings_equals_reference(n, budget, seed):
    """Rankings past the one-pass length take the vectorised path: the same rule."""
    rng = np.random.default_rng(seed)
    costs = rng.integers(1, 60, size=n + 20)
    order = rng.permutation(n + 20)[:n]
    got = pack_first_fit(order, costs, budget)
    assert got.dtype == np.int64
    assert got.tolist() == reference_first_fit(order, costs, budget)


def test_greedy_pack_without_updates_is_first_fit_by_score():
    costs = np.array([10, 50, 5, 20, 3])
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    got = greedy_pack(scores, np.arange(5), costs, 20)
    assert got.tolist() == reference_first_fit(range(5), costs, 20)


@pytest.mark.parametrize("bad", [0, -5, 1.5, "256", None, True])
def test_bad_budgets_raise_typed_error(bad):
    with pytest.raises(BudgetError, match="positive integer"):
        check_budget(bad)


def reference_greedy(scores, candidates, costs, budget, deltas=None):
    """The greedy rule written as plainly as possible: the best score among the
    unpicked candidates that still fit, ties to the earlier candidate; after a pick,
    ``deltas[j]`` is added to every score."""
    score = [float(s) for s in scores]
    picked, left = [], budget
    while True:
        best = None
        for j, c in enumerate(candidates):
            if j in picked or costs[c] > left:
                continue
            if best is None or score[j] > score[best]:
                best = j
        if best is None:
            return [int(candidates[j]) for j in picked]
        picked.append(best)
        left -= costs[candidates[best]]
        if deltas is not None:
            score = [s + float(d) for s, d in zip(score, deltas[best], strict=True)]


@settings(max_examples=300, deadline=None)
@given(
    costs=st.lists(st.integers(1, 30), min_size=1, max_size=40),
    budget=st.integers(1, 200),
    seed=st.integers(0, 10_000),
    with_updates=st.booleans(),
)
def test_greedy_pack_equals_reference_and_respects_budget(costs, budget, seed, with_updates):
    rng = np.random.default_rng(seed)
    costs = np.asarray(costs, dtype=np.int64)
    candidates = rng.permutation(len(costs))[: int(rng.integers(1, len(costs) + 1))]
    scores = rng.integers(0, 4, size=candidates.size).astype(float)  # many ties
    deltas = rng.integers(-2, 1, size=(candidates.size, candidates.size)) if with_updates else None
    on_pick = None if deltas is None else (lambda j: deltas[j].astype(float))
    got = greedy_pack(scores, candidates, costs, budget, on_pick)
    assert got.tolist() == reference_greedy(scores, candidates, costs, budget, deltas)
    assert costs[got].sum() <= budget and len(set(got.tolist())) == got.size


def test_greedy_pack_fills_the_budget_exactly_and_breaks_ties_early():
    costs = np.array([4, 6, 6])
    got = greedy_pack(np.array([1.0, 1.0, 1.0]), np.array([1, 2, 0]), costs, 10)
    assert got.tolist() == [1, 0]  # tie: the earlier candidate (1); then 0 fits exactly
