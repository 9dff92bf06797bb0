"""The OSU pool shared by the retrievers and the analysis.

Construction keeps *raw groups* per view (keyed grouping, Δ_view splitting, S_max
chunks) and derives the pool from them: prune groups under f_min, cap every step at
M_max memberships by view priority (ties: higher centroid coherence, then canonical
order), re-apply f_min.

Every raw group has a *slot*: an id that does not change while steps are added. Derived
state is kept per slot (kept members, cost, centroid, coherence, span) and per step
(the slots it keeps, row-ordered), so :meth:`OSUPool.add` touches only the groups the
new steps join, re-checks the cap only for the members of those groups, and recomputes
the derived state only of the groups whose kept members changed. The similarity view is
recomputed in batches (geometric refreshes); a refresh re-derives everything at once,
vectorised. The public attributes (``members``, ``centroids`` ...) list the live OSUs in
canonical order (view priority, first member, key) and are assembled on first read.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import itertools
import json
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from osumem.errors import DimensionError, InvalidInputError
from osumem.osu.config import VIEWS, OSUConfig
from osumem.osu.views import (
    EXACT_KNN_MAX,
    GroupArrays,
    KnnIndex,
    RawGroup,
    annotation_group_arrays,
    communities,
    community_group_arrays,
    hnsw_available,
    similarity_group_arrays,
    similarity_scope,
    step_keys,
)
from osumem.types import IntArray, MemoryView, segment_bounds

ANNOTATION_VIEWS: tuple[str, ...] = ("entity", "tool", "subgoal")

#: Process-wide counter of full derivations (so an epoch is never reused).
_EPOCHS = itertools.count()
SIMILARITY_CODE = VIEWS.index("similarity")

#: No groups, as :data:`~osumem.osu.views.GroupArrays`.
_NO_GROUPS: GroupArrays = ([], np.empty(0, dtype=np.int64), np.zeros(1, dtype=np.int64))

#: Version of :meth:`OSUPool.state`'s layout.
POOL_STATE_FORMAT = 1

#: Groups summed at a time by :func:`member_stats` (bounds its float64 scratch).
STATS_CHUNK = 256


def member_stats(
    members: sp.spmatrix,
    embeddings: NDArray[np.float32],
    groups: IntArray,
    out: NDArray[np.float32] | None = None,
) -> NDArray[np.float64]:
    """The norms of the float64 member sums of the columns ``groups`` of ``members``;
    with ``out`` (``(len(groups), d)``), also the normalised sums (centroids, float32)
    written into it.

    Each group's members are added one after another in increasing position order
    (the order :func:`_row_sum` uses, so batch and incremental state agree bit for
    bit), :data:`STATS_CHUNK` groups at a time over just the rows they use, so the
    float64 scratch stays small whatever the memory size, and no centroid is held
    that the caller does not keep.
    """
    mt = sp.csr_matrix(members.T)[groups]
    mt.sort_indices()
    norms = np.empty(groups.shape[0], dtype=np.float64)
    for lo in range(0, groups.shape[0], STATS_CHUNK):
        sub = mt[lo : lo + STATS_CHUNK]
        rows, local = np.unique(sub.indices, return_inverse=True)
        sub = sp.csr_matrix(
            (sub.data, local.reshape(-1), sub.indptr), shape=(sub.shape[0], rows.shape[0])
        )
        sums = np.asarray(sub @ embeddings[rows].astype(np.float64))
        nrm = row_norms(sums)
        norms[lo : lo + sub.shape[0]] = nrm
        if out is not None:
            out[lo : lo + sub.shape[0]] = sums / np.where(nrm > 0, nrm, 1.0)[:, None]
    return norms


def segment_stats(
    embeddings: NDArray[np.float32],
    steps: IntArray,
    bounds: IntArray,
    out: NDArray[np.float32] | None = None,
) -> NDArray[np.float64]:
    """:func:`member_stats` of groups given as consecutive segments of ``steps``
    (group ``i``: ``steps[bounds[i]:bounds[i + 1]]``, increasing, at least one member),
    without a sparse matrix: the same float64 sums (zero plus each member in
    increasing position order, so the same bits), :data:`STATS_CHUNK` groups at a
    time. Within a chunk the groups are visited largest first, so the groups that
    still have a ``k``-th member are a prefix: the chunk's member rows are gathered
    once, ordered by member rank, then added with one vectorised add per rank."""
    n_groups = bounds.shape[0] - 1
    norms = np.empty(n_groups, dtype=np.float64)
    sizes = np.diff(bounds)
    for lo in range(0, n_groups, STATS_CHUNK):
        hi = min(n_groups, lo + STATS_CHUNK)
        size = sizes[lo:hi]
        by_size = np.argsort(-size, kind="stable")
        start = bounds[lo:hi][by_size]
        # active[k]: groups with a k-th member (a prefix of the size-sorted groups)
        active = np.searchsorted(-size[by_size], -np.arange(int(size.max())), side="left")
        offset = segment_bounds(active)
        rank = np.repeat(np.arange(active.shape[0]), active)
        group = np.arange(rank.shape[0]) - offset[rank]
        rows = embeddings[steps[start[group] + rank]]
        sums = np.zeros((hi - lo, embeddings.shape[1]), dtype=np.float64)
        for a, b in itertools.pairwise(offset.tolist()):
            sums[: b - a] += rows[a:b]
        del rows
        nrm = row_norms(sums)
        norms[lo + by_size] = nrm
        if out is not None:
            out[lo + by_size] = sums / np.where(nrm > 0, nrm, 1.0)[:, None]
    return norms


def row_norms(sums: NDArray[np.float64]) -> NDArray[np.float64]:
    """L2 norm of every row (one code path for batch and incremental sums)."""
    return np.sqrt(np.add.reduce(sums * sums, axis=1))


def _row_sum(embeddings: NDArray[np.float32], rows: list[int]) -> NDArray[np.float64]:
    """``(1, d)`` float64 sum of ``rows`` added one after another."""
    acc = np.zeros((1, embeddings.shape[1]), dtype=np.float64)
    for r in rows:
        acc[0] += embeddings[r]
    return acc


#: Members converted to Python ints at a time by :func:`_shared` (bounds the transient
#: list of a large memory).
_LIST_CHUNK = 1 << 16


def _shared(positions: list[int], members: IntArray, bounds: IntArray) -> list[list[int]]:
    """The groups ``members[bounds[i]:bounds[i + 1]]`` as lists holding the int objects
    of ``positions`` (one object per step however many groups it joins: a fresh Python
    int per membership would cost about as much as the rest of the pool's per-group
    state)."""
    chunks = (
        members[i : i + _LIST_CHUNK].tolist() for i in range(0, members.shape[0], _LIST_CHUNK)
    )
    every = map(positions.__getitem__, itertools.chain.from_iterable(chunks))
    return [list(itertools.islice(every, k)) for k in np.diff(bounds).tolist()]


_LIBC: Any = None


def release_free_memory() -> None:
    """Hand the heap memory freed so far back to the operating system (glibc's
    ``malloc_trim``; nothing elsewhere). Large constructions free many mid-sized
    temporaries that glibc would otherwise keep mapped."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


class _Grow:
    """A numpy array that grows along axis 0 by doubling (amortised O(1) appends).

    The spare capacity past the logical length is left unwritten (``np.empty``), so a
    large buffer's untouched tail costs address space, not resident memory; entries
    get ``fill`` when the logical length first covers them."""

    def __init__(self, tail: tuple[int, ...], dtype: Any, fill: Any = 0) -> None:
        self.fill = fill
        self.a = np.empty((16, *tail), dtype=dtype)
        self.n = 0

    def resize(self, n: int) -> None:
        """Make the logical length ``n``; new entries hold ``fill``."""
        if n > self.a.shape[0]:
            bigger = np.empty((max(n, 2 * self.a.shape[0]), *self.a.shape[1:]), self.a.dtype)
            bigger[: self.n] = self.a[: self.n]
            self.a = bigger
        if n == self.n + 1:
            self.a[self.n] = self.fill
        elif n > self.n:
            self.a[self.n : n] = self.fill
        self.n = n

    def reserve(self, n: int) -> None:
        """Grow the capacity to at least ``n`` the way one-at-a-time appends would
        (doubling), keeping the logical length and leaving the tail unwritten."""
        cap = self.a.shape[0]
        if n <= cap:
            return
        while cap < n:
            cap *= 2
        bigger = np.empty((cap, *self.a.shape[1:]), self.a.dtype)
        bigger[: self.n] = self.a[: self.n]
        self.a = bigger

    @property
    def v(self) -> NDArray[Any]:
        return self.a[: self.n]


class OSUPool:
    """A pool of OSUs over ``n_steps`` steps.

    Attributes (``m`` live OSUs, in canonical order: view priority, first member, key):
        members: ``(n_steps, m)`` CSC 0/1 step × OSU membership matrix.
        view_codes: ``(m,)`` index into :data:`~osumem.osu.config.VIEWS` of each OSU.
        keys: ``(m,)`` the OSU's key (entity string, tool signature, subgoal label,
            or ``communityN``).
        centroids: ``(m, d)`` float32 normalised mean member embedding.
        costs: ``(m,)`` int64 total token cost of the members.
        spans: ``(m, 2)`` first and last member position.
        sizes: ``(m,)`` member counts.
        coherence: ``(m,)`` mean cosine of the members to the centroid.

    Slot-level state (for retrievers that must not rebuild anything per add):
        :attr:`n_slots`, :meth:`slot_arrays`, :meth:`slot_members`,
        :meth:`canonical_key`.
    """

    def __init__(self, config: OSUConfig, seed: int = 0) -> None:
        self.config = config
        self.seed = int(seed)
        self.view_: MemoryView | None = None
        self._similarity_upto = 0
        self._knn: KnnIndex | None = None
        # a restored pool rebuilds its HNSW index of the first ``_knn_pending`` scope
        # steps at the next refresh (one insertion run gives the same graph as the
        # batches that built it: insertion is single-threaded and in label order)
        self._knn_pending = 0
        self._partition: IntArray | None = None
        self._reset_slots(0)
        self._public: dict[str, Any] | None = None

    # -- slot state ------------------------------------------------------------------

    def _reset_slots(self, d: int) -> None:
        m_max = self.config.max_memberships
        self._g_view = _Grow((), np.int8)
        self._g_rank = _Grow((), np.int8)
        self._g_first = _Grow((), np.int64)
        self._g_key: list[str] = []
        self._g_members: list[list[int]] = []
        self._last: dict[tuple[str, str], int] = {}
        self._coh_raw = _Grow((), np.float64)
        self._k_size = _Grow((), np.int64)
        self._k_cost = _Grow((), np.int64)
        self._k_coh = _Grow((), np.float32)
        self._k_span = _Grow((2,), np.int64)
        self._row_ptr = _Grow((), np.int64)
        self._row_ptr.resize(1)
        self._row_slots = _Grow((), np.int64)
        self._sim_slot = _Grow((), np.int64, fill=-1)
        self._kept = _Grow((m_max,), np.int64, fill=-1)
        # slots whose centroid or liveness changed since the last full derivation
        # (``epoch`` counts full derivations), for indexes kept over the centroids
        self.epoch = next(_EPOCHS)
        self._change_log: list[int] = []
        # the live OSUs packed densely (swap-remove), for scans that skip dead slots
        self._live_row = _Grow((), np.int64, fill=-1)
        self._live_slot = _Grow((), np.int64)
        self._live_cent = _Grow((d,), np.float32)

    def _new_slot(self, view: str, key: str, members: list[int]) -> int:
        g = len(self._g_key)
        for arr in (self._g_view, self._g_rank, self._g_first, self._coh_raw, self._k_size):
            arr.resize(g + 1)
        for arr2 in (self._k_cost, self._k_coh, self._k_span, self._live_row):
            arr2.resize(g + 1)
        self._g_view.a[g] = VIEWS.index(view)
        self._g_rank.a[g] = self.config.view_priority.index(view)
        self._g_first.a[g] = members[0]
        self._g_key.append(key)
        self._g_members.append(members)
        return g

    def _new_slots(
        self,
        views: list[str] | str,
        keys: list[str],
        members: list[list[int]],
        firsts: IntArray | None = None,
    ) -> int:
        """Append raw groups as slots in one go: the state :meth:`_new_slot` called for
        each in order leaves, array capacities and list allocations included, with
        every array grown once; returns the first new slot. ``views``: each group's
        view, or one view for all; ``firsts``: each group's first member, when the
        caller has them as an array."""
        g, m = len(self._g_key), len(keys)
        for arr in (self._g_view, self._g_rank, self._g_first, self._coh_raw, self._k_size):
            arr.reserve(g + m)
            arr.resize(g + m)
        for arr in (self._k_cost, self._k_coh, self._k_span, self._live_row):
            arr.reserve(g + m)
            arr.resize(g + m)
        if m:
            if isinstance(views, str):
                self._g_view.a[g : g + m] = VIEWS.index(views)
                self._g_rank.a[g : g + m] = self.config.view_priority.index(views)
            else:
                code = {v: VIEWS.index(v) for v in set(views)}
                rank = {v: self.config.view_priority.index(v) for v in code}
                self._g_view.a[g : g + m] = [code[v] for v in views]
                self._g_rank.a[g : g + m] = [rank[v] for v in views]
            self._g_first.a[g : g + m] = [mm[0] for mm in members] if firsts is None else firsts
            if len(members) != m:
                raise ValueError("OSUPool._new_slots: one member list per key")
            # appends, one at a time (the same list allocation as appending per slot)
            collections.deque(map(self._g_key.append, keys), maxlen=0)
            collections.deque(map(self._g_members.append, members), maxlen=0)
        return g

    @property
    def n_slots(self) -> int:
        """Number of raw groups (slots), live or not."""
        return len(self._g_key)

    def slot_arrays(self) -> tuple[IntArray, IntArray, IntArray]:
        """``(live_rows, costs, sizes)`` per slot (views, no copies): the slot's row in
        :meth:`live_arrays` (-1 when it is not a live OSU), its cost and size (0 when
        not live)."""
        return self._live_row.v, self._k_cost.v, self._k_size.v

    def live_arrays(self) -> tuple[IntArray, NDArray[np.float32]]:
        """``(slots, centroids)`` of the live OSUs packed densely, in no particular
        order (views, no copies): what a coarse scan reads."""
        return self._live_slot.v, self._live_cent.v

    def changes_since(self, epoch: int, position: int) -> list[int] | None:
        """Slots whose centroid or liveness changed since change-log ``position`` of
        full derivation ``epoch`` (``None`` when a full derivation happened since:
        rebuild from :meth:`live_arrays`). The current position is
        :attr:`change_log_position`."""
        if epoch != self.epoch:
            return None
        return self._change_log[position:]

    @property
    def change_log_position(self) -> int:
        """Length of the change log of the current epoch."""
        return len(self._change_log)

    def _set_live(self, g: int, centroid: NDArray[np.float32] | None) -> None:
        """Insert, refresh (``centroid`` given) or remove (``None``) slot ``g`` in the
        dense live arrays."""
        self._change_log.append(g)
        row = int(self._live_row.a[g])
        if centroid is None:
            if row < 0:
                return
            last = self._live_slot.n - 1
            moved = int(self._live_slot.a[last])
            self._live_slot.a[row] = moved
            self._live_cent.a[row] = self._live_cent.a[last]
            self._live_row.a[moved] = row
            self._live_row.a[g] = -1
            self._live_slot.resize(last)
            self._live_cent.resize(last)
            return
        if row < 0:
            row = self._live_slot.n
            self._live_slot.resize(row + 1)
            self._live_cent.resize(row + 1)
            self._live_slot.a[row] = g
            self._live_row.a[g] = row
        self._live_cent.a[row] = centroid

    def slot_members(self, slot: int) -> list[int]:
        """The positions slot ``slot`` keeps (increasing); empty when not live."""
        if self._k_size.a[slot] == 0:
            return []
        kept = self._kept.a
        return [p for p in self._g_members[slot] if (kept[p] == slot).any()]

    def kept_union(self, slots: IntArray) -> IntArray:
        """The distinct positions that any of ``slots`` keeps, increasing: the union of
        :meth:`slot_members`. A slot that keeps as many members as its raw group has
        keeps all of them (kept members are a subset), so only the other slots' members
        are checked against the per-step rows."""
        size = self._k_size.a
        raw = self._g_members
        whole: list[list[int]] = []
        partial: list[int] = []
        for s in slots.tolist():
            n_kept = int(size[s])
            if n_kept > 0:
                if n_kept == len(raw[s]):
                    whole.append(raw[s])
                else:
                    partial.append(s)
        out = set(itertools.chain.from_iterable(whole))
        if partial:
            lists = [raw[s] for s in partial]
            lens = [len(m) for m in lists]
            steps = np.fromiter(itertools.chain.from_iterable(lists), np.int64, sum(lens))
            owner = np.repeat(np.asarray(partial, dtype=np.int64), lens)
            keep = (self._kept.a[steps] == owner[:, None]).any(axis=1)
            out.update(steps[keep].tolist())
        return np.array(sorted(out), dtype=np.int64)

    def canonical_key(self, slot: int) -> tuple[int, int, str]:
        """``(view priority, first member, key)``: the canonical order of OSUs."""
        return (int(self._g_rank.a[slot]), int(self._g_first.a[slot]), self._g_key[slot])

    # -- construction ----------------------------------------------------------------

    @classmethod
    def build(
        cls, view: MemoryView, config: OSUConfig, seed: int = 0, *, similarity: bool = True
    ) -> OSUPool:
        """Build the pool over every step of ``view`` at once (batch construction);
        ``similarity=False`` leaves the similarity view for the first refresh."""
        pool = cls(config, seed)
        pool.view_ = view
        pool._reset_slots(view.dim)
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
            g0 = pool._new_slots(name, keys, _shared(positions, pos, bounds), pos[bounds[:-1]])
            pool._last.update(
                zip([(name, key) for key in keys], range(g0, g0 + len(keys)), strict=True)
            )
            if keep_arrays:
                flat.append(pos)
                sizes.append(np.diff(bounds))
            del pos, bounds
        del positions
        sim = pool._refresh_similarity(view) if similarity else _NO_GROUPS
        if pool._knn is not None:
            # a built pool does not hold the similarity view's HNSW index (0.15x the
            # raw embeddings at 100k steps): the next refresh rebuilds it from the same
            # scope steps in one insertion run, which gives the same graph
            pool._knn_pending = pool._knn.size
            pool._knn = None
        pool._rebuild(view, sim, annotation=(flat, sizes) if keep_arrays else None)
        if view.n > EXACT_KNN_MAX:
            release_free_memory()
        return pool

    def add(self, view: MemoryView) -> OSUPool:
        """Extend the pool to ``view``, which must extend the current view by new steps
        at the end. New steps join their key's open group when within Δ_view of its
        last member and under S_max, else open a new group; only the touched groups
        and their members are re-derived. The similarity view is recomputed once
        ``max(similarity_refresh, similarity_refresh_ratio × covered)`` steps have
        arrived since its last refresh. Returns ``self``."""
        old = self.view_
        start = 0 if old is None else old.n
        if view.n < start:
            raise InvalidInputError(
                f"OSUPool.add: the new view has {view.n} steps, fewer than the {start} built"
            )
        if old is not None and old.n and view.dim != old.dim:
            raise DimensionError(
                f"OSUPool.add: embeddings of dimension {view.dim}, the pool has {old.dim}"
            )
        if old is None or old.n == 0:
            # the first add refreshes the similarity view on the same schedule as
            # every later one: once similarity_refresh steps have arrived
            first_due = view.n >= self.config.similarity_refresh
            fresh = OSUPool.build(view, self.config, self.seed, similarity=first_due)
            self.__dict__.update(fresh.__dict__)
            return self
        if view.n == start:
            self.view_ = view
            return self
        cfg = self.config
        touched: set[int] = set()
        rows: dict[int, list[int]] = {p: [] for p in range(start, view.n)}
        for name in ANNOTATION_VIEWS:
            if name not in cfg.views:
                continue
            delta = cfg.split_threshold(name)
            for p, key in step_keys(view, name, start):
                g = self._last.get((name, key))
                if g is not None:
                    members = self._g_members[g]
                    if p - members[-1] <= delta and len(members) < cfg.max_osu_size:
                        members.append(p)
                        touched.add(g)
                        rows[p].append(g)
                        continue
                g = self._new_slot(name, key, [p])
                self._last[(name, key)] = g
                touched.add(g)
                rows[p].append(g)
        self.view_ = view
        self._public = None
        self._append_rows(view.n, rows)
        due = max(cfg.similarity_refresh, cfg.similarity_refresh_ratio * self._similarity_upto)
        if view.n - self._similarity_upto >= due:
            sim = self._refresh_similarity(view)
            self._rebuild(view, sim)
        else:
            self._update(view, touched)
        return self

    def _append_rows(self, n: int, rows: dict[int, list[int]]) -> None:
        start = self._row_ptr.n - 1
        flat = [g for p in range(start, n) for g in rows.get(p, [])]
        counts = np.array([len(rows.get(p, [])) for p in range(start, n)], dtype=np.int64)
        base = int(self._row_ptr.a[start])
        self._row_ptr.resize(n + 1)
        self._row_ptr.a[start + 1 : n + 1] = base + np.cumsum(counts)
        m = self._row_slots.n
        self._row_slots.resize(m + len(flat))
        self._row_slots.a[m : m + len(flat)] = flat
        self._sim_slot.resize(n)
        self._kept.resize(n)

    def _refresh_similarity(self, view: MemoryView) -> GroupArrays:
        """The similarity view's raw groups over ``view``.

        Up to :data:`~osumem.osu.views.EXACT_KNN_MAX` steps in scope: the exact k-NN
        graph and a cold Leiden run (the paper's construction). Above: the new steps
        are inserted into an HNSW index kept between refreshes, and Leiden starts from
        the previous partition (new steps as singletons), so a refresh costs about
        n log n instead of n².
        """
        self._similarity_upto = view.n
        cfg = self.config
        if "similarity" not in cfg.views:
            return _NO_GROUPS
        scope = similarity_scope(view, cfg)
        if scope.size <= EXACT_KNN_MAX or cfg.community != "leiden" or not hnsw_available():
            self._knn = None
            self._knn_pending = 0
            self._partition = None
            return similarity_group_arrays(view, cfg, self.seed)
        if self._knn is None:
            self._knn = KnnIndex(view.dim, seed=self.seed)
            if self._knn_pending:
                self._knn.add(view.embeddings[scope[: self._knn_pending]])
                self._knn_pending = 0
        known = self._knn.size
        self._knn.add(view.embeddings[scope[known:]])
        src, dst = self._knn.edges(cfg.knn_k, lambda lo, hi: view.embeddings[scope[lo:hi]])
        initial = None
        if self._partition is not None:
            fresh = np.arange(scope.size - known, dtype=np.int64) + int(self._partition.max()) + 1
            initial = np.concatenate([self._partition, fresh])
        comms = communities(scope.size, src, dst, cfg.community, self.seed, initial=initial)
        partition = np.empty(scope.size, dtype=np.int64)
        for c, members in enumerate(comms):
            partition[members] = c
        self._partition = partition
        return community_group_arrays(scope, comms, cfg)

    # -- snapshot (persisted state, so a reopened memory need not replay every add) ----

    def state(self) -> dict[str, NDArray[Any]]:
        """Everything this pool derived incrementally, as plain arrays (for
        :meth:`from_state`): raw groups, slot and per-step state, the similarity
        partition and the size of its HNSW index. Not included: the view (the caller
        has it) and the centroids (recomputed exactly from the kept members)."""
        view = self.view_
        n = 0 if view is None else view.n
        knn = self._knn.size if self._knn is not None else self._knn_pending
        part = self._partition
        sizes = np.fromiter((len(m) for m in self._g_members), np.int64, self.n_slots)
        return {
            "meta": np.array(
                [
                    POOL_STATE_FORMAT,
                    n,
                    self.n_slots,
                    self._similarity_upto,
                    knn,
                    -1 if part is None else part.shape[0],
                ],
                dtype=np.int64,
            ),
            "g_view": self._g_view.v.copy(),
            "g_keys": np.frombuffer(json.dumps(self._g_key).encode(), dtype=np.uint8),
            "g_sizes": sizes,
            "g_members": np.fromiter(
                (p for m in self._g_members for p in m), np.int64, int(sizes.sum())
            ),
            "last": np.fromiter(self._last.values(), np.int64, len(self._last)),
            "coh_raw": self._coh_raw.v.copy(),
            "k_size": self._k_size.v.copy(),
            "k_cost": self._k_cost.v.copy(),
            "k_coh": self._k_coh.v.copy(),
            "k_span": self._k_span.v.copy(),
            "row_ptr": self._row_ptr.v.copy(),
            "row_slots": self._row_slots.v.copy(),
            "sim_slot": self._sim_slot.v.copy(),
            "kept": self._kept.v.copy(),
            "live_slot": self._live_slot.v.copy(),
            "partition": np.zeros(0, np.int64) if part is None else part.copy(),
        }

    @classmethod
    def from_state(
        cls, view: MemoryView, config: OSUConfig, seed: int, state: dict[str, NDArray[Any]]
    ) -> OSUPool:
        """The pool :meth:`state` described, over ``view`` (the steps it covered).

        The arrays are checked for consistency first; anything that does not fit
        (another format, sizes, out-of-range slot or step numbers) raises
        ``ValueError`` so the caller can rebuild instead.
        """
        meta = np.asarray(state["meta"], dtype=np.int64)
        if meta.shape != (6,) or int(meta[0]) != POOL_STATE_FORMAT:
            raise ValueError("pool state: unknown format")
        n, G, sim_upto, knn, n_part = (int(x) for x in meta[1:])
        if n != view.n or not 0 <= sim_upto <= n or knn < 0:
            raise ValueError(f"pool state: covers {n} steps, the view has {view.n}")
        m_max = config.max_memberships

        def arr(name: str, shape: tuple[int, ...], lo: int, hi: int) -> NDArray[Any]:
            a = np.asarray(state[name])
            if a.shape != shape:
                raise ValueError(f"pool state: {name} has shape {a.shape}, expected {shape}")
            if a.size and a.dtype.kind in "iu" and (a.min() < lo or a.max() >= hi):
                raise ValueError(f"pool state: {name} out of range")
            return a

        keys = json.loads(bytes(np.asarray(state["g_keys"], dtype=np.uint8)).decode())
        if (
            not isinstance(keys, list)
            or len(keys) != G
            or not all(isinstance(k, str) for k in keys)
        ):
            raise ValueError("pool state: keys do not match the slots")
        sizes = arr("g_sizes", (G,), 1, n + 1)
        flat = arr("g_members", (int(sizes.sum()),), 0, n)
        g_view = arr("g_view", (G,), 0, len(VIEWS))
        row_ptr = arr("row_ptr", (n + 1,), 0, 2**62)
        n_rows = int(row_ptr[-1])
        if np.any(np.diff(row_ptr) < 0) or int(row_ptr[0]) != 0:
            raise ValueError("pool state: row pointers are not increasing")
        live_slot = arr("live_slot", (int(state["live_slot"].shape[0]),), 0, G)
        if np.unique(live_slot).shape[0] != live_slot.shape[0]:
            raise ValueError("pool state: a live slot is listed twice")
        pool = cls(config, seed)
        pool.view_ = view
        pool._reset_slots(view.dim)
        names = [VIEWS[int(v)] for v in np.unique(g_view).tolist()]
        missing = [v for v in names if v not in config.view_priority]
        if missing:
            raise ValueError(f"pool state: views {missing} are not configured")
        lut = np.array(
            [config.view_priority.index(v) if v in config.view_priority else 0 for v in VIEWS],
            dtype=np.int8,
        )
        bounds = segment_bounds(sizes)
        every = flat.tolist()
        pool._g_key = list(keys)
        cuts = bounds.tolist()
        pool._g_members = [every[a:b] for a, b in itertools.pairwise(cuts)]
        for grow in (pool._g_view, pool._g_rank, pool._g_first, pool._live_row):
            grow.resize(G)
        pool._g_view.a[:G] = g_view
        pool._g_rank.a[:G] = lut[g_view.astype(np.int64)]
        pool._g_first.a[:G] = flat[bounds[:-1]]
        last = arr("last", (int(state["last"].shape[0]),), 0, G)
        pool._last = {(VIEWS[int(g_view[g])], keys[g]): int(g) for g in last.tolist()}
        pool._similarity_upto = sim_upto
        pool._knn_pending = knn
        pool._partition = None if n_part < 0 else arr("partition", (n_part,), 0, 2**62)
        for grow, name, shape, lo, hi in (
            (pool._coh_raw, "coh_raw", (G,), 0, 1),
            (pool._k_size, "k_size", (G,), 0, n + 1),
            (pool._k_cost, "k_cost", (G,), 0, 2**62),
            (pool._k_coh, "k_coh", (G,), 0, 1),
            (pool._k_span, "k_span", (G, 2), 0, max(n, 1)),
            (pool._row_ptr, "row_ptr", (n + 1,), 0, 2**62),
            (pool._row_slots, "row_slots", (n_rows,), 0, G),
            (pool._sim_slot, "sim_slot", (n,), -1, G),
            (pool._kept, "kept", (n, m_max), -1, G),
        ):
            a = arr(name, shape, lo, hi)
            grow.resize(shape[0])
            grow.a[: shape[0]] = a
        live = live_slot.astype(np.int64)
        pool._live_slot.resize(live.shape[0])
        pool._live_slot.a[: live.shape[0]] = live
        pool._live_row.a[live] = np.arange(live.shape[0])
        pool._live_cent.resize(live.shape[0])
        if live.size:
            kept = pool._kept.v
            step_idx, col = np.nonzero(kept >= 0)
            mat = sp.csc_matrix(
                (np.ones(step_idx.shape[0], dtype=np.float32), (step_idx, kept[step_idx, col])),
                shape=(n, G),
            )
            member_stats(mat, view.embeddings, live, out=pool._live_cent.a[: live.shape[0]])
        return pool

    # -- derivation ------------------------------------------------------------------

    def _rebuild(
        self,
        view: MemoryView,
        similarity: GroupArrays,
        annotation: tuple[list[IntArray], list[IntArray]] | None = None,
    ) -> None:
        """Re-derive everything, vectorised: annotation slots keep their order, the
        similarity groups get new slots after them. ``annotation``: the members (flat)
        and sizes of the annotation slots when they are the only slots, in slot order
        (a fresh build: the slots stay as they are, nothing is re-read from them)."""
        cfg = self.config
        if annotation is None:
            kept = np.flatnonzero(self._g_view.a[: self.n_slots] != SIMILARITY_CODE).tolist()
            ann = [
                (VIEWS[int(self._g_view.a[g])], self._g_key[g], self._g_members[g]) for g in kept
            ]
            remap = {g: i for i, g in enumerate(kept)}
            last = {k: remap[g] for k, g in self._last.items()}
            self._reset_slots(view.dim)
            self._last = last
            self._new_slots([a[0] for a in ann], [a[1] for a in ann], [a[2] for a in ann])
        else:
            # the slots are those a reset and re-creation would give (same arrays,
            # capacities and lists); a new derivation epoch as a reset would start
            self.epoch = next(_EPOCHS)
        n_ann = self.n_slots
        sim_keys, sim_pos, sim_bounds = similarity
        positions = list(range(view.n))
        self._new_slots(
            "similarity",
            sim_keys,
            _shared(positions, sim_pos, sim_bounds),
            sim_pos[sim_bounds[:-1]],
        )
        del positions
        n, G = view.n, self.n_slots
        self._sim_slot.resize(n)
        self._kept.resize(n)
        self._row_ptr.resize(n + 1)
        if G == 0:
            return
        if annotation is None:
            ann_sizes = np.fromiter(
                (len(m) for m in self._g_members[:n_ann]), dtype=np.int64, count=n_ann
            )
            ann_steps = np.fromiter(
                itertools.chain.from_iterable(self._g_members[:n_ann]),
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
        self._sim_slot.a[sim_pos] = gids[n_ann_rows:]
        order = np.argsort(ann_steps, kind="stable")
        self._row_slots.resize(order.shape[0])
        self._row_slots.v[:] = gids[:n_ann_rows][order]
        self._row_ptr.a[1 : n + 1] = np.cumsum(np.bincount(ann_steps, minlength=n))
        # f_min, then raw coherence of the eligible groups
        eligible = sizes >= cfg.min_osu_size
        sel = eligible[gids]
        e_steps, e_gids = steps[sel], gids[sel]
        coh = np.zeros(G, dtype=np.float64)
        e_idx = np.flatnonzero(eligible)
        e_bounds = segment_bounds(sizes[e_idx])
        coh[e_idx] = segment_stats(view.embeddings, e_steps, e_bounds) / sizes[e_idx]
        self._coh_raw.v[:] = coh
        # M_max cap: per step, keep the best memberships by (priority, coherence, canon)
        canon = self._canonical_rank()
        rank = self._g_rank.v.astype(np.int64)
        o = np.lexsort((canon[e_gids], -coh[e_gids], rank[e_gids], e_steps))
        s_sorted = e_steps[o]
        new_run = np.ones(s_sorted.shape[0], dtype=bool)
        new_run[1:] = s_sorted[1:] != s_sorted[:-1]
        within = np.arange(o.shape[0]) - np.flatnonzero(new_run)[np.cumsum(new_run) - 1]
        take = within < cfg.max_memberships
        self._kept.a[s_sorted[take], within[take]] = e_gids[o][take]
        keep = np.zeros(e_steps.shape[0], dtype=bool)
        keep[o] = take
        self._derive_slots(view, e_steps[keep], e_gids[keep])

    def _canonical_rank(self) -> IntArray:
        """Rank of every slot in canonical order (view priority, first member, key)."""
        n_slots = self.n_slots
        keyrank = np.empty(n_slots, dtype=np.int64)
        keyrank[sorted(range(n_slots), key=self._g_key.__getitem__)] = np.arange(n_slots)
        order = np.lexsort((keyrank, self._g_first.v, self._g_rank.v))
        rank = np.empty(n_slots, dtype=np.int64)
        rank[order] = np.arange(n_slots)
        return rank

    def _derive_slots(self, view: MemoryView, steps: IntArray, gids: IntArray) -> None:
        """Derived state of every slot from the capped memberships ``(steps, gids)``
        (ordered by slot, each slot's steps increasing; the dense live arrays empty, as
        after a reset): f_min again, then size, cost, centroid, coherence and span of
        the live ones."""
        cfg = self.config
        G = self.n_slots
        kept_sizes = np.bincount(gids, minlength=G)
        alive = kept_sizes >= max(cfg.min_osu_size, 1)
        steps = steps[alive[gids]]
        dead = np.flatnonzero(~alive)
        self._k_size.a[dead] = 0
        self._k_cost.a[dead] = 0
        self._k_coh.a[dead] = 0.0
        self._k_span.a[dead] = 0
        live = np.flatnonzero(alive)
        if live.size == 0:
            return
        size = kept_sizes[live]
        bounds = segment_bounds(size)
        # the centroids are written straight into the dense live arrays
        self._live_cent.resize(live.shape[0])
        norms = segment_stats(
            view.embeddings, steps, bounds, out=self._live_cent.a[: live.shape[0]]
        )
        self._k_size.a[live] = size
        self._k_coh.a[live] = (norms / size).astype(np.float32)
        self._k_cost.a[live] = np.add.reduceat(view.costs[steps].astype(np.int64), bounds[:-1])
        self._k_span.a[live, 0] = steps[bounds[:-1]]
        self._k_span.a[live, 1] = steps[bounds[1:] - 1]
        self._live_slot.resize(live.shape[0])
        self._live_slot.a[: live.shape[0]] = live
        self._live_row.a[live] = np.arange(live.shape[0])

    def _step_candidates(self, p: int) -> list[int]:
        ptr = self._row_ptr.a
        out = self._row_slots.a[ptr[p] : ptr[p + 1]].tolist()
        s = int(self._sim_slot.a[p])
        if s >= 0:
            out.append(s)
        return out

    def _cap(self, p: int) -> list[int]:
        """The slots step ``p`` keeps under M_max (eligible groups only)."""
        f_min = self.config.min_osu_size
        cands = [g for g in self._step_candidates(p) if len(self._g_members[g]) >= f_min]
        m_max = self.config.max_memberships
        if len(cands) <= m_max:
            return cands
        coh = self._coh_raw.a
        rank = self._g_rank.a
        first = self._g_first.a
        cands.sort(key=lambda g: (rank[g], -coh[g], first[g], self._g_key[g]))
        return cands[:m_max]

    def _update(self, view: MemoryView, touched: set[int]) -> None:
        """Re-derive after an add without a similarity refresh: raw coherence of the
        touched groups, the cap of their members, the state of every group whose kept
        members changed."""
        H = view.embeddings
        f_min = self.config.min_osu_size
        for g in touched:
            members = self._g_members[g]
            if len(members) >= f_min:
                self._coh_raw.a[g] = row_norms(_row_sum(H, members))[0] / len(members)
        affected = sorted({p for g in touched for p in self._g_members[g]})
        changed = set(touched)
        kept = self._kept.a
        for p in affected:
            new = self._cap(p)
            old = [int(g) for g in kept[p] if g >= 0]
            if sorted(new) != sorted(old):
                changed.update(old)
                changed.update(new)
                kept[p] = -1
                kept[p, : len(new)] = sorted(new)
        for g in changed:
            self._derive_one(view, g)

    def _derive_one(self, view: MemoryView, g: int) -> None:
        kept = self._kept.a
        members = [p for p in self._g_members[g] if (kept[p] == g).any()]
        k = len(members)
        if k < max(self.config.min_osu_size, 1):
            self._k_size.a[g] = 0
            self._k_cost.a[g] = 0
            self._k_coh.a[g] = 0.0
            self._k_span.a[g] = 0
            self._set_live(g, None)
            return
        sums = _row_sum(view.embeddings, members)
        norm = row_norms(sums)
        self._k_size.a[g] = k
        centroid = (sums[0] / (norm[0] if norm[0] > 0 else 1.0)).astype(np.float32)
        self._k_coh.a[g] = np.float32(norm[0] / k)
        self._k_cost.a[g] = int(view.costs[members].sum())
        self._k_span.a[g] = (members[0], members[-1])
        self._set_live(g, centroid)

    # -- public state (canonical order, assembled on first read after an add) ---------

    def _live_order(self) -> tuple[IntArray, IntArray]:
        """Live slots in canonical order and each slot's public OSU id (-1 if none),
        cached until the next add: an integer sort on (view priority, first member),
        then the few runs that tie there ordered by key."""
        pub = self._public if self._public is not None else {}
        self._public = pub
        if "order" not in pub:
            live = np.flatnonzero(self._k_size.v > 0)
            rank, first = self._g_rank.v[live], self._g_first.v[live]
            o = np.lexsort((first, rank))
            live, rank, first = live[o], rank[o], first[o]
            tie = (np.diff(rank) == 0) & (np.diff(first) == 0)
            if tie.any():
                cuts = np.flatnonzero(~tie) + 1
                starts, ends = np.r_[0, cuts], np.r_[cuts, live.shape[0]]
                for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
                    if hi - lo > 1:
                        live[lo:hi] = sorted(live[lo:hi].tolist(), key=self._g_key.__getitem__)
            new_id = np.full(self.n_slots, -1, dtype=np.int64)
            new_id[live] = np.arange(live.shape[0])
            pub["order"] = (live, new_id)
        order: tuple[IntArray, IntArray] = pub["order"]
        return order

    def _public_attr(self, name: str) -> Any:
        """One public attribute in canonical order, assembled on first read."""
        live, new_id = self._live_order()
        pub = self._public
        assert pub is not None
        if name in pub:
            return pub[name]
        view = self.view_
        n = 0 if view is None else view.n
        d = 0 if view is None else view.dim
        if name == "members":
            kept = self._kept.v
            step_idx, col = np.nonzero(kept >= 0)
            ids = new_id[kept[step_idx, col]]
            ok = ids >= 0
            value: Any = sp.csc_matrix(
                (np.ones(int(ok.sum()), dtype=np.float32), (step_idx[ok], ids[ok])),
                shape=(n, live.shape[0]),
            )
            value.sort_indices()
        elif name == "view_codes":
            value = self._g_view.v[live].astype(np.int8)
        elif name == "keys":
            value = np.array([self._g_key[g] for g in live.tolist()], dtype=object)
        elif name == "centroids":
            value = self._live_cent.v[self._live_row.v[live]].reshape(-1, d)
        elif name == "costs":
            value = self._k_cost.v[live].astype(np.int64)
        elif name == "spans":
            value = self._k_span.v[live].reshape(-1, 2).astype(np.int64)
        elif name == "sizes":
            value = self._k_size.v[live].astype(np.int64)
        else:
            value = self._k_coh.v[live].astype(np.float32)
        pub[name] = value
        return value

    def raw_groups(self) -> list[RawGroup]:
        """The raw groups (before f_min and the cap) of the enabled views."""
        return [
            (
                VIEWS[int(self._g_view.a[g])],
                self._g_key[g],
                np.asarray(self._g_members[g], dtype=np.int64),
            )
            for g in range(self.n_slots)
        ]

    @property
    def members(self) -> sp.csc_matrix:
        """``(n_steps, m)`` CSC 0/1 step × OSU membership matrix."""
        return self._public_attr("members")

    @property
    def view_codes(self) -> NDArray[np.int8]:
        """``(m,)`` index into VIEWS of each OSU's view."""
        return self._public_attr("view_codes")

    @property
    def keys(self) -> NDArray[np.object_]:
        """``(m,)`` each OSU's key."""
        return self._public_attr("keys")

    @property
    def centroids(self) -> NDArray[np.float32]:
        """``(m, d)`` normalised mean member embeddings."""
        return self._public_attr("centroids")

    @property
    def costs(self) -> IntArray:
        """``(m,)`` total token cost of each OSU's members."""
        return self._public_attr("costs")

    @property
    def spans(self) -> IntArray:
        """``(m, 2)`` first and last member position."""
        return self._public_attr("spans")

    @property
    def sizes(self) -> IntArray:
        """``(m,)`` member counts."""
        return self._public_attr("sizes")

    @property
    def coherence(self) -> NDArray[np.float32]:
        """``(m,)`` mean cosine of the members to the centroid."""
        return self._public_attr("coherence")

    # -- accessors -------------------------------------------------------------------

    @property
    def n_osus(self) -> int:
        """Number of OSUs ``m``."""
        return int(self._live_slot.n)

    @property
    def n_steps(self) -> int:
        """Number of steps the pool covers."""
        return 0 if self.view_ is None else self.view_.n

    def view_names(self) -> NDArray[np.object_]:
        """``(m,)`` view name of each OSU."""
        return np.array(VIEWS, dtype=object)[self.view_codes]

    def memberships_per_step(self) -> IntArray:
        """``(n_steps,)`` number of OSUs each step belongs to."""
        return np.bincount(self.members.indices, minlength=self.n_steps).astype(np.int64)

    def osus_of(self, step: int) -> IntArray:
        """The OSUs step ``step`` belongs to (from the row-ordered state: no
        membership matrix is assembled)."""
        _, new_id = self._live_order()
        ids = new_id[self._kept.a[int(step)][self._kept.a[int(step)] >= 0]]
        return np.sort(ids[ids >= 0]).astype(np.int64)

    def osu_slots_of(self, step: int) -> list[int]:
        """The live slots step ``step`` belongs to, in canonical order (the order of
        :meth:`osus_of`), read from the row-ordered state without assembling the pool."""
        slots = [int(g) for g in self._kept.a[int(step)] if g >= 0 and self._k_size.a[g] > 0]
        return sorted(slots, key=self.canonical_key)

    def members_of(self, osu: int) -> IntArray:
        """Member positions of OSU ``osu``, increasing."""
        m = self.members
        return m.indices[m.indptr[osu] : m.indptr[osu + 1]].astype(np.int64)

    def signature(self, views: tuple[str, ...] = VIEWS) -> set[tuple[str, str, tuple[int, ...]]]:
        """The pool as a set of ``(view, key, members)`` for the given views (used to
        compare constructions)."""
        names = self.view_names()
        return {
            (str(names[j]), str(self.keys[j]), tuple(self.members_of(j).tolist()))
            for j in range(self.n_osus)
            if names[j] in views
        }
