"""The OSU pool shared by the retrievers and the analysis.

A pool holds the Overlapping Semantic Units over ``n_steps`` steps. Its state lives
in three parts, each in its own module: the slot arrays (:mod:`osumem.osu.slots`:
every raw group's slot, per-slot and per-step derived state), construction
(:mod:`osumem.osu.construct`: the batch build, incremental adds, the similarity view's
refreshes and the derivation) and state serialisation (:mod:`osumem.osu.pool_state`:
plain arrays for snapshots). This module is the pool's face: the public attributes
(``members``, ``centroids`` ...) list the live OSUs in canonical order (view
priority, first member, key) and are assembled on first read after an add.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from osumem.lazy import lazy_module
from osumem.osu import construct, pool_state
from osumem.osu.config import VIEWS, OSUConfig
from osumem.osu.construct import SimilarityState
from osumem.osu.pool_state import POOL_STATE_FORMAT
from osumem.osu.slots import SlotTable
from osumem.osu.views import RawGroup
from osumem.types import IntArray, MemoryView

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = lazy_module("scipy.sparse")

__all__ = ["POOL_STATE_FORMAT", "OSUPool"]


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
        :meth:`canonical_key` (the :class:`~osumem.osu.slots.SlotTable` is
        :attr:`slots`).
    """

    def __init__(self, config: OSUConfig, seed: int = 0) -> None:
        self.config = config
        self.seed = int(seed)
        self.view_: MemoryView | None = None
        self.slots = SlotTable(config, 0)
        self.similarity = SimilarityState()
        self._public: dict[str, Any] | None = None
        #: Compute due similarity refreshes on a background thread (and the community
        #: detection in a child process) instead of inside the add that makes them
        #: due; the next add after the refresh is done applies it (or
        #: :meth:`finish_refresh`). Off: refreshes run in place, as the paper's
        #: construction does.
        self.background_refresh = False
        #: With :attr:`background_refresh`, from
        #: :data:`~osumem.osu.construct.DEFER_MIN_STEPS` steps on: an add past the
        #: application point of a refresh still being computed goes on without it until
        #: it is built, up to the next refresh's due point, where it waits (a memory's
        #: pool, whose queries must not stall; the pool then depends on timing until
        #: :meth:`finish_refresh`). Off: the refresh is applied at its fixed step
        #: count, waited for there.
        self.defer_refresh = False

    def invalidate(self) -> None:
        """Forget the assembled public attributes (the slots changed)."""
        self._public = None

    # -- construction and state ------------------------------------------------------

    @classmethod
    def build(
        cls, view: MemoryView, config: OSUConfig, seed: int = 0, *, similarity: bool = True
    ) -> OSUPool:
        """Build the pool over every step of ``view`` at once (batch construction);
        ``similarity=False`` leaves the similarity view for the first refresh."""
        pool = cls(config, seed)
        construct.build(pool, view, similarity=similarity)
        return pool

    def add(self, view: MemoryView) -> OSUPool:
        """Extend the pool to ``view``, which must extend the current view by new steps
        at the end. New steps join their key's open group when within Δ_view of its
        last member and under S_max, else open a new group; only the touched groups
        and their members are re-derived. The similarity view is recomputed once
        ``max(similarity_refresh, similarity_refresh_ratio × covered)`` steps have
        arrived since its last refresh (in place, or on a background thread with
        :attr:`background_refresh`). Returns ``self``."""
        construct.add(self, view)
        return self

    @property
    def refresh_pending(self) -> bool:
        """Whether a background similarity refresh is computed or waits to be applied."""
        return self.similarity.job is not None

    def refresh_blocks(self, n_steps: int) -> bool:
        """Whether extending the pool to ``n_steps`` steps would now wait for its
        background similarity refresh (the add applies it there and it is still being
        computed; see :func:`~osumem.osu.construct.refresh_blocks`)."""
        return construct.refresh_blocks(self, n_steps)

    def apply_ready_refresh(self) -> bool:
        """Apply the background refresh an add went past without (see
        :attr:`defer_refresh`) once it is built; never waits (see
        :func:`~osumem.osu.construct.apply_ready_refresh`). Returns whether it was
        applied."""
        return construct.apply_ready_refresh(self)

    def finish_refresh(self) -> bool:
        """Wait for the background similarity refresh, if there is one, and apply it
        (see :func:`~osumem.osu.construct.finish_refresh`). Returns whether there was
        one."""
        return construct.finish_refresh(self)

    def prepare_refresh(self) -> bool:
        """Rebuild the similarity view's HNSW index now when this pool was built or
        restored without it, so the next refresh does not (the same index it would
        build; see :func:`~osumem.osu.construct.prepare_similarity`). Returns whether
        anything was built."""
        if self.view_ is None:
            return False
        return construct.prepare_similarity(self, self.view_)

    def state(self) -> dict[str, NDArray[Any]]:
        """Everything this pool derived incrementally, as plain arrays (for
        :meth:`from_state`; see :func:`~osumem.osu.pool_state.pool_arrays`)."""
        return pool_state.pool_arrays(self)

    def state_later(self) -> Callable[[], dict[str, NDArray[Any]]]:
        """:meth:`state` in two parts: what later adds change in place is copied now,
        the rest is written by the returned function, which may run on another thread
        while this pool takes adds (see :func:`~osumem.osu.pool_state.pool_arrays_later`)."""
        return pool_state.pool_arrays_later(self)

    @classmethod
    def from_state(
        cls, view: MemoryView, config: OSUConfig, seed: int, state: dict[str, NDArray[Any]]
    ) -> OSUPool:
        """The pool :meth:`state` described, over ``view`` (the steps it covered).
        Arrays that do not fit raise ``ValueError`` so the caller can rebuild."""
        pool = cls(config, seed)
        pool_state.load_pool_arrays(pool, view, state)
        return pool

    # -- slot-level state (see :class:`~osumem.osu.slots.SlotTable`) -----------------

    @property
    def epoch(self) -> int:
        """Number of the current full derivation (indexes over the centroids rebuild
        when it changes)."""
        return self.slots.epoch

    @property
    def n_slots(self) -> int:
        """Number of raw groups (slots), live or not."""
        return self.slots.n_slots

    def slot_arrays(self) -> tuple[IntArray, IntArray, IntArray]:
        """``(live_rows, costs, sizes)`` per slot (views, no copies): the slot's row in
        :meth:`live_arrays` (-1 when it is not a live OSU), its cost and size (0 when
        not live)."""
        return self.slots.slot_arrays()

    def live_arrays(self) -> tuple[IntArray, NDArray[np.float32]]:
        """``(slots, centroids)`` of the live OSUs packed densely, in no particular
        order (views, no copies): what a coarse scan reads."""
        return self.slots.live_arrays()

    def live_cost(self) -> int:
        """The total token cost of the live OSUs (kept through adds, not recounted)."""
        return self.slots.live_cost()

    def changes_since(self, epoch: int, position: int) -> list[int] | None:
        """Slots whose centroid or liveness changed since change-log ``position`` of
        full derivation ``epoch`` (``None`` when a full derivation happened since:
        rebuild from :meth:`live_arrays`). The current position is
        :attr:`change_log_position`."""
        return self.slots.changes_since(epoch, position)

    @property
    def change_log_position(self) -> int:
        """Length of the change log of the current epoch."""
        return len(self.slots.change_log)

    def slot_members(self, slot: int) -> list[int]:
        """The positions slot ``slot`` keeps (increasing); empty when not live."""
        return self.slots.slot_members(slot)

    def kept_union(self, slots: IntArray) -> IntArray:
        """The distinct positions that any of ``slots`` keeps, increasing."""
        return self.slots.kept_union(slots)

    def canonical_key(self, slot: int) -> tuple[int, int, str]:
        """``(view priority, first member, key)``: the canonical order of OSUs."""
        return self.slots.canonical_key(slot)

    # -- public state (canonical order, assembled on first read after an add) ---------

    def _live_order(self) -> tuple[IntArray, IntArray]:
        """Live slots in canonical order and each slot's public OSU id (-1 if none),
        cached until the next add: an integer sort on (view priority, first member),
        then the few runs that tie there ordered by key."""
        pub = self._public if self._public is not None else {}
        self._public = pub
        if "order" not in pub:
            live = np.flatnonzero(self.slots.k_size.v > 0)
            rank, first = self.slots.rank.v[live], self.slots.first.v[live]
            o = np.lexsort((first, rank))
            live, rank, first = live[o], rank[o], first[o]
            tie = (np.diff(rank) == 0) & (np.diff(first) == 0)
            if tie.any():
                cuts = np.flatnonzero(~tie) + 1
                starts, ends = np.r_[0, cuts], np.r_[cuts, live.shape[0]]
                for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
                    if hi - lo > 1:
                        live[lo:hi] = sorted(live[lo:hi].tolist(), key=self.slots.keys.__getitem__)
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
            kept = self.slots.kept.v
            step_idx, col = np.nonzero(kept >= 0)
            ids = new_id[kept[step_idx, col]]
            ok = ids >= 0
            value: Any = sp.csc_matrix(
                (np.ones(int(ok.sum()), dtype=np.float32), (step_idx[ok], ids[ok])),
                shape=(n, live.shape[0]),
            )
            value.sort_indices()
        elif name == "view_codes":
            value = self.slots.view_code.v[live].astype(np.int8)
        elif name == "keys":
            value = np.array([self.slots.keys[g] for g in live.tolist()], dtype=object)
        elif name == "centroids":
            value = self.slots.live_cent.v[self.slots.live_row.v[live]].reshape(-1, d)
        elif name == "costs":
            value = self.slots.k_cost.v[live].astype(np.int64)
        elif name == "spans":
            value = self.slots.k_span.v[live].reshape(-1, 2).astype(np.int64)
        elif name == "sizes":
            value = self.slots.k_size.v[live].astype(np.int64)
        else:
            value = self.slots.k_coh.v[live].astype(np.float32)
        pub[name] = value
        return value

    def raw_groups(self) -> list[RawGroup]:
        """The raw groups (before f_min and the cap) of the enabled views."""
        return [
            (
                VIEWS[int(self.slots.view_code.a[g])],
                self.slots.keys[g],
                np.asarray(self.slots.members[g], dtype=np.int64),
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
        return int(self.slots.live_slot.n)

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
        ids = new_id[self.slots.kept.a[int(step)][self.slots.kept.a[int(step)] >= 0]]
        return np.sort(ids[ids >= 0]).astype(np.int64)

    def osu_slots_of(self, step: int) -> list[int]:
        """The live slots step ``step`` belongs to, in canonical order (the order of
        :meth:`osus_of`), read from the row-ordered state without assembling the pool."""
        slots = [
            int(g) for g in self.slots.kept.a[int(step)] if g >= 0 and self.slots.k_size.a[g] > 0
        ]
        return sorted(slots, key=self.canonical_key)

    def units_of(self, step: int) -> list[tuple[str, str, int, int, int]]:
        """``(view, key, first, last, size)`` of each OSU step ``step`` belongs to, in
        the order of :meth:`osus_of`, read from the slot-level state (no public arrays
        are assembled: an add does not make the next call O(OSUs))."""
        s = self.slots
        return [
            (
                VIEWS[int(s.view_code.a[g])],
                s.keys[g],
                int(s.k_span.a[g, 0]),
                int(s.k_span.a[g, 1]),
                int(s.k_size.a[g]),
            )
            for g in self.osu_slots_of(step)
        ]

    def units_at(self, steps: Sequence[int]) -> list[list[tuple[str, str, int, int, int]]]:
        """:meth:`units_of` of each of ``steps`` (the same lists), read in one pass: the
        steps' rows of the slot-level state at once, and each distinct slot's unit and
        canonical key computed once (the steps a retrieval selects share most units)."""
        s = self.slots
        if len(steps) == 0:
            return []
        rows = s.kept.a[np.asarray(steps, dtype=np.int64)].tolist()
        size, view_code, span = s.k_size.a, s.view_code.a, s.k_span.a
        rank, first, keys = s.rank.a, s.first.a, s.keys
        unit: dict[int, tuple[str, str, int, int, int]] = {}
        order: dict[int, tuple[int, int, str]] = {}
        out = []
        for row in rows:
            live = []
            for g in row:
                if g < 0:
                    continue
                if g not in unit:
                    n_kept = int(size[g])
                    if n_kept <= 0:
                        continue
                    unit[g] = (
                        VIEWS[int(view_code[g])],
                        keys[g],
                        int(span[g, 0]),
                        int(span[g, 1]),
                        n_kept,
                    )
                    order[g] = (int(rank[g]), int(first[g]), keys[g])
                live.append(g)
            if len(live) > 1:
                live.sort(key=order.__getitem__)
            out.append([unit[g] for g in live])
        return out

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
