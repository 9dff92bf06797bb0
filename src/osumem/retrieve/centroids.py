"""The OSU centroids a coarse stage scores: an HNSW index over a pool's live
centroids kept in step with its change log, and the top-K choice with the pool's
canonical tie order."""

from __future__ import annotations

import itertools
import threading
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from osumem.osu.background import BackgroundCall, native_call
from osumem.osu.pool import OSUPool
from osumem.osu.views import HNSW_EF_CONSTRUCTION, HNSW_M, INSERT_CHUNK
from osumem.retrieve.distinct import row_key, row_keys
from osumem.retrieve.step_index import UnsureMemo
from osumem.types import IntArray

#: Up to this many candidate OSUs, the top K is taken by one full sort.
SMALL_SORT = 64


#: The first search beam per centroid asked for (the coarse stage asks for K plus a
#: margin; its recall safeguard asks again with a wider beam when the answer's scores
#: do not stand out). No floor: a coarse stage's K is small (1 to 7 units at budgets
#: 64 to 1,024 on a generated 100,000-step memory), and the floor of 40 it had made
#: the default method's retrieve there 12-35% slower for the same selections (see
#: docs/decisions.md).
CENTROID_BEAM_PER_K = 2


#: At most this many live OSUs wait outside the index (new, or their centroid moved
#: since it was indexed); past it the oldest is (re)indexed at the next sync.
PENDING_MAX = 64


class _Built(NamedTuple):
    """A new index over distinct centroids: its groups' keys and first slots (by
    label), each slot's label (``group``, by row of ``slots``), and the slots of each
    group of more than one."""

    index: Any
    keys: list[bytes]
    firsts: IntArray
    slots: IntArray
    group: IntArray
    shared: dict[int, tuple[int, ...]]


def _members(shared: dict[int, tuple[int, ...]], rep: IntArray, g: int) -> tuple[int, ...]:
    """The slots of group ``g``: its tuple when it holds more than one, else its one
    slot (``(-1,)`` for an empty group)."""
    return shared.get(g, (int(rep[g]),))


class CentroidIndex:
    """An HNSW index (hnswlib, inner product) over the live OSU centroids of a pool,
    kept in step with the pool's change log: a dead OSU leaves it, a full derivation
    rebuilds it, and a new or changed OSU is *pending* until it is (re)indexed. Every
    query answers the pending OSUs as well, so the candidates it returns stand for
    every live centroid as it is now; indexing the oldest pending OSU only once more
    than :data:`PENDING_MAX` wait means an agent's units, which change again and again
    while it works on them, are indexed once instead of at every change (an in-place
    HNSW update costs about as much as an insertion).

    The index holds each distinct centroid once, labelled by a *group* of the slots
    whose centroid it is (a query answers every slot of a group it finds). OSUs with
    equal centroids (a memory holding the same steps many times over) would otherwise
    fill each other's HNSW neighbour lists, and a search would miss much of the top K
    without the recall safeguard noticing (measured in docs/decisions.md). Group
    labels are reused once their group is empty, so the index does not grow with the
    changes of an agent's units."""

    def __init__(self, pool: OSUPool, seed: int, *, background: bool = False) -> None:
        self.pool = pool
        self.seed = seed
        #: Build the index on a background thread; until it is ready, :meth:`query`
        #: answers ``None`` (the caller scores every centroid exactly).
        self.background = background
        self.epoch = -1
        self.position = 0
        self._index: Any = None
        #: The group of each indexed centroid (by
        #: :func:`~osumem.retrieve.distinct.row_key`), the key of each group label
        #: (``None`` when free), the slots of each group holding more than one (a
        #: tuple, replaced at each change: a query on another thread reads it whole; a
        #: group of one is its ``_expand`` entry alone), and the group of each slot
        #: (-1: not indexed): arrays and short keys, not a dict entry per OSU (see
        #: docs/decisions.md for what they cost).
        self._group_of_key: dict[bytes, int] = {}
        self._keys: list[bytes | None] = []
        self._slot_group = np.empty(0, dtype=np.int64)
        #: Labels of empty groups (marked deleted in the index), reused first.
        self._free: list[int] = []
        self._n_labels = 0
        #: What a query reads to turn labels into slots, as one tuple (a query on
        #: another thread reads one consistent set): the index the labels are of, per
        #: label one slot of its group (-1 when empty) and whether it holds more than
        #: one, and the slots of each group of more than one (:attr:`_shared`).
        #: Replaced when the index grows or is rebuilt.
        self._expand: tuple[Any, IntArray, NDArray[np.bool_], dict[int, tuple[int, ...]]] = (
            None,
            np.empty(0, dtype=np.int64),
            np.empty(0, dtype=bool),
            {},
        )
        #: Live slots whose current centroid the index does not hold, oldest first.
        self._pending: dict[int, None] = {}
        #: ``_pending`` as an array, and a mask over the slots of it (``None`` when
        #: nothing is pending; one tuple, so a query on another thread reads a pair).
        self._pending_rows: tuple[IntArray, NDArray[np.bool_]] | None = None
        #: The index whose search beam was last set, and that beam; held from setting
        #: it to the end of the search that uses it.
        self._beam_of: tuple[Any, int] = (None, -1)
        self._beam = threading.Lock()
        #: Queries the coarse stage's recall safeguard answered by scoring every
        #: centroid ...
        self.fallbacks = 0
        #: ... and those it kept from the index asked again with a wider beam.
        self.raised = 0
        #: With :attr:`background`: whether the safeguard has been falling back
        #: (the coarse stage then scores every centroid at once).
        self.unsure = UnsureMemo()
        #: The background build in flight, with the epoch and change-log position it
        #: was built at.
        self._job: tuple[BackgroundCall[_Built], int, int] | None = None
        #: Held while the index is taken from a finished build or brought up to date
        #: with the pool: queries on several threads (a server's readers) change it
        #: one at a time, and a query that finds it current takes no lock.
        self._lock = threading.RLock()

    def _rebuild(self) -> None:
        """Build the index over the live centroids now (in the background when set:
        the pool's arrays are read here, the insertion runs on a thread)."""
        slots, cents = self.pool.live_arrays()
        epoch, position = self.pool.epoch, self.pool.change_log_position
        if not self.background:
            self._install(self._new_index(slots, cents), epoch, position)
            return
        slots, cents = slots.copy(), np.array(cents, copy=True)
        build = BackgroundCall(lambda: self._new_index(slots, cents), "osumem-centroid-index")
        self._job = (build, epoch, position)
        self._index = None

    def _new_index(self, slots: IntArray, cents: NDArray[np.float32]) -> _Built:
        import hnswlib

        keys = row_keys(cents)
        # label each distinct centroid by its first row (the live slots' order)
        _, first, inverse = np.unique(
            np.frombuffer(b"".join(keys), dtype="V16"), return_index=True, return_inverse=True
        )
        order = np.argsort(first, kind="stable")
        label = np.empty_like(order)
        label[order] = np.arange(order.size)
        group = label[inverse.ravel()].astype(np.int64)
        first = first[order]
        n = int(first.size)
        shared: dict[int, tuple[int, ...]] = {}
        if n < len(keys):
            by_group = np.argsort(group, kind="stable")
            bounds = np.searchsorted(group[by_group], np.arange(n + 1))
            for g in np.flatnonzero(np.diff(bounds) > 1).tolist():
                shared[g] = tuple(slots[by_group[bounds[g] : bounds[g + 1]]].tolist())
        # each distinct centroid once, in slot order (the graph of centroids that are
        # all distinct is the one an index labelled by slot would build)
        rows = cents if n == len(keys) else cents[first]
        index = hnswlib.Index(space="ip", dim=cents.shape[1])
        # capacity for the groups plus an eighth (grown by doubling in sync): hnswlib
        # keeps a lock and a level per element of capacity, resident even when unused
        index.init_index(
            max_elements=max(1024, n + n // 8),
            M=HNSW_M,
            ef_construction=HNSW_EF_CONSTRUCTION,
            random_seed=self.seed,
        )
        index.set_num_threads(1)
        labels = np.arange(n, dtype=np.int64)
        for lo in range(0, n, INSERT_CHUNK):  # pieces: see native_call
            with native_call():
                index.add_items(rows[lo : lo + INSERT_CHUNK], labels[lo : lo + INSERT_CHUNK])
        firsts = slots[first].astype(np.int64)
        return _Built(index, [keys[i] for i in first.tolist()], firsts, slots, group, shared)

    def _install(self, built: _Built, epoch: int, position: int) -> None:
        n = len(built.keys)
        capacity = int(built.index.get_max_elements())
        rep = np.full(capacity, -1, dtype=np.int64)
        multi = np.zeros(capacity, dtype=bool)
        rep[:n] = built.firsts
        multi[list(built.shared)] = True
        n_slots = max(self.pool.slot_arrays()[0].shape[0], int(built.slots.max(initial=-1)) + 1)
        slot_group = np.full(n_slots, -1, dtype=np.int64)
        slot_group[built.slots] = built.group
        self._expand = (built.index, rep, multi, built.shared)
        self._index = built.index
        self._group_of_key = {key: g for g, key in enumerate(built.keys)}
        self._keys = list(built.keys)
        self._slot_group = slot_group
        self._free = []
        self._n_labels = n
        self._set_pending({})
        self.epoch, self.position = epoch, position

    def wait(self) -> None:
        """Wait for a background build (a no-op when there is none)."""
        with self._lock:
            if self._job is None:
                return
            build, epoch, position = self._job
            self._job = None
            self._install(build.result(), epoch, position)

    def catch_up(self) -> None:
        """What the next query does first: take a finished background build, then
        apply the pool's changes (or start the build, in the background when set)."""
        if self.ready():
            self.sync()

    def ready(self) -> bool:
        """Whether the index can answer now (no background build in flight; one that
        finished is taken)."""
        job = self._job
        if job is not None:
            if job[0].running:
                return False
            self.wait()
        return True

    def sync(self) -> None:
        """Apply the pool's changes since the last sync."""
        pool = self.pool
        if (
            self._job is None
            and self._index is not None
            and self.epoch == pool.epoch
            and self.position == pool.change_log_position
        ):
            return  # current
        with self._lock:
            self._synced()

    def _synced(self) -> None:
        """:meth:`sync`'s work, under the lock."""
        pool = self.pool
        if self._job is not None:
            self.wait()
        if (
            self._index is not None
            and self.epoch == pool.epoch
            and self.position == pool.change_log_position
        ):
            return
        changes = pool.changes_since(self.epoch, self.position) if self._index else None
        if changes is None:
            self._rebuild()
            if self._index is None:  # building in the background
                return
        else:
            _, _, sizes = pool.slot_arrays()
            pending = dict(self._pending)
            with native_call():
                for g in dict.fromkeys(changes):
                    if sizes[g] > 0:
                        pending[g] = None  # an OSU already waiting keeps its place
                    else:
                        pending.pop(g, None)
                        self._leave(g)
            self._index_oldest(pending, len(pending) - PENDING_MAX)
            self._set_pending(pending)
        self.epoch, self.position = pool.epoch, pool.change_log_position

    @property
    def _shared(self) -> dict[int, tuple[int, ...]]:
        """The slots of each group of more than one (the dict in :attr:`_expand`)."""
        return self._expand[3]

    def _leave(self, slot: int) -> None:
        """Take ``slot`` out of its group (if indexed); an emptied group's label is
        marked deleted and freed."""
        g = int(self._slot_group[slot]) if slot < self._slot_group.shape[0] else -1
        if g < 0:
            return
        self._slot_group[slot] = -1
        _, rep, multi, _ = self._expand
        rest = tuple(s for s in _members(self._shared, rep, g) if s != slot)
        if rest:
            self._set_members(g, rest)
            return
        self._index.mark_deleted(g)
        rep[g] = -1
        multi[g] = False
        self._shared.pop(g, None)
        key = self._keys[g]
        self._keys[g] = None
        if key is not None:
            del self._group_of_key[key]
        self._free.append(g)

    def _set_members(self, g: int, members: tuple[int, ...]) -> None:
        _, rep, multi, _ = self._expand
        rep[g] = members[0]
        if len(members) > 1:
            self._shared[g] = members
            multi[g] = True
        else:
            multi[g] = False
            self._shared.pop(g, None)

    def _join(self, slot: int, key: bytes, row: NDArray[np.float32]) -> None:
        """Put ``slot`` in the group of centroid ``key`` (``row``), adding the centroid
        to the index when no group holds it."""
        g = self._group_of_key.get(key)
        if g is None:
            if self._free:
                g = self._free.pop()
                self._index.unmark_deleted(g)
                self._keys[g] = key
            else:
                g = self._n_labels
                self._n_labels += 1
                self._keys.append(key)
            self._index.add_items(row[None, :], np.array([g]))
            self._group_of_key[key] = g
            members: tuple[int, ...] = (slot,)
        else:
            members = (*_members(self._shared, self._expand[1], g), slot)
        self._set_members(g, members)
        if slot >= self._slot_group.shape[0]:
            grown = np.full(max(slot + 1, 2 * self._slot_group.shape[0]), -1, dtype=np.int64)
            grown[: self._slot_group.shape[0]] = self._slot_group
            self._slot_group = grown
        self._slot_group[slot] = g

    def _index_oldest(self, pending: dict[int, None], count: int) -> None:
        """(Re)index the ``count`` oldest of ``pending`` (removed from it) at their
        current centroids."""
        if count <= 0:
            return
        take = list(itertools.islice(pending, count))
        rows = self.pool.slot_arrays()[0]
        _, cents = self.pool.live_arrays()
        need = self._n_labels - len(self._free) + len(take)
        if need > self._index.get_max_elements():
            capacity = max(need, 2 * self._index.get_max_elements())
            with self._beam:  # hnswlib moves the graph's memory: no search meanwhile
                self._index.resize_index(capacity)
            index, rep, multi, shared = self._expand
            grown_rep = np.full(capacity, -1, dtype=np.int64)
            grown_multi = np.zeros(capacity, dtype=bool)
            grown_rep[: rep.shape[0]] = rep
            grown_multi[: multi.shape[0]] = multi
            self._expand = (index, grown_rep, grown_multi, shared)
        with native_call():
            for g in take:
                row = cents[rows[g]]
                self._leave(g)
                self._join(g, row_key(np.ascontiguousarray(row).data), row)
                del pending[g]

    def _set_pending(self, pending: dict[int, None]) -> None:
        self._pending = pending
        if not pending:
            self._pending_rows = None
            return
        arr = np.fromiter(pending, dtype=np.int64, count=len(pending))
        mask = np.zeros(self.pool.slot_arrays()[0].shape[0], dtype=bool)
        mask[arr] = True
        self._pending_rows = (arr, mask)

    def groups(self) -> dict[int, tuple[int, ...]]:
        """The index's labels and the slots each stands for (a copy)."""
        rep = self._expand[1]
        return {g: _members(self._shared, rep, g) for g in range(self._n_labels) if rep[g] >= 0}

    def query(self, q: NDArray[np.float32], k: int, ef: int | None = None) -> IntArray | None:
        """About the ``k`` best distinct centroids, search beam ``ef`` (default
        :data:`CENTROID_BEAM_PER_K` ``· k``): every slot holding one of them, and every
        pending slot (the caller scores the candidates exactly); ``None`` when the
        index cannot answer ``k`` or is being built in the background (the caller
        then scans)."""
        if not self.ready():
            return None
        self.sync()
        index = self._index  # once: another thread may take a new one meanwhile
        if index is None:
            return None
        ef = CENTROID_BEAM_PER_K * k if ef is None else max(int(ef), k)
        try:
            # the beam is the index's, not the call's: set and searched with under one
            # lock, so another thread's query never searches with this one's beam
            with self._beam:
                if index is not self._beam_of[0] or ef != self._beam_of[1]:
                    index.set_ef(ef)
                    self._beam_of = (index, ef)
                with native_call():
                    labels, _ = index.knn_query(q[None, :], k=k, num_threads=1)
        except RuntimeError:
            return None
        groups = labels[0].astype(np.int64)
        of, rep, multi, shared = self._expand
        if of is not index:  # rebuilt meanwhile by another thread
            return None
        if multi[groups].any():
            found = np.fromiter(
                itertools.chain.from_iterable(_members(shared, rep, g) for g in groups.tolist()),
                dtype=np.int64,
            )
        else:
            found = rep[groups]
        found = found[found >= 0]  # a group emptied meanwhile by another thread
        pending = self._pending_rows
        if pending is None:
            return found
        # an indexed slot that is pending again is in the index at its old centroid
        arr, mask = pending
        return np.concatenate([found[~mask[found]], arr])


def top_slots(
    pool: OSUPool,
    slots: IntArray,
    scores: NDArray[Any],
    k: int,
    order: IntArray | None = None,
) -> IntArray:
    """The ``k`` of ``slots`` with the best ``scores``, ties by the pool's canonical
    order (as a set: the caller takes the union of their members). Sorting by key
    in Python happens only when scores tie at the k-th place. ``order``: the indices
    of ``scores`` best first, when the caller has sorted them already."""
    m = int(slots.shape[0])
    if k >= m:
        return slots
    sc = np.asarray(scores, dtype=np.float64)
    if order is not None or m <= SMALL_SORT:
        # a few candidates (the centroid index's): one sort, the tie check on two
        if order is None:
            order = np.argsort(-sc)
        if sc[order[k - 1]] > sc[order[k]]:
            return slots[order[:k]]
        kth = sc[order[k - 1]]
    else:
        top = np.argpartition(-sc, k - 1)[:k]
        kth = sc[top].min()
        if int(np.count_nonzero(sc >= kth)) == k:
            return slots[top]
    head = np.flatnonzero(sc >= kth).tolist()
    best = sorted(head, key=lambda i: (-sc[i], pool.canonical_key(int(slots[i]))))[:k]
    return slots[np.asarray(best, dtype=np.int64)]
