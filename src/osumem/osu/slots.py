"""The slot arrays of an OSU pool: per raw group and per step state, growable.

Every raw group (an OSU before f_min and the M_max cap) has a *slot*: an id that does
not change while steps are added. :class:`SlotTable` holds, per slot, the group's view,
key and raw members and its derived state (kept size, cost, coherence, span, centroid
in a dense table of the live OSUs), and per step the slots it may join (row-ordered)
and the slots it keeps. Construction (:mod:`osumem.osu.construct`) fills and derives
it; the pool (:class:`~osumem.osu.pool.OSUPool`) reads it.
"""

from __future__ import annotations

import collections
import itertools
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.osu.config import VIEWS, OSUConfig
from osumem.types import IntArray

#: Process-wide counter of full derivations (so an epoch is never reused).
_EPOCHS = itertools.count()

#: Members converted to Python ints at a time by :func:`shared_lists` (bounds the
#: transient list of a large memory).
_LIST_CHUNK = 1 << 16


def shared_lists(
    positions: list[int], members: IntArray, bounds: IntArray
) -> list[tuple[int, ...]]:
    """The groups ``members[bounds[i]:bounds[i + 1]]`` as tuples holding the int objects
    of ``positions`` (one object per step however many groups it joins: a fresh Python
    int per membership would cost about as much as the rest of the pool's per-group
    state). Tuples, not lists: a tuple of ints leaves the garbage collector's tracking
    at its first collection, so a full collection does not walk one per unit."""
    chunks = (
        members[i : i + _LIST_CHUNK].tolist() for i in range(0, members.shape[0], _LIST_CHUNK)
    )
    every = map(positions.__getitem__, itertools.chain.from_iterable(chunks))
    return [tuple(itertools.islice(every, k)) for k in np.diff(bounds).tolist()]


#: From this many entries, a bulk resize leaves a quarter of headroom (GrowArray).
HEADROOM_MIN = 20_000


class GrowArray:
    """A numpy array that grows along axis 0 by doubling (amortised O(1) appends).

    The spare capacity past the logical length is left unwritten (``np.empty``), so a
    large buffer's untouched tail costs address space, not resident memory; entries
    get ``fill`` when the logical length first covers them."""

    def __init__(self, tail: tuple[int, ...], dtype: Any, fill: Any = 0) -> None:
        self.fill = fill
        self.a = np.empty((16, *tail), dtype=dtype)
        self.n = 0

    def resize(self, n: int, headroom: bool = False) -> None:
        """Make the logical length ``n``; new entries hold ``fill``. ``headroom``: a
        growth leaves a quarter of headroom however short the array (a per-OSU array
        of a pool of at least :data:`HEADROOM_MIN` steps)."""
        if n > self.a.shape[0]:
            # a large bulk (a build) gets a quarter of headroom, so the appends that
            # follow it do not copy the whole array at once (unwritten capacity is not
            # resident); smaller arrays keep their exact size, which the efficiency
            # tables count
            extra = n // 4 if headroom or n >= HEADROOM_MIN else 0
            cap = max(n + extra, 2 * self.a.shape[0])
            bigger = np.empty((cap, *self.a.shape[1:]), self.a.dtype)
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


class SlotTable:
    """Slot- and step-level state of a pool with embeddings of dimension ``d``.

    Per slot ``g``: ``view_code`` (index into :data:`VIEWS`), ``rank`` (view
    priority), ``first`` (first raw member), ``keys[g]``, ``members[g]`` (raw members,
    increasing), ``coh_raw`` (coherence of the raw group), and the kept state
    ``k_size``, ``k_cost``, ``k_coh``, ``k_span`` (0 when not live). Per step ``p``:
    ``row_slots[row_ptr[p]:row_ptr[p + 1]]`` (the annotation slots it joined),
    ``sim_slot[p]`` (its similarity slot, -1 for none) and ``kept[p]`` (the slots it
    keeps under M_max, -1 padded). ``live_slot`` / ``live_cent`` pack the live OSUs
    densely (``live_row[g]`` is slot ``g``'s row, -1 when not live). ``last`` maps
    ``(view, key)`` to the key's open group.
    """

    def __init__(self, config: OSUConfig, d: int) -> None:
        self.config = config
        self.view_code = GrowArray((), np.int8)
        self.rank = GrowArray((), np.int8)
        self.first = GrowArray((), np.int64)
        self.keys: list[str] = []
        self.members: list[tuple[int, ...]] = []
        self.last: dict[tuple[str, str], int] = {}
        self.coh_raw = GrowArray((), np.float64)
        self.k_size = GrowArray((), np.int64)
        self.k_cost = GrowArray((), np.int64)
        self.k_coh = GrowArray((), np.float32)
        self.k_span = GrowArray((2,), np.int64)
        self.row_ptr = GrowArray((), np.int64)
        self.row_ptr.resize(1)
        self.row_slots = GrowArray((), np.int64)
        self.sim_slot = GrowArray((), np.int64, fill=-1)
        self.kept = GrowArray((config.max_memberships,), np.int64, fill=-1)
        # slots whose centroid or liveness changed since the last full derivation
        # (``epoch`` counts full derivations), for indexes kept over the centroids
        self.epoch = next(_EPOCHS)
        self.change_log: list[int] = []
        # the live OSUs packed densely (swap-remove), for scans that skip dead slots
        self.live_row = GrowArray((), np.int64, fill=-1)
        self.live_slot = GrowArray((), np.int64)
        self.live_cent = GrowArray((d,), np.float32)
        # the live OSUs' total cost (dead slots cost 0): kept by set_cost, counted
        # again after a bulk write of k_cost (None)
        self._live_cost: int | None = None

    def new_epoch(self) -> None:
        """Start a new full derivation (indexes over the centroids then rebuild)."""
        self.epoch = next(_EPOCHS)

    @property
    def n_slots(self) -> int:
        """Number of raw groups (slots), live or not."""
        return len(self.keys)

    def new_slot(self, view: str, key: str, members: tuple[int, ...]) -> int:
        """Append one raw group as a slot; returns its slot number."""
        g = len(self.keys)
        for arr in (self.view_code, self.rank, self.first, self.coh_raw, self.k_size):
            arr.resize(g + 1)
        for arr2 in (self.k_cost, self.k_coh, self.k_span, self.live_row):
            arr2.resize(g + 1)
        self.view_code.a[g] = VIEWS.index(view)
        self.rank.a[g] = self.config.view_priority.index(view)
        self.first.a[g] = members[0]
        self.keys.append(key)
        self.members.append(members)
        return g

    def new_slots(
        self,
        views: list[str] | str,
        keys: list[str],
        members: list[tuple[int, ...]],
        firsts: IntArray | None = None,
    ) -> int:
        """Append raw groups as slots in one go: the state :meth:`new_slot` called for
        each in order leaves, array capacities and list allocations included, with
        every array grown once; returns the first new slot. ``views``: each group's
        view, or one view for all; ``firsts``: each group's first member, when the
        caller has them as an array."""
        g, m = len(self.keys), len(keys)
        for arr in (self.view_code, self.rank, self.first, self.coh_raw, self.k_size):
            arr.reserve(g + m)
            arr.resize(g + m)
        for arr in (self.k_cost, self.k_coh, self.k_span, self.live_row):
            arr.reserve(g + m)
            arr.resize(g + m)
        if m:
            if isinstance(views, str):
                self.view_code.a[g : g + m] = VIEWS.index(views)
                self.rank.a[g : g + m] = self.config.view_priority.index(views)
            else:
                code = {v: VIEWS.index(v) for v in set(views)}
                rank = {v: self.config.view_priority.index(v) for v in code}
                self.view_code.a[g : g + m] = [code[v] for v in views]
                self.rank.a[g : g + m] = [rank[v] for v in views]
            self.first.a[g : g + m] = [mm[0] for mm in members] if firsts is None else firsts
            if len(members) != m:
                raise ValueError("SlotTable.new_slots: one member list per key")
            # appends, one at a time (the same list allocation as appending per slot)
            collections.deque(map(self.keys.append, keys), maxlen=0)
            collections.deque(map(self.members.append, members), maxlen=0)
        return g

    def append_rows(self, n: int, rows: dict[int, list[int]]) -> None:
        """Extend the per-step state to ``n`` steps; ``rows[p]``: the annotation slots
        new step ``p`` joined."""
        start = self.row_ptr.n - 1
        flat = [g for p in range(start, n) for g in rows.get(p, [])]
        counts = np.array([len(rows.get(p, [])) for p in range(start, n)], dtype=np.int64)
        base = int(self.row_ptr.a[start])
        self.row_ptr.resize(n + 1)
        self.row_ptr.a[start + 1 : n + 1] = base + np.cumsum(counts)
        m = self.row_slots.n
        self.row_slots.resize(m + len(flat))
        self.row_slots.a[m : m + len(flat)] = flat
        self.sim_slot.resize(n)
        self.kept.resize(n)

    def live_cost(self) -> int:
        """The total token cost of the live OSUs (each OSU's kept members)."""
        total = self._live_cost
        if total is None:
            total = self._live_cost = int(self.k_cost.v.sum())
        return total

    def set_cost(self, g: int, cost: int) -> None:
        """Set slot ``g``'s cost (0 when it is not live), keeping :meth:`live_cost`."""
        if self._live_cost is not None:
            self._live_cost += cost - int(self.k_cost.a[g])
        self.k_cost.a[g] = cost

    def costs_written(self) -> None:
        """``k_cost`` was written in bulk: :meth:`live_cost` counts it again."""
        self._live_cost = None

    def slot_arrays(self) -> tuple[IntArray, IntArray, IntArray]:
        """``(live_rows, costs, sizes)`` per slot (views, no copies)."""
        return self.live_row.v, self.k_cost.v, self.k_size.v

    def live_arrays(self) -> tuple[IntArray, NDArray[np.float32]]:
        """``(slots, centroids)`` of the live OSUs packed densely (views, no copies)."""
        return self.live_slot.v, self.live_cent.v

    def changes_since(self, epoch: int, position: int) -> list[int] | None:
        """Slots whose centroid or liveness changed since change-log ``position`` of
        full derivation ``epoch`` (``None`` when a full derivation happened since)."""
        if epoch != self.epoch:
            return None
        return self.change_log[position:]

    def set_live(self, g: int, centroid: NDArray[np.float32] | None) -> None:
        """Insert, refresh (``centroid`` given) or remove (``None``) slot ``g`` in the
        dense live arrays."""
        self.change_log.append(g)
        row = int(self.live_row.a[g])
        if centroid is None:
            if row < 0:
                return
            last = self.live_slot.n - 1
            moved = int(self.live_slot.a[last])
            self.live_slot.a[row] = moved
            self.live_cent.a[row] = self.live_cent.a[last]
            self.live_row.a[moved] = row
            self.live_row.a[g] = -1
            self.live_slot.resize(last)
            self.live_cent.resize(last)
            return
        if row < 0:
            row = self.live_slot.n
            self.live_slot.resize(row + 1)
            self.live_cent.resize(row + 1)
            self.live_slot.a[row] = g
            self.live_row.a[g] = row
        self.live_cent.a[row] = centroid

    def slot_members(self, slot: int) -> list[int]:
        """The positions slot ``slot`` keeps (increasing); empty when not live."""
        if self.k_size.a[slot] == 0:
            return []
        kept = self.kept.a
        return [p for p in self.members[slot] if (kept[p] == slot).any()]

    def kept_union(self, slots: IntArray) -> IntArray:
        """The distinct positions that any of ``slots`` keeps, increasing: the union of
        :meth:`slot_members`. A slot that keeps as many members as its raw group has
        keeps all of them (kept members are a subset), so only the other slots' members
        are checked against the per-step rows."""
        size = self.k_size.a
        raw = self.members
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
            keep = (self.kept.a[steps] == owner[:, None]).any(axis=1)
            out.update(steps[keep].tolist())
        return np.array(sorted(out), dtype=np.int64)

    def canonical_key(self, slot: int) -> tuple[int, int, str]:
        """``(view priority, first member, key)``: the canonical order of OSUs."""
        return (int(self.rank.a[slot]), int(self.first.a[slot]), self.keys[slot])

    def canonical_rank(self) -> IntArray:
        """Rank of every slot in canonical order (view priority, first member, key)."""
        n_slots = self.n_slots
        keyrank = np.empty(n_slots, dtype=np.int64)
        keyrank[sorted(range(n_slots), key=self.keys.__getitem__)] = np.arange(n_slots)
        order = np.lexsort((keyrank, self.first.v, self.rank.v))
        rank = np.empty(n_slots, dtype=np.int64)
        rank[order] = np.arange(n_slots)
        return rank

    def step_candidates(self, p: int) -> list[int]:
        """The slots step ``p`` joined (annotation slots, then its similarity slot)."""
        ptr = self.row_ptr.a
        out = self.row_slots.a[ptr[p] : ptr[p + 1]].tolist()
        s = int(self.sim_slot.a[p])
        if s >= 0:
            out.append(s)
        return out
