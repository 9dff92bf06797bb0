"""Significance tests and confidence intervals.

Everything here reads per-query result rows or plain arrays of paired differences:

* :func:`sign_flip_test` — the paired sign-flip permutation test, two-sided, statistic
  ``|mean(d)|``; exact enumeration of all ``2^n`` sign vectors when ``2^n`` is at most
  ``n_permutations``, otherwise ``n_permutations`` seeded random sign vectors with
  ``p = (1 + #{|mean(s·d)| ≥ |mean(d)|}) / (1 + n_permutations)``.
* :func:`paired_differences` — aligns two methods' rows by query (or averages the
  per-query differences per episode: the episode-level test).
* :func:`fisher_combine` — Fisher's method across seeds (``scipy.stats.combine_pvalues``).
* :func:`seed_p_values` / :func:`seed_combined_p` — the sign-flip test run per seed on a
  frame of paired differences, and its Fisher-combined p (every test of the project
  that pools seeds goes through these).
* :func:`bootstrap_ci` — percentile bootstrap of the mean (``scipy.stats.bootstrap``).
* :func:`interaction_test` — the method × cell interaction test (see its docstring).
* :func:`compare` — a reference method against every other method: a
  :class:`Comparison` that renders as Markdown.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy import stats as sps

from osumem.errors import ConfigError, InvalidInputError
from osumem.evaluate.defaults import N_PERMUTATIONS
from osumem.evaluate.metrics import metric_name

#: Rows of one query are identified by these columns (a query id is unique per episode).
QUERY_KEY: tuple[str, ...] = ("benchmark", "seed", "episode", "query")
_CHUNK = 1024
#: Confidence level and resamples of :func:`bootstrap_ci` by default.
CONFIDENCE = 0.95
N_RESAMPLES = 10_000
#: Relative tolerance for "at least as extreme" so that float round-off in permuted
#: means cannot break ties (e.g. the identity permutation itself).
_TIE_RTOL = 1e-9


@dataclass(frozen=True)
class TestResult:
    """Outcome of a permutation test.

    Attributes:
        statistic: the observed statistic.
        p_value: two-sided p-value.
        n: number of paired units (queries, episodes).
        n_permutations: permutations drawn, or ``2^n`` when ``exact``.
        exact: True when every sign vector was enumerated.
    """

    __test__ = False  # not a pytest class

    statistic: float
    p_value: float
    n: int
    n_permutations: int
    exact: bool


#: Results of the seeded resampling tests by their exact inputs: a report asks for the
#: same test in several tables (a method against the reference at the primary budget
#: in the main table, the budget sweep and the ablations), and a seeded test of the
#: same numbers gives the same answer, so it is computed once.
_MEMO: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_MEMO_SIZE = 1024


def _memo_key(kind: str, arr: NDArray[np.float64], params: tuple[Any, ...]) -> tuple[Any, ...]:
    return (kind, arr.size, hashlib.blake2b(arr.tobytes(), digest_size=20).digest(), params)


def _remember(key: tuple[Any, ...], value: Any) -> None:
    _MEMO[key] = value
    if len(_MEMO) > _MEMO_SIZE:
        _MEMO.popitem(last=False)


def _memo(
    kind: str, arr: NDArray[np.float64], params: tuple[Any, ...], fn: Callable[[], Any]
) -> Any:
    """``fn()``, remembered under ``kind``, the bytes of ``arr`` (by digest) and
    ``params`` (least recently used entries dropped past :data:`_MEMO_SIZE`)."""
    key = _memo_key(kind, arr, params)
    if key in _MEMO:
        _MEMO.move_to_end(key)
        return _MEMO[key]
    value = fn()
    _remember(key, value)
    return value


def resolve_threads(jobs: int | str) -> int:
    """Threads for ``jobs`` (-1 or ``"auto"``: one per core), validated like the
    runner's worker count (:func:`osumem.evaluate.runner.check_jobs`)."""
    from osumem.evaluate.runner import check_jobs

    n = check_jobs(-1 if jobs == "auto" else jobs)
    return max(1, os.cpu_count() or 1) if n == -1 else n


class Prefetch:
    """Seeded tests computed on threads while the caller goes on (a context manager).

    :meth:`add` hands over the samples of sign-flip tests (:func:`sign_flip_test`)
    and bootstrap intervals (:func:`bootstrap_ci`, default confidence and resamples)
    that are not remembered yet; with more than one thread (``jobs``; -1: one per
    core) they start at once, beside the caller's own work (the joins that produce
    the next samples), and leaving the ``with`` block waits for them and remembers
    them: the calls that follow return them at once. With one thread :meth:`add`
    computes them on the spot.

    Each result is computed by the same function with the same seed as a call would,
    only earlier and beside the others (NumPy releases the interpreter lock in the
    random draws, the matrix products and the reductions that make up these tests),
    so the numbers are the ones a serial run gives.
    """

    def __init__(self, *, n_permutations: int = N_PERMUTATIONS, seed: int = 0, jobs: int = 1):
        self.threads = resolve_threads(jobs)
        self.n_permutations = n_permutations
        self.seed = seed
        self.count = 0
        self._pool: Any = None
        self._futures: dict[tuple[Any, ...], Any] = {}

    def __enter__(self) -> Prefetch:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if self._pool is None:
            return
        try:
            if exc_type is None:
                for key, fut in self._futures.items():
                    _remember(key, fut.result())
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool, self._futures = None, {}

    def add(
        self, *, sign_flips: Sequence[NDArray[Any]] = (), bootstraps: Sequence[NDArray[Any]] = ()
    ) -> None:
        """Start (or, on one thread, compute) the tests of these samples."""
        tasks: dict[tuple[Any, ...], Callable[[], Any]] = {}
        n_perm, seed = self.n_permutations, self.seed
        for d in sign_flips:
            arr = _as_vector(d, "differences")
            key = _memo_key("sign_flip", arr, (n_perm, seed, None))
            if key not in _MEMO and key not in self._futures:
                tasks[key] = partial(_sign_flip, arr, n_permutations=n_perm, seed=seed, exact=None)
        for x in bootstraps:
            arr = _as_vector(x, "sample")
            if arr.size < 2 or np.all(arr == arr[0]):
                continue  # answered without resampling
            key = _memo_key("bootstrap", arr, (CONFIDENCE, N_RESAMPLES, seed, "percentile"))
            if key not in _MEMO and key not in self._futures:
                tasks[key] = partial(
                    _bootstrap,
                    arr,
                    confidence=CONFIDENCE,
                    n_resamples=N_RESAMPLES,
                    seed=seed,
                    method="percentile",
                )
        self.count += len(tasks)
        if self.threads <= 1:
            for key, fn in tasks.items():
                _remember(key, fn())
            return
        if self._pool is None and tasks:
            from concurrent.futures import ThreadPoolExecutor

            _raw_bits_ok(), _fast_resampling_ok()  # the one-time checks, before the threads
            self._pool = ThreadPoolExecutor(max_workers=self.threads)
        # the longest first, so that the threads finish together
        for key in sorted(tasks, key=lambda k: -k[1] * (8 if k[0] == "bootstrap" else 1)):
            self._futures[key] = self._pool.submit(tasks[key])


def precompute(
    *,
    sign_flips: Sequence[NDArray[Any]] = (),
    bootstraps: Sequence[NDArray[Any]] = (),
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
    jobs: int = 1,
) -> int:
    """:class:`Prefetch` of these samples, waited for: their tests computed on up to
    ``jobs`` threads and remembered. Returns the number computed."""
    with Prefetch(n_permutations=n_permutations, seed=seed, jobs=jobs) as pre:
        pre.add(sign_flips=sign_flips, bootstraps=bootstraps)
    return pre.count


def _as_vector(d: Any, what: str) -> NDArray[np.float64]:
    arr = np.asarray(d, dtype=np.float64)
    if arr.ndim != 1:
        raise InvalidInputError(f"{what}: expected a 1-d array, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise InvalidInputError(f"{what}: NaN or infinite values")
    return arr


def _all_signs(n: int, start: int = 0, stop: int | None = None) -> NDArray[np.float64]:
    """Sign vectors ``start .. stop-1`` of the ``2^n`` vectors of ``±1`` (bit ``j`` of
    the row number gives the sign of element ``j``) as rows of a matrix."""
    stop = 2**n if stop is None else stop
    codes = np.arange(start, stop, dtype=np.int64)[:, None]
    bits = (codes >> np.arange(n, dtype=np.int64)) & 1
    return np.asarray(1.0 - 2.0 * bits, dtype=np.float64)


def sign_flip_test(
    d: Sequence[float] | NDArray[Any],
    *,
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
    exact: bool | None = None,
) -> TestResult:
    """Paired sign-flip permutation test of ``mean(d) = 0``, two-sided.

    Under the null each paired difference is symmetric about zero, so flipping its
    sign leaves the distribution unchanged. Statistic ``T = |mean(d)|``.

    Args:
        d: paired differences (e.g. OSU-Mem − Flat per query).
        n_permutations: random sign vectors to draw.
        seed: seed of the numpy Generator.
        exact: enumerate all ``2^n`` sign vectors; ``None`` (default) does so exactly
            when ``2^n <= n_permutations``. The exact p-value counts the identity.
    """
    arr = _as_vector(d, "differences")
    if n_permutations < 1:
        raise ConfigError(f"n_permutations must be >= 1, got {n_permutations}")
    result: TestResult = _memo(
        "sign_flip",
        arr,
        (n_permutations, seed, exact),
        lambda: _sign_flip(arr, n_permutations=n_permutations, seed=seed, exact=exact),
    )
    return result


def _sign_flip(
    arr: NDArray[np.float64], *, n_permutations: int, seed: int, exact: bool | None
) -> TestResult:
    n = arr.size
    if n == 0:
        return TestResult(0.0, 1.0, 0, 0, True)
    observed = abs(arr.mean())
    threshold = observed - _TIE_RTOL * max(observed, np.abs(arr).max())
    if exact is None:
        exact = n <= 30 and 2**n <= n_permutations
    if exact:
        if n > 24:
            raise ConfigError(f"exact enumeration needs 2^{n} sign vectors; too many")
        hits = 0
        for start in range(0, 2**n, 1 << 14):
            signs = _all_signs(n, start, min(start + (1 << 14), 2**n))
            hits += int((np.abs(signs @ arr) / n >= threshold).sum())
        return TestResult(float(observed), hits / 2**n, n, 2**n, True)
    rng = np.random.default_rng(seed)
    # Integer differences (of hit indicators, say): every product and partial sum of
    # ``s · d`` is an exact integer, so leaving out the columns where ``d = 0`` gives
    # the same sums to the bit; other differences keep every column (the summation
    # order of the full product is what the p-value was always computed with).
    cols: NDArray[np.intp] | None = None
    if np.abs(arr).sum() < 2.0**53 and np.array_equal(arr, np.rint(arr)):
        cols = np.flatnonzero(arr)
    sub = arr if cols is None else arr[cols]
    hits = 0
    left = n_permutations
    while left:
        k = min(left, _CHUNK)
        bits = coin_flips(rng, k, n)
        flips = (bits if cols is None else bits[:, cols]) * np.int8(2) - np.int8(1)
        hits += int((np.abs(flips @ sub) / n >= threshold).sum())
        left -= k
    return TestResult(float(observed), (1 + hits) / (1 + n_permutations), n, n_permutations, False)


#: Whether the raw-stream shortcut of :func:`coin_flips` draws what ``Generator.integers``
#: draws on this NumPy (checked once, at first use).
_RAW_BITS_OK: bool | None = None


def _raw_bits_ok() -> bool:
    global _RAW_BITS_OK
    if _RAW_BITS_OK is None:
        a, b = np.random.default_rng(2024), np.random.default_rng(2024)
        ok = sys.byteorder == "little" and isinstance(b.bit_generator, np.random.PCG64)
        for size in (8, 48, 4096):
            want = a.integers(0, 2, size=size, dtype=np.int8)
            got = b.bit_generator.random_raw(size // 8).view(np.uint8) >> 7
            ok = ok and np.array_equal(want, got)
        _RAW_BITS_OK = bool(ok and a.bit_generator.state["state"] == b.bit_generator.state["state"])
    return _RAW_BITS_OK


def coin_flips(rng: np.random.Generator, k: int, n: int) -> NDArray[np.int8]:
    """``rng.integers(0, 2, size=(k, n), dtype=np.int8)``: the same values, leaving
    ``rng`` in the same state, about 6× faster.

    NumPy draws a bounded 8-bit integer from one byte of the 32-bit stream (Lemire's
    method; for the range ``{0, 1}`` it is the byte's top bit, never rejected), and
    PCG64's 32-bit stream is the low then the high half of each 64-bit output. So
    when the generator holds no buffered half and ``k·n`` is a multiple of 8 the bits
    are the top bits of the bytes of ``k·n/8`` raw 64-bit outputs. That identity is
    checked on this NumPy at first use; otherwise, or for other generators,
    ``rng.integers`` itself is called.
    """
    size = k * n
    bg = rng.bit_generator
    if (
        size % 8 == 0
        and isinstance(bg, np.random.PCG64)
        and not bg.state["has_uint32"]
        and _raw_bits_ok()
    ):
        raw = bg.random_raw(size // 8)
        bits: NDArray[np.int8] = (raw.view(np.uint8) >> 7).view(np.int8)
        return bits.reshape(k, n)
    return rng.integers(0, 2, size=(k, n), dtype=np.int8)


def fisher_combine(p_values: Sequence[float]) -> float:
    """Fisher's method: one p-value from independent per-seed p-values."""
    p = _as_vector(p_values, "p-values")
    if p.size == 0:
        raise InvalidInputError("fisher_combine: no p-values")
    if ((p <= 0) | (p > 1)).any():
        raise InvalidInputError(f"fisher_combine: p-values must lie in (0, 1], got {p}")
    if p.size == 1:
        return float(p[0])
    return float(sps.combine_pvalues(p, method="fisher").pvalue)


def seed_p_values(
    diffs: pd.DataFrame,
    *,
    column: str = "d",
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
) -> list[float]:
    """Two-sided sign-flip p of ``diffs[column]`` for each seed (ascending ``seed``
    column or index level; one group when there is none)."""
    return [
        sign_flip_test(g, n_permutations=n_permutations, seed=seed).p_value
        for g in seed_groups(diffs, column=column)
    ]


def seed_groups(diffs: pd.DataFrame, *, column: str = "d") -> list[NDArray[Any]]:
    """``diffs[column]`` per seed, ascending (one group when there is no ``seed``
    column or index level): the samples :func:`seed_p_values` tests."""
    if "seed" in diffs.columns or "seed" in (diffs.index.names or ()):
        return [g[column].to_numpy() for _, g in diffs.groupby("seed", sort=True)]
    return [diffs[column].to_numpy()]


def seed_combined_p(
    diffs: pd.DataFrame,
    *,
    column: str = "d",
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
) -> float:
    """The sign-flip p of paired differences, per seed, Fisher-combined across seeds
    (:func:`seed_p_values`, :func:`fisher_combine`); NaN when there are none."""
    if diffs.empty:
        return float("nan")
    return fisher_combine(
        seed_p_values(diffs, column=column, n_permutations=n_permutations, seed=seed)
    )


def bootstrap_ci(
    x: Sequence[float] | NDArray[Any],
    *,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    method: str = "percentile",
) -> tuple[float, float]:
    """Bootstrap confidence interval of the mean of ``x`` (``scipy.stats.bootstrap``).

    ``method="percentile"`` by default: BCa is undefined on the constant and
    near-constant 0/1 samples that Hit@2 differences often are. A constant sample
    returns the degenerate interval ``(x0, x0)``; an empty one ``(nan, nan)``.
    """
    arr = _as_vector(x, "sample")
    if arr.size == 0:
        return (float("nan"), float("nan"))
    if arr.size == 1 or np.all(arr == arr[0]):
        return (float(arr[0]), float(arr[0]))
    ci: tuple[float, float] = _memo(
        "bootstrap",
        arr,
        (confidence, n_resamples, seed, method),
        lambda: _bootstrap(
            arr, confidence=confidence, n_resamples=n_resamples, seed=seed, method=method
        ),
    )
    return ci


def _bootstrap(
    arr: NDArray[np.float64], *, confidence: float, n_resamples: int, seed: int, method: str
) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    if method == "percentile" and _fast_resampling_ok():
        # the bootstrap distribution SciPy would draw, computed faster; SciPy turns it
        # into the interval (``n_resamples=0`` with a previous result)
        res = sps.bootstrap(
            (arr,),
            np.mean,
            confidence_level=confidence,
            n_resamples=0,
            method=method,
            bootstrap_result=_Distribution(bootstrap_means(arr, n_resamples, rng)),
            vectorized=True,
        )
    else:
        res = sps.bootstrap(
            (arr,),
            np.mean,
            confidence_level=confidence,
            n_resamples=n_resamples,
            method=method,
            random_state=rng,
            vectorized=True,
        )
    return (float(res.confidence_interval.low), float(res.confidence_interval.high))


@dataclass(frozen=True)
class _Distribution:
    """A bootstrap distribution in the shape ``scipy.stats.bootstrap`` accepts as a
    previous result."""

    bootstrap_distribution: NDArray[np.float64]


#: Rows of resamples drawn at a time by :func:`bootstrap_means` (bounds its memory).
_RESAMPLE_ROWS = 1024


def bootstrap_means(
    arr: NDArray[np.float64], n_resamples: int, rng: np.random.Generator
) -> NDArray[np.float64]:
    """The means of ``n_resamples`` bootstrap resamples of ``arr``, exactly as
    ``scipy.stats.bootstrap(..., np.mean, vectorized=True, batch=None)`` draws them
    (the ``bootstrap_distribution`` it returns): the same ``rng.integers(0, n,
    (n_resamples, n))`` indices and the same row means, gathered with ``take`` instead of
    SciPy's slower broadcast indexing, a block of rows at a time (drawing the indices
    in blocks consumes the generator's stream as one draw does). A sample of small
    integers (hit differences) is summed as integers: the float sum of integers is
    exact in any order, so its mean is the exact sum divided by ``n`` either way (no
    negative zeros in the sample, so no negative zero in a sum)."""
    n = arr.size
    out = np.empty(n_resamples, dtype=np.float64)
    small = (
        n > 0
        and np.abs(arr).max() <= 127
        and np.array_equal(arr, np.rint(arr))
        and not np.signbit(arr[arr == 0]).any()
    )
    ints = arr.astype(np.int8) if small else None
    for start in range(0, n_resamples, _RESAMPLE_ROWS):
        k = min(_RESAMPLE_ROWS, n_resamples - start)
        idx = rng.integers(0, n, (k, n))
        if ints is not None:
            out[start : start + k] = ints.take(idx).sum(axis=-1, dtype=np.int64) / n
        else:
            out[start : start + k] = np.mean(arr.take(idx), axis=-1)
    return out


#: Whether :func:`bootstrap_means` reproduces SciPy's bootstrap distribution on the
#: installed SciPy (checked once, at first use).
_FAST_RESAMPLING_OK: bool | None = None


def _fast_resampling_ok() -> bool:
    global _FAST_RESAMPLING_OK
    if _FAST_RESAMPLING_OK is None:
        ok = True
        for n, n_resamples in ((7, 100), (50, 2500), (60, 1500)):
            sample = np.random.default_rng(n).normal(size=n)
            if n == 60:  # small integers: summed as integers
                sample = np.rint(sample)
            want = sps.bootstrap(
                (sample,),
                np.mean,
                n_resamples=n_resamples,
                method="percentile",
                random_state=np.random.default_rng(1),
                vectorized=True,
            ).bootstrap_distribution
            got = bootstrap_means(sample, n_resamples, np.random.default_rng(1))
            ok = ok and np.array_equal(want, got)
        _FAST_RESAMPLING_OK = ok
    return _FAST_RESAMPLING_OK


def between_cell_spread(d: NDArray[Any], codes: NDArray[np.int64], n_cells: int) -> NDArray[Any]:
    """Size-weighted variance of the cell means: ``Σ_c (n_c/N)(mean_c − mean)²``.

    ``d`` may be ``(N,)`` or ``(k, N)`` (one row per permutation); returns one value
    per row.
    """
    d2 = np.atleast_2d(d)
    counts = np.bincount(codes, minlength=n_cells).astype(np.float64)
    onehot = np.zeros((codes.size, n_cells))
    onehot[np.arange(codes.size), codes] = 1.0
    sums = d2 @ onehot
    present = counts > 0
    means = sums[:, present] / counts[present]
    grand = d2.mean(axis=1, keepdims=True)
    w = counts[present] / codes.size
    out = ((means - grand) ** 2 * w).sum(axis=1)
    return out if np.ndim(d) == 2 else out[0]


def interaction_test(
    d: Sequence[float] | NDArray[Any],
    cells: Sequence[str] | NDArray[Any],
    *,
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
    small_sample_correction: bool = True,
) -> TestResult:
    """Method × cell interaction test: is the effect the same in every cell?

    ``d_i`` is the per-query difference (e.g. OSU-Mem − Flat), ``c_i`` its cell.

    1. Observed statistic ``S = Σ_c (n_c/N)(mean_c(d) − mean(d))²``, the size-weighted
       between-cell spread of the effect (:func:`between_cell_spread`).
    2. Null (the effect is identical in every cell): centre within each cell,
       ``r_i = d_i − mean_{c_i}(d)``; this removes any between-cell difference and
       keeps the within-cell noise. With ``small_sample_correction`` each residual is
       scaled by ``sqrt(n_c/(n_c−1))`` so its variance matches the noise it estimates.
    3. Draw random sign vectors ``s`` and compute ``S* = S(s·r)`` (a constant common
       effect added back would cancel in ``S``, so it is omitted).
    4. ``p = (1 + #{S* ≥ S}) / (1 + n_permutations)``.

    Cells with a single query carry no within-cell noise estimate and are dropped
    (they cannot show an effect that differs from noise). Fewer than two usable
    cells gives ``p = 1``.
    """
    arr = _as_vector(d, "differences")
    labels = np.asarray(cells, dtype=object)
    if labels.shape != arr.shape:
        raise InvalidInputError(
            f"interaction_test: {arr.size} differences but {labels.size} cell labels"
        )
    _, codes, counts = np.unique(labels.astype(str), return_inverse=True, return_counts=True)
    keep = counts[codes] >= 2
    arr, codes = arr[keep], codes[keep]
    _, codes, counts = np.unique(codes, return_inverse=True, return_counts=True)
    k = counts.size
    if k < 2:
        return TestResult(0.0, 1.0, int(arr.size), 0, False)
    codes = codes.astype(np.int64)
    observed = float(between_cell_spread(arr, codes, k))
    means = np.bincount(codes, weights=arr, minlength=k) / counts
    resid = arr - means[codes]
    if small_sample_correction:
        resid = resid * np.sqrt(counts / (counts - 1.0))[codes]
    threshold = observed - _TIE_RTOL * max(observed, 1e-300)
    rng = np.random.default_rng(seed)
    hits, left = 0, n_permutations
    while left:
        m = min(left, _CHUNK)
        signs = coin_flips(rng, m, arr.size) * np.int8(2) - np.int8(1)
        hits += int((between_cell_spread(signs * resid, codes, k) >= threshold).sum())
        left -= m
    return TestResult(
        observed, (1 + hits) / (1 + n_permutations), int(arr.size), n_permutations, False
    )


def paired_differences(
    rows: pd.DataFrame,
    method: str,
    baseline: str,
    metric: str,
    *,
    budget: int | None = None,
    level: str = "query",
) -> pd.DataFrame:
    """Per-unit differences ``method − baseline`` of ``metric``.

    Rows are paired on (benchmark, seed, episode, query); queries present for only one
    method are dropped. ``level="episode"`` averages the per-query differences within
    each episode (the episode-level test). Returns a frame with ``seed``, ``cell`` (for
    ``level="query"``), ``episode``, and ``d``.
    """
    if level not in ("query", "episode"):
        raise ConfigError(f"level must be 'query' or 'episode', got {level!r}")
    key = [c for c in QUERY_KEY if c in rows.columns]
    if budget is None:
        key.append("budget")
    # only the columns the join reads are copied (rows also hold list columns)
    cols = list(dict.fromkeys([*key, metric, "cell"]))
    in_budget = True if budget is None else (rows["budget"] == budget).to_numpy()
    a = rows.loc[(rows["method"] == method).to_numpy() & in_budget, cols]
    b = rows.loc[(rows["method"] == baseline).to_numpy() & in_budget, cols]
    if a.empty or b.empty:
        missing = method if a.empty else baseline
        raise InvalidInputError(f"no rows for method {missing!r} (budget {budget})")
    out = _paired_join(a, b, key, metric)
    if out is None:  # duplicate or missing keys: pandas' join decides
        joined = a.set_index(key)[[metric, "cell"]].join(
            b.set_index(key)[[metric]].add_suffix("_b"), how="inner"
        )
        joined["d"] = joined[metric] - joined[f"{metric}_b"]
        out = joined.reset_index()
    return episode_differences(out) if level == "episode" else out


def episode_differences(diffs: pd.DataFrame) -> pd.DataFrame:
    """Per-query differences (:func:`paired_differences`) averaged within each
    episode (what ``level="episode"`` returns)."""
    group = [c for c in ("benchmark", "seed", "episode") if c in diffs.columns]
    return diffs.groupby(group, sort=False)["d"].mean().reset_index()


def _paired_join(
    a: pd.DataFrame, b: pd.DataFrame, key: list[str], metric: str
) -> pd.DataFrame | None:
    """The inner join of ``a`` and ``b`` on ``key`` in ``a``'s row order, as
    ``a.set_index(key).join(b.set_index(key), how="inner").reset_index()`` gives it
    for unique keys, without building a MultiIndex of strings (the slow part of that
    join on Arrow-backed string columns). ``None`` when a key is missing or repeated."""
    n_a = len(a)
    codes = np.zeros(n_a + len(b), dtype=np.int64)
    for col in key:
        c, uniques = pd.factorize(pd.concat([a[col], b[col]], ignore_index=True))
        if (c < 0).any():
            return None
        # mixed radix, renumbered densely at each column so it never overflows
        codes = np.unique(codes * np.int64(len(uniques)) + c, return_inverse=True)[1]
    ka, kb = codes[:n_a], codes[n_a:]
    if np.unique(ka).size != ka.size or np.unique(kb).size != kb.size:
        return None
    order = np.argsort(kb, kind="stable")
    pos = np.searchsorted(kb[order], ka)
    pos[pos == kb.size] = 0
    hit = kb[order][pos] == ka if kb.size else np.zeros(n_a, dtype=bool)
    left = a.iloc[np.flatnonzero(hit)]
    right = b.iloc[order[pos[hit]]]
    out = left[[*key, metric, "cell"]].reset_index(drop=True)
    out[f"{metric}_b"] = right[metric].to_numpy()
    out["d"] = out[metric] - out[f"{metric}_b"]
    return out


def paired_test(
    rows: pd.DataFrame,
    method: str,
    baseline: str,
    metric: str,
    *,
    budget: int | None = None,
    level: str = "query",
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
) -> tuple[float, float, int]:
    """Sign-flip test of ``method − baseline``: per seed, Fisher-combined across seeds.

    Returns ``(mean difference, p-value, number of units)``.
    """
    diffs = paired_differences(rows, method, baseline, metric, budget=budget, level=level)
    p = seed_combined_p(diffs, n_permutations=n_permutations, seed=seed)
    return float(diffs["d"].mean()), p, len(diffs)


def format_p(p: float) -> str:
    """A p-value as a table shows it: three decimals, ``<.001`` below that."""
    if p != p:  # NaN
        return "–"
    if p < 0.001:
        return "<.001"
    return f"{p:.3f}".lstrip("0") if p < 1 else "1.000"


@dataclass(frozen=True)
class Comparison:
    """A reference method against others at one budget: means, differences, CIs, p.

    ``table`` has one row per (method, metric) with columns ``method``, ``metric``,
    ``ref_mean``, ``mean``, ``diff``, ``ci_low``, ``ci_high``, ``p_query``,
    ``p_episode``, ``n_queries``, ``n_episodes``.
    """

    reference: str
    budget: int
    table: pd.DataFrame
    n_permutations: int

    def to_markdown(self) -> str:
        """The comparison as a Markdown table."""
        head = (
            f"| method | metric | {self.reference} | method | Δ | 95% CI | p (query) | "
            "p (episode) | n q / ep |\n|---|---|---|---|---|---|---|---|---|"
        )
        lines = [head]
        for r in self.table.itertuples(index=False):
            lines.append(
                f"| {r.method} | {metric_name(r.metric)} | {r.ref_mean:.3f} | "
                f"{r.mean:.3f} | {r.diff:+.3f} | [{r.ci_low:+.3f}, {r.ci_high:+.3f}] | "
                f"{format_p(r.p_query)} | {format_p(r.p_episode)} | "
                f"{r.n_queries} / {r.n_episodes} |"
            )
        return "\n".join(lines)


def compare(
    rows: pd.DataFrame,
    *,
    reference: str,
    budget: int,
    methods: Sequence[str] | None = None,
    metrics: Sequence[str] = ("recall", "hit2"),
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
    jobs: int = 1,
) -> Comparison:
    """Compare ``reference`` with each other method at ``budget``: query- and
    episode-level sign-flip tests (Fisher-combined across seeds) and a bootstrap CI of
    the per-query difference ``diff = reference − method``. ``jobs``: threads for the
    tests (:func:`precompute`; -1: one per core); the numbers do not depend on it.
    """
    present = rows["method"].unique().tolist()
    if reference not in present:
        raise InvalidInputError(f"reference method {reference!r} has no rows")
    others = [m for m in (methods or present) if m != reference and m in present]
    # one join serves both tests (what paired_test would compute twice); on several
    # threads each pair's tests start while the next pair is joined
    pairs: dict[tuple[str, str], pd.DataFrame] = {}
    episodes: dict[tuple[str, str], pd.DataFrame] = {}
    with Prefetch(n_permutations=n_permutations, seed=seed, jobs=jobs) as pre:
        for m in others:
            for metric in metrics:
                dq = paired_differences(rows, reference, m, metric, budget=budget)
                de = episode_differences(dq)
                pairs[(m, metric)], episodes[(m, metric)] = dq, de
                if pre.threads > 1:
                    pre.add(
                        sign_flips=[*seed_groups(dq), *seed_groups(de)],
                        bootstraps=[dq["d"].to_numpy()],
                    )
    out = []
    for m in others:
        for metric in metrics:
            dq, de = pairs[(m, metric)], episodes[(m, metric)]
            pq = seed_combined_p(dq, n_permutations=n_permutations, seed=seed)
            pe = seed_combined_p(de, n_permutations=n_permutations, seed=seed)
            nq, ne = len(dq), len(de)
            lo, hi = bootstrap_ci(dq["d"].to_numpy(), seed=seed)
            ref_mean = float(dq[metric].mean())
            out.append(
                {
                    "method": m,
                    "metric": metric,
                    "ref_mean": ref_mean,
                    "mean": float(dq[f"{metric}_b"].mean()),
                    "diff": float(dq["d"].mean()),
                    "ci_low": lo,
                    "ci_high": hi,
                    "p_query": pq,
                    "p_episode": pe,
                    "n_queries": nq,
                    "n_episodes": ne,
                }
            )
    return Comparison(reference, int(budget), pd.DataFrame(out), n_permutations)
