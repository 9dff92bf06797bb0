"""Construction of an OSU pool: the batch build, incremental adds and derivation.

Construction keeps *raw groups* per view (keyed grouping, Δ_view splitting, S_max
chunks) as slots of the pool's :class:`~osumem.osu.slots.SlotTable` and derives the
pool from them: prune groups under f_min, cap every step at M_max memberships by view
priority (ties: higher centroid coherence, then canonical order), re-apply f_min.

:func:`add` touches only the groups the new steps join, re-checks the cap only for the
members of those groups, and recomputes the derived state only of the groups whose
kept members changed. The similarity view is recomputed in batches (geometric
refreshes, :class:`SimilarityState`); a refresh re-derives everything at once,
vectorised (:func:`rebuild`).
"""

from __future__ import annotations

import bisect
import itertools
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from osumem.errors import DimensionError, InvalidInputError
from osumem.osu.background import BackgroundCall, check_exit
from osumem.osu.config import VIEWS
from osumem.osu.heap import release_free_memory
from osumem.osu.slots import HEADROOM_MIN, SlotTable, shared_lists
from osumem.osu.sums import row_norms, row_sum, segment_stats
from osumem.osu.views import (
    EXACT_KNN_MAX,
    GroupArrays,
    KnnIndex,
    annotation_group_arrays,
    communities,
    community_group_arrays,
    hnsw_available,
    similarity_group_arrays,
    similarity_scope,
    step_keys,
    warm_community_imports,
)
from osumem.types import IntArray, ListPrefix, MemoryView, segment_bounds

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from osumem.osu.config import OSUConfig
    from osumem.osu.pool import OSUPool

ANNOTATION_VIEWS: tuple[str, ...] = ("entity", "tool", "subgoal")
SIMILARITY_CODE = VIEWS.index("similarity")

#: No groups, as :data:`~osumem.osu.views.GroupArrays`.
_NO_GROUPS: GroupArrays = ([], np.empty(0, dtype=np.int64), np.zeros(1, dtype=np.int64))

__all__ = ["ANNOTATION_VIEWS", "EXACT_KNN_MAX", "SimilarityState", "add", "build"]


class SimilarityState:
    """What the similarity view keeps between refreshes: the step count of the last
    refresh, the HNSW index over its scope (above
    :data:`~osumem.osu.views.EXACT_KNN_MAX` steps) and the Leiden partition it
    restarts from.

    A built or restored pool does not hold the index (``knn``): it keeps the number of
    scope steps it covered (``knn_pending``) and the next refresh rebuilds it in one
    insertion run, which gives the same graph as the batches that built it (insertion
    is single-threaded and in label order), or takes the same index that
    :func:`prepare_similarity` started building ahead (``prebuild``).
    """

    def __init__(self) -> None:
        self.upto = 0
        self.knn: KnnIndex | None = None
        self.knn_pending = 0
        self.partition: IntArray | None = None
        self.prebuild: KnnPrebuild | None = None  # the dropped index, rebuilding
        self.job: RefreshJob | None = None  # a refresh computed in the background

    @property
    def knn_size(self) -> int:
        """Scope steps the HNSW index covers (held or pending)."""
        return self.knn.size if self.knn is not None else self.knn_pending


class KnnPrebuild:
    """The similarity view's HNSW index over ``rows`` (the first ``size`` scope steps,
    copied by the caller), built on a daemon thread (:class:`BackgroundCall`):
    single-threaded insertion in label order, as the refresh itself inserts, so the
    same index."""

    def __init__(self, rows: NDArray[np.float32], dim: int, seed: int) -> None:
        self.size = int(rows.shape[0])

        def work() -> KnnIndex:
            knn = KnnIndex(dim, seed=seed)
            knn.add(rows)
            return knn

        self._call = BackgroundCall(work, "osumem-similarity-index")

    def result(self) -> KnnIndex:
        """Wait for the build; the index, or raise what it raised."""
        return self._call.result()


def build(pool: OSUPool, view: MemoryView, *, similarity: bool = True) -> None:
    """Build ``pool`` (fresh: no slots) over every step of ``view`` at once (batch
    construction); ``similarity=False`` leaves the similarity view for the first
    refresh."""
    config = pool.config
    pool.view_ = view
    pool.slots = SlotTable(config, view.dim)
    pool.similarity = SimilarityState()
    pool.invalidate()
    slots = pool.slots
    positions = list(range(view.n))
    # the grouped arrays are reused by the derivation; a large memory does not hold
    # them through the similarity refresh and re-reads its slots instead
    keep_arrays = view.n <= EXACT_KNN_MAX
    flat: list[IntArray] = []
    sizes: list[IntArray] = []
    for name in ANNOTATION_VIEWS:
        if name not in config.views:
            continue
        keys, pos, bounds = annotation_group_arrays(view, name, config)
        g0 = slots.new_slots(name, keys, shared_lists(positions, pos, bounds), pos[bounds[:-1]])
        slots.last.update(
            zip([(name, key) for key in keys], range(g0, g0 + len(keys)), strict=True)
        )
        if keep_arrays:
            flat.append(pos)
            sizes.append(np.diff(bounds))
        del pos, bounds
    del positions
    sim = refresh_similarity(pool, view) if similarity else _NO_GROUPS
    state = pool.similarity
    if state.knn is not None:
        # a built pool does not hold the similarity view's HNSW index (0.15x the
        # raw embeddings at 100k steps): the next refresh rebuilds it from the same
        # scope steps in one insertion run, which gives the same graph
        state.knn_pending = state.knn.size
        state.knn = None
    rebuild(pool, view, sim, annotation=(flat, sizes) if keep_arrays else None)
    if view.n > EXACT_KNN_MAX:
        release_free_memory()


def add(pool: OSUPool, view: MemoryView) -> None:
    """Extend ``pool`` to ``view``, which must extend the current view by new steps at
    the end (see :meth:`OSUPool.add <osumem.osu.pool.OSUPool.add>`)."""
    old = pool.view_
    start = 0 if old is None else old.n
    if view.n < start:
        raise InvalidInputError(
            f"OSUPool.add: the new view has {view.n} steps, fewer than the {start} built"
        )
    if old is not None and old.n and view.dim != old.dim:
        raise DimensionError(
            f"OSUPool.add: embeddings of dimension {view.dim}, the pool has {old.dim}"
        )
    cfg = pool.config
    if old is None or old.n == 0:
        # the first add refreshes the similarity view on the same schedule as
        # every later one: once similarity_refresh steps have arrived
        build(pool, view, similarity=view.n >= cfg.similarity_refresh)
        return
    if view.n == start:
        pool.view_ = view
        return
    slots = pool.slots
    touched: set[int] = set()
    rows: dict[int, list[int]] = {p: [] for p in range(start, view.n)}
    for name in ANNOTATION_VIEWS:
        if name not in cfg.views:
            continue
        delta = cfg.split_threshold(name)
        for p, key in step_keys(view, name, start):
            g = slots.last.get((name, key))
            if g is not None:
                members = slots.members[g]
                if p - members[-1] <= delta and len(members) < cfg.max_osu_size:
                    slots.members[g] = (*members, p)
                    touched.add(g)
                    rows[p].append(g)
                    continue
            g = slots.new_slot(name, key, (p,))
            slots.last[(name, key)] = g
            touched.add(g)
            rows[p].append(g)
    pool.view_ = view
    pool.invalidate()
    slots.append_rows(view.n, rows)
    state = pool.similarity
    job = state.job
    if job is not None:
        job.record(view)
        if _applies(cfg, job, view.n) and (job.caught_up or not _defers(pool, job, view.n)):
            finish_refresh(pool)  # the shadow took this add too (a refresh it made due included)
        else:
            _update(pool, view, touched)  # the similarity groups stay as they are meanwhile
        return
    if view.n - state.upto < _due(cfg, state.upto):
        _update(pool, view, touched)
    elif pool.background_refresh and "similarity" in cfg.views:
        state.job = RefreshJob(pool, view)
    else:
        rebuild(pool, view, refresh_similarity(pool, view))


def _applies(cfg: OSUConfig, job: RefreshJob, n_steps: int) -> bool:
    """Whether the add reaching ``n_steps`` steps applies the background refresh
    ``job``: at its fixed step count, or at the next refresh's due point."""
    return n_steps >= job.apply_at or n_steps - job.upto >= _due(cfg, job.upto)


def refresh_blocks(pool: OSUPool, n_steps: int) -> bool:
    """Whether the add extending ``pool`` to ``n_steps`` steps would now wait: it
    applies the pool's background refresh, whose thread has not built the refreshed
    state yet (once built, applying it waits only for the replay of the adds taken
    meanwhile, as cheap as the adds were), and the pool does not go on without it
    (:func:`_defers`)."""
    job = pool.similarity.job
    return (
        job is not None
        and not job.ready
        and _applies(pool.config, job, n_steps)
        and not _defers(pool, job, n_steps)
    )


#: A pool that defers its refreshes (``OSUPool.defer_refresh``: a memory's) and holds
#: at least this many steps does not wait for a background refresh at its application
#: point: an add that reaches it while the refresh is still being computed goes on
#: without it (the similarity groups as they were, as before that point), and the
#: first add after the refreshed state has caught up with the adds, or
#: :func:`apply_ready_refresh`, or :func:`finish_refresh`, applies it. It goes on so
#: only until the next refresh's due point: the add that reaches it waits for the
#: refresh, so the similarity view is never more than one refresh behind (adds that
#: outrun the refreshes, a tight loop of single adds, would otherwise never let one be
#: taken). Smaller pools wait at the application point, so that their answers stay
#: those of that fixed point whatever the timing: what they wait is under half a
#: second (after 2,000 single adds the retrieve waits .24–.26 s and one add .17–.22
#: s), at 10,000 steps it was 1.5–1.8 s (``python benchmarks/add_loop.py --adds N``).
DEFER_MIN_STEPS = 2048


def _defers(pool: OSUPool, job: RefreshJob, n_steps: int) -> bool:
    """Whether an add extending ``pool`` to ``n_steps`` steps goes on without ``job``'s
    refresh, still being computed, past its application point (see
    :data:`DEFER_MIN_STEPS`): not from the next refresh's due point on."""
    return (
        pool.defer_refresh
        and n_steps >= DEFER_MIN_STEPS
        and n_steps - job.upto < _due(pool.config, job.upto)
    )


def apply_ready_refresh(pool: OSUPool) -> bool:
    """Apply the pool's background refresh when an add went past its application point
    without it and the refreshed state has caught up with the adds since (no wait: the
    shadow's state is taken as it is). Returns whether it was applied."""
    job = pool.similarity.job
    if job is None or not job.caught_up or pool.view_ is None:
        return False
    if not _applies(pool.config, job, pool.view_.n):
        return False
    return finish_refresh(pool)


def _due(cfg: OSUConfig, upto: int) -> float:
    """Steps past ``upto`` (the last refresh) at which the next refresh is due."""
    return max(cfg.similarity_refresh, cfg.similarity_refresh_ratio * upto)


def refresh_similarity(pool: OSUPool, view: MemoryView) -> GroupArrays:
    """The similarity view's raw groups over ``view``, computed here.

    Up to :data:`~osumem.osu.views.EXACT_KNN_MAX` steps in scope: the exact k-NN
    graph and a cold Leiden run (the paper's construction). Above: the new steps are
    inserted into an HNSW index kept between refreshes, and Leiden starts from the
    previous partition (new steps as singletons), so a refresh costs about n log n
    instead of n².
    """
    state = pool.similarity
    state.upto = view.n
    if "similarity" not in pool.config.views:
        return _NO_GROUPS
    held = _take_held(state)
    groups, kept = _similarity(view, pool.config, pool.seed, held, communities)
    _keep(state, kept)
    return groups


#: What a refresh starts from and what it leaves for the next: the HNSW index (or
#: ``None``), the scope steps a dropped index covered, the index being rebuilt ahead
#: (:class:`KnnPrebuild`) and the Leiden partition.
_Held = tuple[KnnIndex | None, int, KnnPrebuild | None, IntArray | None]


def _take_held(state: SimilarityState) -> _Held:
    held = (state.knn, state.knn_pending, state.prebuild, state.partition)
    state.prebuild = None
    return held


def _keep(state: SimilarityState, kept: _Held) -> None:
    state.knn, state.knn_pending, state.prebuild, state.partition = kept


def _similarity(
    view: MemoryView,
    cfg: OSUConfig,
    seed: int,
    held: _Held,
    detect: Callable[..., list[IntArray]],
) -> tuple[GroupArrays, _Held]:
    """The similarity view's raw groups over ``view`` from what the last refresh left
    (``held``), and what this one leaves; ``detect`` finds the communities
    (:func:`~osumem.osu.views.communities` in process, or in a child process)."""
    knn, knn_pending, pre, partition = held
    scope = similarity_scope(view, cfg)
    if scope.size <= EXACT_KNN_MAX or cfg.community != "leiden" or not hnsw_available():
        return similarity_group_arrays(view, cfg, seed, detect=detect), (None, 0, None, None)
    if knn is None and pre is not None and pre.size == knn_pending:
        knn, knn_pending = pre.result(), 0  # prepare_similarity's build
    if knn is None:
        knn = KnnIndex(view.dim, seed=seed)
        if knn_pending:
            knn.add(view.embeddings[scope[:knn_pending]])
            knn_pending = 0
    known = knn.size
    knn.add(view.embeddings[scope[known:]])
    src, dst = knn.edges(cfg.knn_k, lambda lo, hi: view.embeddings[scope[lo:hi]])
    initial = None
    if partition is not None:
        fresh = np.arange(scope.size - known, dtype=np.int64) + int(partition.max()) + 1
        initial = np.concatenate([partition, fresh])
    comms = detect(scope.size, src, dst, cfg.community, seed, initial=initial)
    partition = np.empty(scope.size, dtype=np.int64)
    for c, members in enumerate(comms):
        partition[members] = c
    return community_group_arrays(scope, comms, cfg), (knn, 0, None, partition)


#: A background refresh started at ``n`` steps, ``k`` of them new since the last one,
#: is applied by the first add that reaches ``n + max(REFRESH_LAG_MIN, k //
#: REFRESH_LAG_DIVISOR)`` steps, or the next refresh's due point if that comes first.
REFRESH_LAG_MIN = 64
REFRESH_LAG_DIVISOR = 4


class _Dropped(Exception):
    """The pool of a background refresh was dropped while it ran: the rest is skipped."""


class RefreshJob:
    """A similarity refresh over the first ``upto`` steps, on a daemon thread
    (:class:`BackgroundCall`), for pools whose adds must not wait for one
    (``OSUPool.background_refresh``).

    The thread computes the refresh as the add at ``upto`` would have in place, into
    a second pool (the *shadow*): the k-NN graph (hnswlib releases the interpreter
    lock), the communities (in a child process,
    :func:`~osumem.osu.community_process.communities_in_child`: leidenalg holds the
    lock), the annotation groups as they stood at ``upto``, the full re-derivation.
    Then it replays on the shadow every add the pool takes meanwhile (:meth:`record`),
    with the same views. The pool itself goes on without the refresh (its similarity
    groups as they were) until the first add at ``apply_at`` steps or at the next
    refresh's due point (see :data:`REFRESH_LAG_MIN`), or :meth:`OSUPool.finish_refresh
    <osumem.osu.pool.OSUPool.finish_refresh>`: then it takes the shadow's state,
    which is the state an in-place refresh at ``upto`` followed by the same adds
    gives. A fixed step count, so the pool does not depend on how fast the thread
    ran (a deferring pool goes past it while the refresh is computed and takes it
    once it is built: see :data:`DEFER_MIN_STEPS`). The job takes the HNSW index the pool held (a snapshot taken meanwhile
    records the scope steps it covered, as for a dropped index, and the adds since
    ``upto``, so a restored pool computes the same refresh again)."""

    def __init__(
        self, pool: OSUPool, view: MemoryView, adds: Sequence[MemoryView | int] = ()
    ) -> None:
        """``adds``: the views of the adds the pool took since ``view``, or their step
        counts (a restored pool's: prefixes of the pool's own view, made when the
        thread replays each, so a restore of many pending adds makes no views)."""
        state = pool.similarity
        self.upto = view.n
        #: the step count from which an add applies the refresh (waiting for it if it
        #: is not ready): a fixed point, so the pool is the same whatever the timing
        self.apply_at = view.n + max(REFRESH_LAG_MIN, (view.n - state.upto) // REFRESH_LAG_DIVISOR)
        held = _take_held(state)
        state.knn, state.knn_pending = None, state.knn_size
        self._inbox = _Inbox(adds, pool.view_)
        slots, n_slots = pool.slots, pool.slots.n_slots
        cfg, seed, pool_type = pool.config, pool.seed, type(pool)
        inbox, alive = self._inbox, weakref.ref(self)  # the thread holds no job: see _Inbox

        def work() -> OSUPool | None:
            from osumem.osu.community_process import communities_in_child

            def detect(*args: Any, **kwargs: Any) -> list[IntArray]:
                if alive() is None:
                    raise _Dropped  # the pool was dropped: nobody will take the refresh
                return communities_in_child(*args, **kwargs)

            try:
                groups, kept = _similarity(view, cfg, seed, held, detect)
            except _Dropped:
                return None
            if alive() is None:
                return None
            shadow = pool_type(cfg, seed)
            shadow.background_refresh = True  # a refresh due in a replayed add: its own job
            shadow.view_ = view
            shadow.slots = _annotation_table(cfg, view.dim, slots, n_slots, view.n)
            shadow.similarity.upto = view.n
            _keep(shadow.similarity, kept)
            rebuild(shadow, view, groups)
            return inbox.replay(shadow, alive)

        self._call = BackgroundCall(work, "osumem-similarity-refresh")

    @property
    def ready(self) -> bool:
        """Whether the refreshed state is built: the thread replays the adds taken
        since ``upto`` on it, or has ended."""
        return self._inbox.replaying or not self._call.running

    @property
    def caught_up(self) -> bool:
        """Whether the refreshed state is built and has taken every add recorded so far
        but the last (applying it then waits for one replayed add at most)."""
        inbox = self._inbox
        return (inbox.replaying and inbox.done + 1 >= len(inbox.adds)) or not self._call.running

    @property
    def add_counts(self) -> list[int]:
        """The step counts of the pool's adds since ``upto``, in order (replayed on
        the shadow)."""
        return [a if isinstance(a, int) else a.n for a in self._inbox.adds]

    def record(self, view: MemoryView) -> None:
        """The pool took an add (up to ``view``): replay it on the shadow."""
        with self._inbox.wake:
            self._inbox.adds.append(view)
            self._inbox.wake.notify()

    def finish(self) -> OSUPool:
        """Wait until the shadow has taken every recorded add; the shadow (or raise
        what the refresh raised)."""
        with self._inbox.wake:
            self._inbox.stop = True
            self._inbox.wake.notify()
        shadow = self._call.result()
        assert shadow is not None  # only a job nobody holds gives up
        return shadow


class _Inbox:
    """The adds a :class:`RefreshJob`'s thread replays, shared with the job. The
    thread holds the job only weakly: a pool dropped during its refresh (a memory
    that forgot the namespace's retriever) drops the job, and the thread, waiting for
    more adds, sees that within a second and ends, freeing the shadow. A refresh whose
    job is gone before its community detection, or before its re-derivation, skips
    them."""

    def __init__(self, adds: Sequence[MemoryView | int], base: MemoryView | None) -> None:
        #: each add's view, or its step count: the prefix of ``base`` made at replay
        self.adds: list[MemoryView | int] = list(adds)
        self.base = base
        self.wake = threading.Condition()
        self.stop = False
        #: set by the thread once the shadow is built and it replays the adds
        self.replaying = False
        #: how many of ``adds`` the shadow has taken
        self.done = 0

    def replay(self, shadow: OSUPool, alive: weakref.ref[RefreshJob]) -> OSUPool | None:
        """Replay the recorded adds on ``shadow`` as they come, until told to stop and
        caught up; ``None`` once the job is gone."""
        self.replaying = True
        while True:
            with self.wake:
                while self.done == len(self.adds) and not self.stop:
                    if alive() is None:
                        return None
                    self.wake.wait(1.0)
                if self.done == len(self.adds):
                    return shadow
                nxt = self.adds[self.done]
            if isinstance(nxt, int):
                assert self.base is not None  # step counts come with the pool's view
                nxt = grown_prefix(self.base, nxt)
            add(shadow, nxt)
            self.done += 1  # only this thread writes it


def _annotation_table(
    cfg: OSUConfig, dim: int, slots: SlotTable, n_slots: int, upto: int
) -> SlotTable:
    """A new table holding the annotation groups of ``slots`` (its first ``n_slots``)
    as they stood at ``upto`` steps: the slots opened before ``upto``, in slot order,
    with their members before it, and the last open slot of each key. Read while the
    pool's adds go on: they only append members (at ``upto`` or later) and slots."""
    codes = slots.view_code.a[:n_slots].copy()
    first = slots.first.a[:n_slots].copy()
    kept = np.flatnonzero((codes != SIMILARITY_CODE) & (first < upto)).tolist()
    table = SlotTable(cfg, dim)
    names = [VIEWS[int(codes[g])] for g in kept]
    keys = [slots.keys[g] for g in kept]
    members = []
    for g in kept:
        m = slots.members[g]  # a tuple: later adds replace it, never change it
        members.append(m[: bisect.bisect_left(m, upto)])
    table.new_slots(names, keys, members)
    table.last = {(name, key): i for i, (name, key) in enumerate(zip(names, keys, strict=True))}
    return table


def grown_prefix(view: MemoryView, t: int) -> MemoryView:
    """Steps ``0 .. t-1`` of ``view`` as the agent memory hands a grown view to its
    pool: array slices, and the other columns as :class:`~osumem.types.ListPrefix`es,
    not copies (what a restored pool's :class:`RefreshJob` replays)."""
    if t == view.n:
        return view
    columns: dict[str, Any] = {}
    for c in view.column_names():
        col = getattr(view, c)
        columns[c] = col[:t] if isinstance(col, np.ndarray) else ListPrefix(col, t)
    return MemoryView(**columns)


def finish_refresh(pool: OSUPool) -> bool:
    """Apply the pool's background refresh (waiting for it): the pool takes the
    shadow's state (see :class:`RefreshJob`). Returns whether there was one."""
    job = pool.similarity.job
    if job is None:
        return False
    try:
        shadow = job.finish()
    except Exception as exc:  # the pool is as it was without the refresh: do it here
        pool.similarity.job = None
        check_exit()  # a refresh thread at exit (a shadow's replay) stops here
        warnings.warn(
            f"osumem: the background similarity refresh failed ({type(exc).__name__}: "
            f"{exc}); refreshing in place",
            RuntimeWarning,
            stacklevel=2,
        )
        if pool.view_ is not None:
            rebuild(pool, pool.view_, refresh_similarity(pool, pool.view_))
        return True
    pool.similarity.job = None
    pool.slots = shadow.slots
    pool.similarity = shadow.similarity
    pool.view_ = shadow.view_
    pool.invalidate()
    return True


def prepare_similarity(pool: OSUPool, view: MemoryView) -> bool:
    """Start rebuilding, on a daemon thread (:class:`KnnPrebuild`), the similarity
    view's HNSW index that a built or restored pool dropped (``knn_pending``), as the
    next refresh would at its start: the same insertion run of the same scope steps,
    so the same index; the refresh then waits for it if it has not finished and
    inserts only the steps added since. Also imports the community detection the
    refresh runs. Returns whether a build was started (not when the index is held or
    being built, or when the refresh would not use one)."""
    state = pool.similarity
    cfg = pool.config
    if state.knn is not None or not state.knn_pending or "similarity" not in cfg.views:
        return False
    if state.job is not None:
        return False  # a background refresh rebuilds it
    if state.prebuild is not None and state.prebuild.size == state.knn_pending:
        return False  # already under way (checked first: every warm-up of a server asks)
    if cfg.community != "leiden" or not hnsw_available():
        return False
    scope = similarity_scope(view, cfg)
    if scope.size <= EXACT_KNN_MAX:
        return False
    rows = np.ascontiguousarray(view.embeddings[scope[: state.knn_pending]], dtype=np.float32)
    state.prebuild = KnnPrebuild(rows, view.dim, pool.seed)
    warm_community_imports()
    return True


def rebuild(
    pool: OSUPool,
    view: MemoryView,
    similarity: GroupArrays,
    annotation: tuple[list[IntArray], list[IntArray]] | None = None,
) -> None:
    """Re-derive everything, vectorised: annotation slots keep their order, the
    similarity groups get new slots after them. ``annotation``: the members (flat)
    and sizes of the annotation slots when they are the only slots, in slot order
    (a fresh build: the slots stay as they are, nothing is re-read from them)."""
    cfg = pool.config
    slots = pool.slots
    if annotation is None:
        kept = np.flatnonzero(slots.view_code.a[: slots.n_slots] != SIMILARITY_CODE).tolist()
        ann = [(VIEWS[int(slots.view_code.a[g])], slots.keys[g], slots.members[g]) for g in kept]
        remap = {g: i for i, g in enumerate(kept)}
        last = {k: remap[g] for k, g in slots.last.items()}
        slots = pool.slots = SlotTable(cfg, view.dim)
        slots.last = last
        slots.new_slots([a[0] for a in ann], [a[1] for a in ann], [a[2] for a in ann])
    else:
        # the slots are those a reset and re-creation would give (same arrays,
        # capacities and lists); a new derivation epoch as a reset would start
        slots.new_epoch()
    n_ann = slots.n_slots
    sim_keys, sim_pos, sim_bounds = similarity
    positions = list(range(view.n))
    slots.new_slots(
        "similarity",
        sim_keys,
        shared_lists(positions, sim_pos, sim_bounds),
        sim_pos[sim_bounds[:-1]],
    )
    del positions
    n, G = view.n, slots.n_slots
    slots.sim_slot.resize(n)
    slots.kept.resize(n)
    slots.row_ptr.resize(n + 1)
    if G == 0:
        return
    if annotation is None:
        ann_sizes = np.fromiter(
            (len(m) for m in slots.members[:n_ann]), dtype=np.int64, count=n_ann
        )
        ann_steps = np.fromiter(
            itertools.chain.from_iterable(slots.members[:n_ann]),
            dtype=np.int64,
            count=int(ann_sizes.sum()),
        )
    else:
        ann_steps = np.concatenate([np.empty(0, np.int64), *annotation[0]])
        ann_sizes = np.concatenate([np.empty(0, np.int64), *annotation[1]])
    sizes = np.concatenate([ann_sizes, np.diff(sim_bounds)])
    steps = np.concatenate([ann_steps, sim_pos])
    gids = np.repeat(np.arange(G, dtype=np.int64), sizes)
    # per-step rows: the annotation slots come first, so they are a prefix
    n_ann_rows = ann_steps.shape[0]
    slots.sim_slot.a[sim_pos] = gids[n_ann_rows:]
    order = np.argsort(ann_steps, kind="stable")
    slots.row_slots.resize(order.shape[0])
    slots.row_slots.v[:] = gids[:n_ann_rows][order]
    slots.row_ptr.a[1 : n + 1] = np.cumsum(np.bincount(ann_steps, minlength=n))
    # f_min, then raw coherence of the eligible groups
    eligible = sizes >= cfg.min_osu_size
    sel = eligible[gids]
    e_steps, e_gids = steps[sel], gids[sel]
    coh = np.zeros(G, dtype=np.float64)
    e_idx = np.flatnonzero(eligible)
    e_bounds = segment_bounds(sizes[e_idx])
    coh[e_idx] = segment_stats(view.embeddings, e_steps, e_bounds) / sizes[e_idx]
    slots.coh_raw.v[:] = coh
    # M_max cap: per step, keep the best memberships by (priority, coherence, canon)
    canon = slots.canonical_rank()
    rank = slots.rank.v.astype(np.int64)
    o = np.lexsort((canon[e_gids], -coh[e_gids], rank[e_gids], e_steps))
    s_sorted = e_steps[o]
    new_run = np.ones(s_sorted.shape[0], dtype=bool)
    new_run[1:] = s_sorted[1:] != s_sorted[:-1]
    within = np.arange(o.shape[0]) - np.flatnonzero(new_run)[np.cumsum(new_run) - 1]
    take = within < cfg.max_memberships
    slots.kept.a[s_sorted[take], within[take]] = e_gids[o][take]
    keep = np.zeros(e_steps.shape[0], dtype=bool)
    keep[o] = take
    _derive_slots(pool, view, e_steps[keep], e_gids[keep])


def _derive_slots(pool: OSUPool, view: MemoryView, steps: IntArray, gids: IntArray) -> None:
    """Derived state of every slot from the capped memberships ``(steps, gids)``
    (ordered by slot, each slot's steps increasing; the dense live arrays empty, as
    after a reset): f_min again, then size, cost, centroid, coherence and span of the
    live ones."""
    cfg = pool.config
    slots = pool.slots
    G = slots.n_slots
    kept_sizes = np.bincount(gids, minlength=G)
    alive = kept_sizes >= max(cfg.min_osu_size, 1)
    steps = steps[alive[gids]]
    dead = np.flatnonzero(~alive)
    slots.k_size.a[dead] = 0
    slots.k_cost.a[dead] = 0
    slots.costs_written()
    slots.k_coh.a[dead] = 0.0
    slots.k_span.a[dead] = 0
    live = np.flatnonzero(alive)
    if live.size == 0:
        return
    size = kept_sizes[live]
    bounds = segment_bounds(size)
    # the centroids are written straight into the dense live arrays; a large pool's
    # leave headroom even below HEADROOM_MIN live OSUs (the first new live OSU after a
    # build would otherwise copy the whole centroid table: 30 MB at 100k steps)
    large = view.n >= HEADROOM_MIN
    slots.live_cent.resize(live.shape[0], headroom=large)
    norms = segment_stats(view.embeddings, steps, bounds, out=slots.live_cent.a[: live.shape[0]])
    slots.k_size.a[live] = size
    slots.k_coh.a[live] = (norms / size).astype(np.float32)
    slots.k_cost.a[live] = np.add.reduceat(view.costs[steps].astype(np.int64), bounds[:-1])
    slots.k_span.a[live, 0] = steps[bounds[:-1]]
    slots.k_span.a[live, 1] = steps[bounds[1:] - 1]
    slots.live_slot.resize(live.shape[0], headroom=large)
    slots.live_slot.a[: live.shape[0]] = live
    slots.live_row.a[live] = np.arange(live.shape[0])


def _cap(pool: OSUPool, p: int) -> list[int]:
    """The slots step ``p`` keeps under M_max (eligible groups only)."""
    slots = pool.slots
    f_min = pool.config.min_osu_size
    cands = [g for g in slots.step_candidates(p) if len(slots.members[g]) >= f_min]
    m_max = pool.config.max_memberships
    if len(cands) <= m_max:
        return cands
    coh = slots.coh_raw.a
    rank = slots.rank.a
    first = slots.first.a
    cands.sort(key=lambda g: (rank[g], -coh[g], first[g], slots.keys[g]))
    return cands[:m_max]


def _update(pool: OSUPool, view: MemoryView, touched: set[int]) -> None:
    """Re-derive after an add without a similarity refresh: raw coherence of the
    touched groups, the cap of their members, the state of every group whose kept
    members changed."""
    slots = pool.slots
    H = view.embeddings
    f_min = pool.config.min_osu_size
    for g in touched:
        members = slots.members[g]
        if len(members) >= f_min:
            slots.coh_raw.a[g] = row_norms(row_sum(H, members))[0] / len(members)
    affected = sorted({p for g in touched for p in slots.members[g]})
    changed = set(touched)
    kept = slots.kept.a
    for p in affected:
        new = _cap(pool, p)
        old = [g for g in kept[p].tolist() if g >= 0]
        if sorted(new) != sorted(old):
            changed.update(old)
            changed.update(new)
            kept[p] = -1
            kept[p, : len(new)] = sorted(new)
    for g in changed:
        _derive_one(pool, view, g)


def _derive_one(pool: OSUPool, view: MemoryView, g: int) -> None:
    slots = pool.slots
    kept = slots.kept.a
    rows = np.asarray(slots.members[g], dtype=np.int64)  # a tuple indexes dimensions
    members = rows[(kept[rows] == g).any(axis=1)].tolist() if rows.size else []
    k = len(members)
    if k < max(pool.config.min_osu_size, 1):
        slots.k_size.a[g] = 0
        slots.set_cost(g, 0)
        slots.k_coh.a[g] = 0.0
        slots.k_span.a[g] = 0
        slots.set_live(g, None)
        return
    sums = row_sum(view.embeddings, members)
    norm = row_norms(sums)
    slots.k_size.a[g] = k
    centroid = (sums[0] / (norm[0] if norm[0] > 0 else 1.0)).astype(np.float32)
    slots.k_coh.a[g] = np.float32(norm[0] / k)
    slots.set_cost(g, int(view.costs[members].sum()))
    slots.k_span.a[g] = (members[0], members[-1])
    slots.set_live(g, centroid)
