"""Statistics: sign-flip test vs exact enumeration and scipy, Fisher vs scipy,
bootstrap, interaction test under a simulated null and a simulated cell effect."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from osumem.errors import InvalidInputError
from osumem.evaluate.stats import (
    between_cell_spread,
    bootstrap_ci,
    compare,
    fisher_combine,
    format_p,
    interaction_test,
    paired_differences,
    paired_test,
    sign_flip_test,
)


def test_exact_p_on_three_values_by_hand() -> None:
    # d = (1, 1, 1): |mean| = 1; of the 8 sign vectors only (+,+,+) and (-,-,-)
    # reach |mean| = 1, so p = 2/8.
    res = sign_flip_test([1.0, 1.0, 1.0])
    assert res.exact and res.n_permutations == 8
    assert res.p_value == pytest.approx(2 / 8)


def test_exact_p_equals_itertools_enumeration() -> None:
    d = np.array([0.3, -0.1, 0.5, 0.2, 0.0, 0.4, -0.2, 0.1, 0.25, -0.05])
    signs = np.array(list(itertools.product([1, -1], repeat=d.size)))
    expected = np.mean(np.abs((signs * d).mean(axis=1)) >= abs(d.mean()) - 1e-12)
    assert sign_flip_test(d).p_value == pytest.approx(expected, abs=0)


def test_exact_p_equals_scipy_permutation_test() -> None:
    d = np.array([1.0, 0.0, 1.0, 1.0, -1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    ours = sign_flip_test(d)
    ref = sps.permutation_test(
        (d,),
        lambda x, axis: np.mean(x, axis=axis),
        permutation_type="samples",
        n_resamples=10**6,
        alternative="two-sided",
        vectorized=True,
    )
    assert ours.exact
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-12)


def test_monte_carlo_p_close_to_exact() -> None:
    rng = np.random.default_rng(3)
    d = rng.normal(0.3, 1.0, size=13)  # 2^13 = 8192: exact within 10,000
    exact = sign_flip_test(d)
    mc = sign_flip_test(d, n_permutations=20_000, exact=False, seed=1)
    assert exact.exact and not mc.exact
    assert mc.p_value == pytest.approx(exact.p_value, abs=0.015)


def test_monte_carlo_is_seeded_and_bounded() -> None:
    d = np.r_[np.ones(30), np.zeros(20)]
    a = sign_flip_test(d, n_permutations=999, seed=5)
    b = sign_flip_test(d, n_permutations=999, seed=5)
    assert a == b
    # 30 ones out of 50: no sign vector but a handful beats it: p is the floor 1/1000
    assert a.p_value == pytest.approx(1 / 1000)


def test_zero_differences_give_p_one() -> None:
    assert sign_flip_test(np.zeros(40), n_permutations=500).p_value == 1.0
    assert sign_flip_test([]).p_value == 1.0


def test_rejects_nan() -> None:
    with pytest.raises(InvalidInputError):
        sign_flip_test([0.1, float("nan")])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-2, 2), min_size=1, max_size=10))
def test_exact_p_is_a_probability_at_least_two_over_2n(values: list[int]) -> None:
    d = np.asarray(values, dtype=float)
    res = sign_flip_test(d)
    # the identity and the all-flipped vector are always at least as extreme
    assert 2 / 2**d.size - 1e-12 <= res.p_value <= 1.0
    assert sign_flip_test(-d).p_value == pytest.approx(res.p_value)


def test_fisher_equals_scipy() -> None:
    p = [0.04, 0.2, 0.5]
    assert fisher_combine(p) == pytest.approx(sps.combine_pvalues(p, method="fisher").pvalue)
    # by hand: X = -2 Σ ln p, chi-square with 2k = 6 degrees of freedom
    x = -2 * np.log(p).sum()
    assert fisher_combine(p) == pytest.approx(sps.chi2.sf(x, 6))
    assert fisher_combine([0.3]) == 0.3
    with pytest.raises(InvalidInputError):
        fisher_combine([0.0, 0.5])


def test_bootstrap_ci_covers_mean_and_degenerate_cases() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(1.0, 1.0, size=400)
    lo, hi = bootstrap_ci(x, n_resamples=2000)
    assert lo < x.mean() < hi
    # standard error ~ 0.05: the 95% interval is about ±0.1 wide
    assert 0.12 < hi - lo < 0.28
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)


def test_between_cell_spread_by_hand() -> None:
    # cells A = (1, 3) mean 2, B = (0, 0) mean 0; grand mean 1;
    # spread = .5 * (2-1)^2 + .5 * (0-1)^2 = 1
    d = np.array([1.0, 3.0, 0.0, 0.0])
    codes = np.array([0, 0, 1, 1])
    assert between_cell_spread(d, codes, 2) == pytest.approx(1.0)


def _simulate(rng: np.random.Generator, effects: dict[str, float], n_per_cell: int):
    cells, d = [], []
    for cell, eff in effects.items():
        # per-query Hit@2 difference in {-1, 0, 1}: P(+1) - P(-1) = eff
        p_plus, p_minus = 0.2 + eff / 2, 0.2 - eff / 2
        d.append(rng.choice([1.0, -1.0, 0.0], size=n_per_cell, p=[p_plus, p_minus, 0.6]))
        cells += [cell] * n_per_cell
    return np.concatenate(d), np.array(cells)


def test_interaction_p_uniformish_under_null() -> None:
    rng = np.random.default_rng(2024)
    same = {"T+E+": 0.1, "T+E-": 0.1, "T-E+": 0.1, "T-E-": 0.1}
    pvals = np.array(
        [
            interaction_test(*_simulate(rng, same, 40), n_permutations=199, seed=i).p_value
            for i in range(200)
        ]
    )
    # uniform: mean .5, 5% below .05; wide bands (seeded, so it cannot flake)
    assert 0.4 < pvals.mean() < 0.6
    assert (pvals < 0.05).mean() < 0.1
    assert 0.15 < (pvals < 0.25).mean() < 0.35


def test_interaction_p_small_under_cell_effect() -> None:
    rng = np.random.default_rng(7)
    effect = {"T+E+": 0.3, "T+E-": 0.0, "T-E+": 0.2, "T-E-": -0.3}
    d, cells = _simulate(rng, effect, 60)
    res = interaction_test(d, cells, n_permutations=2000, seed=0)
    assert res.p_value < 0.01


def test_interaction_single_cell_is_p_one() -> None:
    assert interaction_test([0.1, 0.2, 0.3], ["a", "a", "a"]).p_value == 1.0


def _rows() -> pd.DataFrame:
    recs = []
    for ep in range(4):
        for q in range(3):
            for method, hit in (("ref", 1.0 if q < 2 else 0.0), ("other", 0.0)):
                recs.append(
                    {
                        "benchmark": "b",
                        "seed": 0,
                        "episode": f"e{ep}",
                        "query": f"e{ep}q{q}",
                        "method": method,
                        "budget": 256,
                        "hit2": hit,
                        "recall": hit / 2,
                        "cell": "T+E+",
                    }
                )
    return pd.DataFrame(recs)


def test_paired_differences_query_and_episode_level() -> None:
    rows = _rows()
    dq = paired_differences(rows, "ref", "other", "hit2", budget=256)
    assert len(dq) == 12 and dq["d"].sum() == 8
    de = paired_differences(rows, "ref", "other", "hit2", budget=256, level="episode")
    assert len(de) == 4
    assert np.allclose(de["d"], 2 / 3)
    # 4 equal positive episode means: exact p = 2 / 16
    _, p, n = paired_test(rows, "ref", "other", "hit2", budget=256, level="episode")
    assert n == 4 and p == pytest.approx(2 / 16)


def _pandas_join(rows: pd.DataFrame, a: str, b: str, metric: str, budget: int | None):
    """paired_differences as a plain pandas MultiIndex join (the reference)."""
    sub = rows if budget is None else rows[rows["budget"] == budget]
    key = ["benchmark", "seed", "episode", "query"] + (["budget"] if budget is None else [])
    left = sub[sub["method"] == a].set_index(key)[[metric, "cell"]]
    right = sub[sub["method"] == b].set_index(key)[[metric]].add_suffix("_b")
    out = left.join(right, how="inner")
    out["d"] = out[metric] - out[f"{metric}_b"]
    return out.reset_index()


@pytest.mark.parametrize("duplicate", [False, True])
def test_paired_differences_equal_a_pandas_join(duplicate: bool) -> None:
    """Rows shuffled, some queries missing for one method, several seeds, budgets and
    (optionally) a repeated key: the same rows, in the same order, as pandas' join."""
    rng = np.random.default_rng(3)
    recs = [
        {
            "benchmark": "b",
            "seed": s,
            "episode": f"e{e}",
            "query": f"q{q}",
            "method": m,
            "budget": bud,
            "recall": float(rng.random()),
            "cell": "T+E+",
        }
        for s in (0, 1)
        for e in range(5)
        for q in range(4)
        for m in ("ref", "other")
        for bud in (64, 256)
        if rng.random() > 0.1
    ]
    rows = pd.DataFrame(recs).sample(frac=1.0, random_state=1).reset_index(drop=True)
    if duplicate:
        rows = pd.concat([rows, rows.iloc[:1]], ignore_index=True)
    for budget in (256, None):
        got = paired_differences(rows, "ref", "other", "recall", budget=budget)
        want = _pandas_join(rows, "ref", "other", "recall", budget)
        assert got.columns.tolist() == want.columns.tolist()
        for col in want.columns:
            assert got[col].tolist() == want[col].tolist(), col


def test_compare_renders_markdown() -> None:
    cmp = compare(_rows(), reference="ref", budget=256, n_permutations=999)
    md = cmp.to_markdown()
    assert "| other | Hit@2 | 0.667 | 0.000 | +0.667 |" in md
    assert set(cmp.table["metric"]) == {"recall", "hit2"}


def test_format_p() -> None:
    assert format_p(0.0004) == "<.001"
    assert format_p(0.0213) == ".021"
    assert format_p(1.0) == "1.000"


def test_repeated_resampling_tests_are_remembered_not_changed() -> None:
    d = np.random.default_rng(0).normal(0.1, 1.0, 300)
    first = sign_flip_test(d, n_permutations=999, seed=3)
    again = sign_flip_test(d.copy(), n_permutations=999, seed=3)
    assert again is first  # same numbers, same settings: the remembered result
    other = sign_flip_test(d, n_permutations=999, seed=4)
    assert other is not first and other.statistic == first.statistic
    d2 = d.copy()
    d2[0] += 1e-12  # any change in the numbers is a new test
    assert sign_flip_test(d2, n_permutations=999, seed=3) is not first
    assert bootstrap_ci(d, n_resamples=500, seed=1) == bootstrap_ci(
        d.copy(), n_resamples=500, seed=1
    )
