"""The flat cosine ranking of a fitted view's steps, exact or from an HNSW index.

Every method that falls back on (or is) Flat Vector reads the steps by descending
cosine with the query. Below :data:`ANN_MIN_STEPS` steps, and for causal queries over a
prefix, that ranking is an exact scan; from it on, a query over the whole memory takes
the ranking's head from an HNSW index over the distinct steps (hnswlib, the ``scale``
extra; :class:`~osumem.retrieve.distinct.DistinctKnn`: equal steps are one point),
built in a background thread while a method builds its own structure (or at the first
query) and extended with the steps added since. :class:`StepIndex` owns that index and
the cost statistics the approximate packing reads; the view is passed to every call
(the retriever keeps it), so a retriever that swaps its view keeps a consistent index.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.osu.background import BackgroundCall
from osumem.osu.views import HNSW_EF_SEARCH, hnsw_available
from osumem.retrieve.distinct import DistinctKnn
from osumem.retrieve.packing import flat_first_fit, flat_pack, pack_first_fit, top_order
from osumem.types import IntArray, MemoryView

#: From this many steps on, a query over the whole memory takes the flat ranking's
#: head from an HNSW index over the steps (approximate); smaller memories and causal
#: queries (``before``) scan exactly (docs/decisions.md).
ANN_MIN_STEPS = 20_000

#: Smallest head asked of the step index by a packing query.
ANN_HEAD_MIN = 32

#: Build beam of the step index (a lighter build than the similarity view's).
STEP_INDEX_EF_CONSTRUCTION = 64

#: With background builds, at most this many steps added since the index was last
#: extended are inserted inside a query; a longer run is inserted on a background
#: thread while queries scan exactly.
CATCHUP_STEPS = 64

#: With background builds, a retriever's update inserts the steps added since the index
#: was last extended once at least this many wait (at most :data:`CATCHUP_STEPS`), so
#: the query that next needs the index does not insert a long run of them.
KEEP_UP_STEPS = 8

#: A new step index holds room for 1/this more steps than it is built over (hnswlib
#: grows an index by copying it whole).
HEADROOM_DIVISOR = 4

#: Steps in the fixed random sample whose cosines with the query say how far the
#: index's answer stands above the rest (the recall safeguard).
SPREAD_SAMPLE = 256

#: The recall safeguard: a returned step is "clear" when its relative contrast, the
#: mean cosine distance of the sampled steps over its own distance, is at least this
#: (docs/decisions.md) ...
MIN_CONTRAST = 1.5

#: ... and the index's answer is trusted when at least this share of the ``k`` it
#: returned are clear (the recall the ANN paths promise); ...
CLEAR_SHARE = 0.95

#: ... from this share to :data:`CLEAR_SHARE` (a clear head, then steps past the
#: cluster) the index is asked again with a beam :data:`RAISED_EF_PER_K` times ``k``;
#: below it too, and that answer stands when it is clear itself (the first beam did
#: not reach the query's cluster); otherwise the steps are scanned exactly.
RAISE_EF_SHARE = 0.25

#: The raised search beam, per step asked for (the first query's beam is ``2k``).
RAISED_EF_PER_K = 4

#: The approximate packing: once only steps of cost at most what is left of the
#: budget can fit and at most this many steps are that cheap, first fit goes on over
#: them exactly (by cosine) instead of asking the index for a larger head.
CHEAP_SCAN_STEPS = 4096

#: The cached cost statistics count the steps of each cost up to this many tokens (a
#: histogram), so the approximate packing learns how many steps are cheap enough for
#: what is left of the budget without a pass over every step's cost; a larger rest
#: is counted with that pass.
COST_HIST_MAX = 1 << 16


#: The unsure-index memo (agent memories only, :class:`UnsureMemo`): when at least
#: :data:`UNSURE_MIN` of the last :data:`UNSURE_WINDOW` safeguarded queries of an index
#: ended in the exact scan, the next queries scan exactly at once, and every
#: :data:`UNSURE_PROBE_EVERY`-th of them asks the index again.
UNSURE_WINDOW = 8
UNSURE_MIN = 6
UNSURE_PROBE_EVERY = 8


class UnsureMemo:
    """Whether an index's recall safeguard has been falling back, so that the next
    query goes straight to the exact scan (which the fallback would run anyway, after
    two index queries). On data whose neighbours do not stand out (templated texts
    under the hashing encoder, unclustered vectors) every query fell back: two index
    queries and the scan each time. A probe that the index answers (no fallback)
    clears the memo. Only for retrievers whose answers may depend on timing already
    (``background``): there an exact answer where the index would have answered is
    the reference answer; a retriever used directly never skips, so its answers do
    not depend on the queries before them."""

    def __init__(self) -> None:
        self._outcomes: list[bool] = []  # the last UNSURE_WINDOW: True = fell back
        self._skips = 0
        #: Queries answered exactly without asking the index.
        self.skipped = 0

    def skip(self) -> bool:
        """Whether this query scans exactly without asking the index (counted)."""
        if len(self._outcomes) < UNSURE_WINDOW or sum(self._outcomes) < UNSURE_MIN:
            return False
        self._skips += 1
        if self._skips % UNSURE_PROBE_EVERY == 0:
            return False  # a probe
        self.skipped += 1
        return True

    def record(self, fell_back: bool) -> None:
        """The outcome of a query the index answered or the safeguard scanned."""
        if not fell_back and sum(self._outcomes) >= UNSURE_MIN:
            self._outcomes.clear()  # a probe the index answered: trust it again
            self._skips = 0
        self._outcomes.append(fell_back)
        del self._outcomes[:-UNSURE_WINDOW]


class SampleMean:
    """The mean of a fixed sample of unit rows (the background an index's answer is
    compared with), summed once: the mean cosine of a query with the sampled rows is
    then one dot product, ``(Σ rows) · q / m``, instead of ``m`` of them."""

    __slots__ = ("_count", "_sum")

    def __init__(self, rows: NDArray[np.float32]) -> None:
        self._count = int(rows.shape[0])
        # one matrix-vector product (BLAS) reads the rows, strided or not, once
        self._sum = np.ones(self._count, dtype=np.float32) @ rows if self._count else None

    def cosine(self, q: NDArray[np.float32]) -> float | None:
        """The mean cosine of ``q`` with the sampled rows (``None`` for no rows)."""
        if self._sum is None:
            return None
        return float(self._sum @ q) / self._count


def clear_share(found: NDArray[np.floating], background: float | None, k: int, n: int) -> float:
    """The share of an approximate top-``k`` answer (``found``: the exact scores of
    what the index returned, of ``n`` steps) the index is sure of.

    HNSW finds near steps reliably when they stand out of the rest (a cluster of
    similar steps) and poorly when they do not (unclustered vectors in many
    dimensions, where the nearest steps are barely nearer than a random one). A
    step's relative contrast ``(1 - mean sampled cosine) / (1 - its cosine)``, a
    ratio of cosine distances, measures that; a step is clear at a contrast of at
    least :data:`MIN_CONTRAST`. ``background`` is the mean sampled cosine
    (:meth:`SampleMean.cosine`; ``None`` for an empty sample). The share is of
    ``min(k, n)`` (0 when the index returned fewer).
    """
    want = min(k, n)
    if want <= 0:
        return 1.0
    if found.shape[0] < want or background is None:
        return 0.0
    far = 1.0 - background
    clear = int(np.count_nonzero(far >= MIN_CONTRAST * (1.0 - found.astype(np.float64))))
    return clear / want


def ann_unsure(found: NDArray[np.floating], background: float | None, k: int, n: int) -> bool:
    """Whether fewer than :data:`CLEAR_SHARE` of an approximate top-``k`` answer are
    clear (:func:`clear_share`): the answer may miss much of the true top ``k``."""
    return clear_share(found, background, k, n) < CLEAR_SHARE


class StepIndex:
    """The flat ranking of a view's steps: an exact scan, or an HNSW index over the
    steps for large memories queried whole.

    Args:
        seed: the HNSW graph's random seed (the retriever's).
        ann_min_steps: memory size from which whole-memory queries use the index
            (default :data:`ANN_MIN_STEPS`, read when the index object is made).
    """

    def __init__(self, seed: int = 0, ann_min_steps: int | None = None) -> None:
        self.seed = int(seed)
        self.ann_min_steps = ANN_MIN_STEPS if ann_min_steps is None else int(ann_min_steps)
        #: The HNSW index over the steps, each distinct step once (``None`` until built).
        self.hnsw: DistinctKnn | None = None
        #: A nearest-neighbour search held outside the process (a store's vector index):
        #: ``source(q, k, n)`` returns about the ``k`` best positions below ``n``, best
        #: first. When set, large memories take their ranking's head from it and build
        #: no HNSW index of their own.
        self.source: Callable[[NDArray[np.float32], int, int], IntArray] | None = None
        #: Build and extend the index on a background thread, never inside a query
        #: (the agent memory sets it; a retriever used directly builds in place, so
        #: its answers do not depend on timing).
        self.background = False
        #: Queries the recall safeguard answered exactly ...
        self.fallbacks = 0
        #: ... and those answered from the index asked again with a wider beam.
        self.raised = 0
        #: With :attr:`background`: whether the safeguard has been falling back.
        self.unsure = UnsureMemo()
        #: The background insertion in flight: the index it fills, and the call.
        self._job: tuple[DistinctKnn, BackgroundCall[None]] | None = None
        #: Held while the index is taken from a finished job or extended: queries on
        #: several threads (a server's readers) change it one at a time, and a query
        #: that finds it up to date takes no lock.
        self._lock = threading.RLock()
        self._exact: tuple[NDArray[np.float32], MemoryView, NDArray[np.float32]] | None = None
        self._sample: IntArray | None = None
        self._sample_n = 0
        # the sampled rows of one view, gathered and summed once (a view queried repeatedly)
        self._sample_mean: tuple[MemoryView, SampleMean] | None = None
        self._last: tuple[NDArray[np.float32], MemoryView, int, IntArray] | None = None
        self._cost_view: MemoryView | None = None
        # (sum, count, min, count of the min) of the costs of ``_cost_view``
        self._cost_cache = (0, 0, 0, 0)
        # how many of its steps cost 0, 1, ... COST_HIST_MAX tokens
        self._cost_hist = np.zeros(0, dtype=np.int64)

    def reset(self) -> None:
        """Forget the HNSW index (a new fit over other steps); a background job in
        flight is left to finish and dropped."""
        self.hnsw = None
        self._job = None
        self.unsure = UnsureMemo()
        self._exact = None
        self._sample = None
        self._sample_mean = None
        self._last = None

    def uses_ann(self, view: MemoryView, limit: int) -> bool:
        """Whether the ranking comes from the HNSW index: a memory of at least
        :attr:`ann_min_steps` steps, queried over all of it, with hnswlib installed
        (without it the exact scan answers)."""
        indexed = self.source is not None or hnsw_available()
        return view.n >= self.ann_min_steps and limit >= view.n and indexed

    def top(self, view: MemoryView, q: NDArray[np.float32], k: int) -> IntArray:
        """About the ``k`` most similar steps, best first, from the external
        :attr:`source` or the HNSW index (extended with the steps added since). The
        recall safeguard (:func:`clear_share`): an answer the index is unsure of is
        asked again with a wider beam; when it was mostly unsure, the wider answer
        stands only if it is clear, else the steps are scanned exactly. An answer of
        the source that is not clear is replaced by the exact scan.

        Without :attr:`background` a missing index is built now. With it, no call
        waits for index work: a missing index, or a long run of steps added since it
        was built, is inserted on a background thread while this call scans exactly;
        a short run (at most :data:`CATCHUP_STEPS`) is inserted here.
        """
        if self.source is not None:
            return self._from_source(self.source, view, q, k)
        last = self._last
        if last is not None and last[1] is view and last[2] >= k and np.array_equal(last[0], q):
            # a smaller head of the same query: the larger answer's prefix
            return last[3][:k]
        found = self._top(view, q, k)
        self._last = (np.array(q, copy=True), view, k, found)
        return found

    def top_wide(
        self, view: MemoryView, q: NDArray[np.float32], k: int, beam_per_k: int = RAISED_EF_PER_K
    ) -> IntArray:
        """:meth:`top` from one index query whose answer later heads reuse: the index
        is asked for as many steps as its beam, ``max(HNSW_EF_SEARCH, beam_per_k·k)``
        (hnswlib searches with a beam of ``max(ef, k)``, so the first ``k`` are what
        a query for ``k`` with that beam answers: with ``beam_per_k = 2``, :meth:`top`'s
        first query; with :data:`RAISED_EF_PER_K`, its raised one), the recall safeguard
        is applied to the first ``k`` (fewer than :data:`RAISE_EF_SHARE` of them clear:
        the index is asked again with the raised beam, and that answer stands if it is
        clear, else the steps are scanned exactly), and the whole answer is kept: a later
        :meth:`top` of the same query for at most that many steps (a growing head, the
        packs) is its prefix, with no further query."""
        if self.source is not None:
            return self._from_source(self.source, view, q, k)
        last = self._last
        if last is not None and last[1] is view and last[2] >= k and np.array_equal(last[0], q):
            return last[3][:k]
        wide = min(view.n, max(k, HNSW_EF_SEARCH, beam_per_k * k))
        index = None if self._skip() else self._ready(view)
        if index is None:
            found = self._exact_top(view, q, wide)
        else:
            found = index.query(q, wide, ef=wide)
            background = self._background(view, q)
            share = clear_share(view.embeddings[found[:k]] @ q, background, k, view.n)
            fell_back = self.fallbacks
            if share < RAISE_EF_SHARE:
                found = self._widened(index, view, q, k, wide, RAISED_EF_PER_K * k, background)
            self._record(self.fallbacks > fell_back)
        self._last = (np.array(q, copy=True), view, wide, found)
        return found[:k]

    def _top(self, view: MemoryView, q: NDArray[np.float32], k: int) -> IntArray:
        index = None if self._skip() else self._ready(view)
        if index is None:
            return self._exact_top(view, q, k)
        found = index.query(q, k)
        background = self._background(view, q)
        share = clear_share(view.embeddings[found] @ q, background, k, view.n)
        if share >= CLEAR_SHARE:
            self._record(False)
            return found
        if share >= RAISE_EF_SHARE:
            self.raised += 1
            self._record(False)
            return index.query(q, k, ef=RAISED_EF_PER_K * k)
        fell_back = self.fallbacks
        found = self._widened(index, view, q, k, k, RAISED_EF_PER_K * k, background)
        self._record(self.fallbacks > fell_back)
        return found

    def _from_source(
        self,
        source: Callable[[NDArray[np.float32], int, int], IntArray],
        view: MemoryView,
        q: NDArray[np.float32],
        k: int,
    ) -> IntArray:
        """The ``k`` best steps from the external :attr:`source`, under the recall
        safeguard: an answer of which fewer than :data:`CLEAR_SHARE` are clear is
        replaced by the exact scan (the source has no beam to widen here)."""
        if not self._skip():
            found = source(q, k, view.n)
            clear = clear_share(
                view.embeddings[found[:k]] @ q, self._background(view, q), k, view.n
            )
            if clear >= CLEAR_SHARE:
                self._record(False)
                return found
            self.fallbacks += 1
            self._record(True)
        return self._exact_top(view, q, k)

    def _skip(self) -> bool:
        """Whether this query scans exactly at once (:class:`UnsureMemo`; only with
        :attr:`background`)."""
        return self.background and self.unsure.skip()

    def _record(self, fell_back: bool) -> None:
        if self.background:
            self.unsure.record(fell_back)

    def _widened(
        self,
        index: DistinctKnn,
        view: MemoryView,
        q: NDArray[np.float32],
        k: int,
        width: int,
        ef: int,
        background: float | None,
    ) -> IntArray:
        """The answer to a query the index was mostly unsure of (fewer than
        :data:`RAISE_EF_SHARE` of its first ``k`` clear): the ``width`` steps the index
        finds with the wider beam ``ef``, when their first ``k`` are clear (the first
        beam did not reach the query's cluster); else the ``width`` best, scanned
        exactly (also when ``ef`` is no wider than ``width``, the beam already used)."""
        if ef > width:
            wide = index.query(q, width, ef=ef)
            if clear_share(view.embeddings[wide[:k]] @ q, background, k, view.n) >= CLEAR_SHARE:
                self.raised += 1
                return wide
        self.fallbacks += 1
        return self._exact_top(view, q, width)

    def _ready(self, view: MemoryView) -> DistinctKnn | None:
        """The HNSW index, up to date with ``view``; ``None`` while a background
        thread works on it (the caller scans exactly)."""
        index = self.hnsw
        if self._job is None and index is not None and index.size >= view.n:
            return index  # nothing to take or to insert
        with self._lock:
            return self._brought_up(view)

    def _brought_up(self, view: MemoryView) -> DistinctKnn | None:
        """:meth:`_ready`'s work, under the lock."""
        if self._job is not None:
            if self._job[1].running:
                return None
            self._finish()
        if self.hnsw is None:
            if not self.background:
                self.hnsw = self._new_hnsw(view, view.n)
            else:
                self._start(self._new_hnsw(view, view.n), view, 0)
                return None
        index = self.hnsw
        tail = view.n - index.size
        if tail > 0:
            if self.background and (tail > CATCHUP_STEPS or index.size + tail > index.capacity):
                # a bulk, or a resize of the whole index: off the query path
                self.hnsw = None
                self._start(index, view, index.size)
                return None
            index.add(view.embeddings[index.size : view.n])
        return index

    def keep_up(self, view: MemoryView) -> None:
        """With :attr:`background`: insert the steps of ``view`` the index lacks now when
        at least :data:`KEEP_UP_STEPS` and at most :data:`CATCHUP_STEPS` wait (the run a
        query would otherwise insert all at once). The index then holds the same steps
        in the same order as a query's catch-up would give it: the same graph, the same
        answers; only when the insertion happens changes."""
        with self._lock:
            index = self.hnsw
            if not self.background or index is None or self._job is not None:
                return
            tail = view.n - index.size
            if KEEP_UP_STEPS <= tail <= CATCHUP_STEPS and index.size + tail <= index.capacity:
                index.add(view.embeddings[index.size : view.n])

    def _start(self, index: DistinctKnn, view: MemoryView, start: int) -> None:
        """Insert the steps ``start..view.n`` into ``index`` on a background thread."""
        vectors = view.embeddings[start : view.n]
        self._job = (index, BackgroundCall(lambda: index.add(vectors), "osumem-step-index"))

    def _finish(self) -> None:
        """Take the finished background job's index (re-raising what it raised)."""
        job, self._job = self._job, None
        if job is None:
            return
        job[1].result()
        self.hnsw = job[0]

    def wait(self, view: MemoryView | None = None) -> None:
        """Wait for the background index work; with ``view``, also build or extend the
        index over all of it now when queries over it use one (so the next answers do
        not depend on timing)."""
        with self._lock:
            self._finish()
            if view is None or self.source is not None:
                return
            if view.n < self.ann_min_steps or not hnsw_available():
                return
            if self.hnsw is None:
                self.hnsw = self._new_hnsw(view, view.n)
            if self.hnsw.size < view.n:
                self.hnsw.add(view.embeddings[self.hnsw.size : view.n])

    @property
    def building(self) -> bool:
        """Whether a background thread is inserting steps into the index."""
        return self._job is not None and self._job[1].running

    def _exact_top(self, view: MemoryView, q: NDArray[np.float32], k: int) -> IntArray:
        """The exact ``k`` best steps, best first (ties by position); the cosines are
        kept for the next call with the same query and view (a growing head)."""
        cached = self._exact
        if cached is not None and cached[1] is view and np.array_equal(cached[0], q):
            cos = cached[2]
        else:
            cos = view.embeddings[: view.n] @ q
            self._exact = (np.array(q, copy=True), view, cos)
        return top_order(cos, k)

    def _background(self, view: MemoryView, q: NDArray[np.float32]) -> float | None:
        """The mean cosine of ``q`` with a fixed random sample of the steps (the
        background the index's answer is compared with)."""
        n = view.n
        if self._sample is None or self._sample_n * 2 < n:
            rng = np.random.default_rng(self.seed)
            size = min(n, SPREAD_SAMPLE)
            self._sample = np.sort(rng.choice(n, size=size, replace=False)).astype(np.int64)
            self._sample_n = n
            self._sample_mean = None
        summed = self._sample_mean
        if summed is None or summed[0] is not view:
            summed = self._sample_mean = (view, SampleMean(view.embeddings[self._sample]))
        return summed[1].cosine(q)

    def _new_hnsw(self, view: MemoryView, capacity: int) -> DistinctKnn:
        # headroom for the steps an agent adds next: growing the index copies it whole
        return DistinctKnn(
            view.dim,
            seed=self.seed,
            ef_construction=STEP_INDEX_EF_CONSTRUCTION,
            capacity=capacity + capacity // HEADROOM_DIVISOR,
        )

    def start_build(self, view: MemoryView) -> Callable[[], None] | None:
        """Start building the HNSW index over ``view`` in a background thread when
        queries over it will use one (:meth:`uses_ann`); returns the call that waits
        for it (``None`` when nothing was started).

        hnswlib releases the GIL while it inserts, so the build runs on a second core
        while the caller builds its own structure. Insertion stays on one thread, so
        the graph is the one a sequential build makes.
        """
        if self.source is not None or not (view.n >= self.ann_min_steps and hnsw_available()):
            return None
        index = self._new_hnsw(view, view.n)
        build = BackgroundCall(lambda: index.add(view.embeddings), "osumem-step-index")

        def wait() -> None:
            build.result()
            self.hnsw = index

        return wait

    def head(
        self,
        view: MemoryView,
        q: NDArray[np.float32],
        limit: int,
        tokens: float,
        min_count: int = 1,
        beam_per_k: int | None = None,
    ) -> IntArray:
        """The head of the ranking of the steps before ``limit`` holding at least
        ``tokens`` tokens and at least ``min_count`` steps (all of them when they hold
        fewer), without sorting the rest. ``beam_per_k``: from the index, the first
        head comes from :meth:`top_wide` with that beam (later heads and packs of the
        query reuse its answer); ``None``: from :meth:`top`."""
        if self.uses_ann(view, limit):
            costs = view.costs
            mean_cost = self.cost_stats(view)[0]
            k = max(ANN_HEAD_MIN, min_count, math.ceil(tokens / max(mean_cost, 1.0)))
            k = min(limit, k)
            beam = beam_per_k
            while True:
                if beam is None:
                    head = self.top(view, q, k)
                else:
                    head, beam = self.top_wide(view, q, k, beam), None
                if k >= limit or int(costs[head].sum()) >= tokens:
                    return head
                k = min(limit, 2 * k)
        cos = view.embeddings[:limit] @ q
        costs = view.costs[:limit]
        k = max(1, min_count, math.ceil(tokens / max(float(costs.mean()), 1.0)))
        k = min(limit, k)
        while True:
            head = top_order(cos, k)
            if k >= limit or int(costs[head].sum()) >= tokens:
                return head
            k = min(limit, 2 * k)

    def pack(
        self,
        view: MemoryView,
        q: NDArray[np.float32],
        limit: int,
        budget: int,
        exclude: IntArray | None = None,
    ) -> IntArray:
        """First fit of the ranking of the steps before ``limit`` (minus the steps in
        ``exclude``) under ``budget``: exact (a growing head of the cosine ranking, no
        full sort) below :attr:`ann_min_steps` steps or under a causal limit; from the
        HNSW index above."""
        if self.uses_ann(view, limit):
            return self._ann_pack(view, q, budget, exclude)
        return flat_pack(view.embeddings[:limit] @ q, view.costs[:limit], budget, exclude)

    def _ann_pack(
        self,
        view: MemoryView,
        q: NDArray[np.float32],
        budget: int,
        exclude: IntArray | None,
    ) -> IntArray:
        """:meth:`pack` over the whole memory from the HNSW index: heads of the index's
        ranking, minus ``exclude``, packed first fit and grown (×4) while budget is left
        that an unseen step could use; once at most :data:`CHEAP_SCAN_STEPS` steps are
        cheap enough for what is left, first fit goes on over those, scored exactly,
        instead (with an exact ranking both give the exact first fit)."""
        costs = view.costs
        mean_cost, min_cost, n_min = self.cost_stats(view)
        skip: IntArray | None = None
        if exclude is not None and exclude.size:
            skip = np.sort(exclude)
            if int(np.count_nonzero(costs[skip] == min_cost)) >= n_min:
                # every cheapest step is excluded: the smallest cost left is higher
                rest = costs.copy()
                rest[skip] = np.iinfo(np.int64).max
                min_cost = int(rest.min())

        def head(k: int) -> IntArray:
            found = self.top(view, q, k)
            if skip is None:
                return found
            at = np.minimum(np.searchsorted(skip, found), skip.shape[0] - 1)
            return found[skip[at] != found]

        n = view.n
        # ask the index for a few times the steps the budget holds on average
        k = min(n, max(ANN_HEAD_MIN, 4 * math.ceil(budget / mean_cost)))
        while True:
            found = head(k)
            taken = pack_first_fit(found, costs, budget)
            left = budget - int(costs[taken].sum())
            if k >= n or left < min_cost:
                return taken
            # only a step of cost <= left fits now: when few are that cheap, first fit
            # goes on over them exactly, by cosine, instead of over a larger head
            if self.n_costing_at_most(view, left) <= CHEAP_SCAN_STEPS:
                rest = self._cheap_pack(view, q, left, found, skip)
                return np.concatenate([taken, rest])
            k = min(n, 4 * k)

    @staticmethod
    def _cheap_pack(
        view: MemoryView,
        q: NDArray[np.float32],
        budget: int,
        seen: IntArray | None,
        skip: IntArray | None,
    ) -> IntArray:
        """First fit under ``budget`` of the steps that cost at most ``budget``, other
        than those in ``seen`` (a head already packed) and ``skip``, by exact cosine
        (ties by position): one mask of the steps left out, not a set lookup per step,
        and a growing head of the ranking (:func:`flat_first_fit`), not a full sort."""
        costs = view.costs[: view.n]
        fits = costs <= budget
        for out in (seen, skip):
            if out is not None and out.size:
                fits[out] = False
        cheap = np.flatnonzero(fits)
        return cheap[flat_first_fit(view.embeddings[cheap] @ q, costs[cheap], budget)]

    def cost_stats(self, view: MemoryView) -> tuple[float, int, int]:
        """``(mean, min, count of the min)`` of the view's step costs, cached per view
        (:meth:`extend_cost_stats` carries the cache over to an extended view)."""
        if self._cost_view is not view:
            costs = view.costs
            low = int(costs.min()) if costs.shape[0] else 0
            self._cost_cache = (
                int(costs.sum()),
                int(costs.shape[0]),
                low,
                int(np.count_nonzero(costs == low)),
            )
            self._cost_hist = _cost_histogram(costs)
            self._cost_view = view
        total, n, low, n_low = self._cost_cache
        # integer sum / count: the float64 mean NumPy gives for these integer costs
        return total / max(n, 1), low, n_low

    def extend_cost_stats(self, old: MemoryView | None, view: MemoryView) -> None:
        """Carry the cached cost statistics of ``old`` over to ``view``, which extends
        it by new steps at the end (what ``update`` is given), reading only the new
        steps' costs: an add then costs O(new steps), not O(n)."""
        if old is None or self._cost_view is not old or view.n < old.n:
            return
        total, n, low, n_low = self._cost_cache
        tail = view.costs[n : view.n]
        if tail.shape[0]:
            t_low = int(tail.min())
            t_count = int(np.count_nonzero(tail == t_low))
            if n == 0 or t_low < low:
                low, n_low = t_low, t_count
            elif t_low == low:
                n_low += t_count
            total += int(tail.sum())
            add = _cost_histogram(tail)
            hist = self._cost_hist
            if add.shape[0] > hist.shape[0]:
                hist = np.concatenate([hist, np.zeros(add.shape[0] - hist.shape[0], np.int64)])
            hist[: add.shape[0]] += add
            self._cost_hist = hist
        self._cost_cache = (total, int(view.n), low, n_low)
        self._cost_view = view

    def n_costing_at_most(self, view: MemoryView, tokens: int) -> int:
        """How many of the view's steps cost at most ``tokens`` (from the cached
        histogram when ``tokens`` <= :data:`COST_HIST_MAX`; a pass over the costs
        above)."""
        self.cost_stats(view)
        if tokens > COST_HIST_MAX:
            return int(np.count_nonzero(view.costs <= tokens))
        return int(self._cost_hist[: max(tokens + 1, 0)].sum())


def _cost_histogram(costs: NDArray[Any]) -> IntArray:
    """How many of ``costs`` equal 0, 1, ... (those at most :data:`COST_HIST_MAX`)."""
    low = costs[costs <= COST_HIST_MAX] if costs.shape[0] else costs
    return np.bincount(np.asarray(low, dtype=np.int64), minlength=1).astype(np.int64)
