"""The faster paths of the seeded sign-flip test and bootstrap interval give the same
numbers, to the bit, as the plain computations they replace (kept here as the
reference), and a report computed on several threads is the serial one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats as sps

from conftest import synthetic_results
from osumem.cli import main
from osumem.errors import ConfigError
from osumem.evaluate import stats
from osumem.evaluate.stats import bootstrap_means, coin_flips
from osumem.report.build import ReportSettings, build_report

#: The documented tie tolerance (relative), written here rather than read from the
#: module under test, so a change of the module's constant is caught.
TIE_RTOL = 1e-9


def _reference_sign_flip(arr: np.ndarray, n_permutations: int, seed: int) -> float:
    """The sign-flip p-value as it was computed before (random sign vectors)."""
    n = arr.size
    observed = abs(arr.mean())
    threshold = observed - TIE_RTOL * max(observed, np.abs(arr).max())
    rng = np.random.default_rng(seed)
    hits, left = 0, n_permutations
    while left:
        k = min(left, stats._CHUNK)
        flips = rng.integers(0, 2, size=(k, n), dtype=np.int8) * 2 - 1
        hits += int((np.abs(flips @ arr) / n >= threshold).sum())
        left -= k
    return (1 + hits) / (1 + n_permutations)


def _sample(rng: np.random.Generator, kind: int, n: int) -> np.ndarray:
    if kind == 0:  # hit differences
        return rng.choice([-1.0, 0.0, 0.0, 0.0, 1.0], size=n)
    if kind == 1:  # recall differences
        v = np.array([0.0, 1 / 3, 0.5, 2 / 3, 1.0])
        return rng.choice(v, size=n) - rng.choice(v, size=n)
    if kind == 2:  # episode means of recall differences
        v = np.array([0.0, 1 / 3, 0.5, 2 / 3, 1.0])
        return (rng.choice(v, size=(n, 7)) - rng.choice(v, size=(n, 7))).mean(axis=1)
    if kind == 3:  # small integers, all zero now and then
        return rng.integers(-3, 4, size=n).astype(float) * (rng.random() < 0.9)
    if kind == 4:  # continuous values that nearly tie: a few levels, tiny noise
        return rng.choice(rng.normal(size=3), size=n) + rng.normal(scale=1e-6, size=n)
    return rng.normal(size=n)


def _cases(count: int, seed: int) -> list[tuple[np.ndarray, int, int]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = int(rng.integers(31, 1200))
        n_perm = int(rng.choice([1000, 2048, 3001, 10_000]))
        out.append((_sample(rng, i % 6, n), n_perm, int(rng.integers(0, 4))))
    return out


@pytest.mark.parametrize("case", range(4))
def test_sign_flip_equals_the_plain_computation(case: int) -> None:
    for arr, n_perm, seed in _cases(15, 100 + case):
        stats._MEMO.clear()
        got = stats.sign_flip_test(arr, n_permutations=n_perm, seed=seed).p_value
        assert got == _reference_sign_flip(arr, n_perm, seed), (arr.size, n_perm, seed)


def _near_ties(count: int, seed: int):
    """Continuous differences with exact ties (a few levels repeated), near ties (the
    levels plus noise of 1e-6) and none (normal draws), 10 to 14 of them."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        n = int(rng.integers(10, 15))
        levels = rng.normal(size=int(rng.integers(2, 5)))
        arr = rng.choice(levels, size=n)
        if i % 3 == 1:
            arr = arr + rng.normal(scale=1e-6, size=n)
        elif i % 3 == 2:
            arr = rng.normal(size=n)
        yield arr


def test_exact_sign_flip_equals_scipy_on_continuous_near_ties() -> None:
    """Against scipy's permutation test (every sign vector; its own tie tolerance of
    1e-14): both count the flips that tie up to rounding, neither counts one 1e-6 off."""
    for arr in _near_ties(30, 7):
        stats._MEMO.clear()
        got = stats.sign_flip_test(arr, n_permutations=2**arr.size, exact=True).p_value
        want = sps.permutation_test(
            (arr,),
            lambda x, axis: np.abs(np.mean(x, axis=axis)),
            vectorized=True,
            permutation_type="samples",
            n_resamples=np.inf,
            alternative="greater",
        ).pvalue
        assert got == want, arr


def test_coin_flips_are_the_generators_integers() -> None:
    for seed in range(3):
        for k, n in ((1024, 921), (784, 200), (3, 5), (1, 8), (5, 7), (16, 1)):
            a, b = np.random.default_rng(seed), np.random.default_rng(seed)
            for _ in range(3):  # consecutive draws continue the same stream
                want = a.integers(0, 2, size=(k, n), dtype=np.int8)
                got = coin_flips(b, k, n)
                assert got.dtype == np.int8 and got.shape == (k, n)
                assert np.array_equal(want, got)
            assert a.random() == b.random()


@pytest.mark.parametrize("case", range(2))
def test_bootstrap_equals_scipy(case: int) -> None:
    rng = np.random.default_rng(7 + case)
    for i in range(8):
        n = int(rng.integers(2, 1000))
        arr = _sample(rng, i % 5, n)
        n_resamples = int(rng.choice([999, 2500, 10_000]))
        seed = int(rng.integers(0, 4))
        confidence = float(rng.choice([0.9, 0.95]))
        res = sps.bootstrap(
            (arr,),
            np.mean,
            confidence_level=confidence,
            n_resamples=n_resamples,
            method="percentile",
            random_state=np.random.default_rng(seed),
            vectorized=True,
        )
        means = bootstrap_means(arr, n_resamples, np.random.default_rng(seed))
        assert np.array_equal(means, res.bootstrap_distribution)
        stats._MEMO.clear()
        lo, hi = stats.bootstrap_ci(arr, confidence=confidence, n_resamples=n_resamples, seed=seed)
        if np.all(arr == arr[0]):
            continue
        assert (lo, hi) == (res.confidence_interval.low, res.confidence_interval.high)


def test_bootstrap_of_integers_with_a_negative_zero_equals_scipy() -> None:
    arr = np.array([-0.0, -0.0, 0.0, 1.0, -1.0, 0.0, 2.0] * 5)
    for sample in (arr, np.abs(arr), -np.abs(arr)):
        want = sps.bootstrap(
            (sample,),
            np.mean,
            n_resamples=3000,
            random_state=np.random.default_rng(0),
            vectorized=True,
            method="percentile",
        ).bootstrap_distribution
        got = bootstrap_means(sample, 3000, np.random.default_rng(0))
        assert np.array_equal(np.signbit(want), np.signbit(got))
        assert np.array_equal(want, got)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_results(
        tmp_path_factory.mktemp("res"), ["osumem", "flat", "flat_mmr"], n_episodes=4, seed=1001
    )


def test_report_is_the_same_on_several_threads(results: Path, tmp_path: Path) -> None:
    texts = []
    for jobs in (1, 2, -1):
        stats._MEMO.clear()  # every test computed again, on ``jobs`` threads
        out = tmp_path / f"jobs{jobs}" / "report.md"
        settings = ReportSettings(n_permutations=999, jobs=jobs)
        texts.append(build_report(results, settings=settings, out=out).read_text())
    assert "Cross-tab and interaction test" in texts[0]
    assert texts[0] == texts[1] == texts[2]


def test_precompute_fills_the_memo_with_the_serial_answers() -> None:
    rng = np.random.default_rng(3)
    samples = [_sample(rng, i % 5, int(rng.integers(40, 400))) for i in range(6)]
    stats._MEMO.clear()
    assert stats.precompute(sign_flips=samples, bootstraps=samples, n_permutations=999, jobs=2)
    threaded = [stats.sign_flip_test(s, n_permutations=999).p_value for s in samples]
    intervals = [stats.bootstrap_ci(s) for s in samples]
    stats._MEMO.clear()
    assert threaded == [_reference_sign_flip(s, 999, 0) for s in samples]
    assert intervals == [
        stats._bootstrap(s, confidence=0.95, n_resamples=10_000, seed=0, method="percentile")
        for s in samples
    ]
    assert stats.precompute(sign_flips=samples[:1], n_permutations=999) == 1
    assert stats.precompute(sign_flips=samples[:1], n_permutations=999) == 0  # remembered


def test_bad_jobs_is_refused_before_anything_is_written(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "r" / "report.md"
    with pytest.raises(ConfigError, match="jobs"):
        build_report(results, settings=ReportSettings(jobs=0), out=out)
    assert not out.parent.exists()
    res = CliRunner().invoke(main, ["report", str(results), "--jobs", "0"])
    assert res.exit_code == 2
    assert res.output.count("\n") == 1 and "jobs" in res.output


def test_prefetch_runs_beside_the_caller_and_forgets_on_error() -> None:
    rng = np.random.default_rng(4)
    samples = [_sample(rng, i % 5, 300) for i in range(4)]
    stats._MEMO.clear()
    with pytest.raises(ValueError), stats.Prefetch(n_permutations=999, jobs=2) as pre:
        pre.add(sign_flips=samples)
        raise ValueError("the caller failed")
    assert not stats._MEMO  # nothing half-remembered
    with stats.Prefetch(n_permutations=999, jobs=2) as pre:
        pre.add(sign_flips=samples[:2], bootstraps=samples[:1])
        pre.add(sign_flips=samples)  # the first two are already under way
    assert pre.count == 5 and len(stats._MEMO) == 5
    got = [stats.sign_flip_test(s, n_permutations=999).p_value for s in samples]
    assert len(stats._MEMO) == 5  # every answer came from the memo
    assert got == [_reference_sign_flip(s, 999, 0) for s in samples]
