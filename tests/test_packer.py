"""The shared packer: first fit, never over budget."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from osumem.errors import BudgetError
from osumem.retrieve.base import check_budget, greedy_pack, pack_first_fit


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


def test_greedy_pack_without_updates_is_first_fit_by_score():
    costs = np.array([10, 50, 5, 20, 3])
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    got = greedy_pack(scores, np.arange(5), costs, 20)
    assert got.tolist() == reference_first_fit(range(5), costs, 20)


@pytest.mark.parametrize("bad", [0, -5, 1.5, "256", None, True])
def test_bad_budgets_raise_typed_error(bad):
    with pytest.raises(BudgetError, match="positive integer"):
        check_budget(bad)
