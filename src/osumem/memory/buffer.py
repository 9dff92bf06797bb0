"""Growable columnar buffers of one namespace: appending k steps costs O(k) amortised
(capacity doubles), and the :class:`~osumem.types.MemoryView` handed to retrievers is
a set of slices of the buffers, not a copy."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from osumem.memory.rows import HEADROOM_DIVISOR, NamespaceData, StepRow, kept_ends, take_room
from osumem.types import EntityPrefix, ListPrefix, MemoryView

#: :meth:`NamespaceBuffer.without` copies the kept rows slice by slice up to this many
#: runs of consecutive positions, through a mask above.
_MAX_RUNS = 64

_OBJECT_COLUMNS = ("tool_actions", "tool_signatures", "subgoals", "sources", "roles", "texts")


class NamespaceBuffer:
    """The cached steps of one namespace, appended in place.

    Holds the columns of :class:`NamespaceData` with spare capacity, the number of
    ``user`` steps (the subgoal segment counter of the next add), and a snapshot
    (:meth:`data`) rebuilt only when steps were appended since the last one.
    """

    def __init__(self, data: NamespaceData) -> None:
        v = data.view
        self.n = 0
        self.dim = v.dim
        # a quarter of headroom: the first add after loading a large namespace would
        # otherwise copy every column into buffers twice the size (75 ms of CPU at 50k
        # steps); untouched rows of np.empty cost address space, not resident memory
        cap = max(64, v.n + v.n // HEADROOM_DIVISOR)
        # the vectors of a namespace just read from the store are taken over where they
        # lie, with their spare rows (rows.matrix_with_room), not copied
        room = take_room(v.embeddings)
        taken = room is not None and room.shape[0] >= cap and room.shape[1] == self.dim
        self._emb: NDArray[np.float32] = (
            cast(NDArray[np.float32], room)
            if taken
            else np.empty((cap, self.dim), dtype=np.float32)
        )
        self._costs = np.empty(cap, dtype=np.int64)
        self._ids = np.empty(cap, dtype=np.int64)
        self._times = np.empty(cap, dtype=np.float64)
        self._updated = np.empty(cap, dtype=np.float64)
        self._metadata: list[str] = []
        self._obj = {name: np.empty(cap, dtype=object) for name in _OBJECT_COLUMNS}
        self._entities: list[frozenset[str]] = []
        self._arguments: list[str] = []
        self.batch_ends: list[int] = []
        self.users = 0
        self._snapshot: NamespaceData | None = None
        self.extend(data, vectors_in_place=taken)

    @property
    def capacity(self) -> int:
        """Rows the buffers hold before the next doubling."""
        return int(self._costs.shape[0])

    def _grow(self, need: int) -> None:
        cap = self.capacity
        if need <= cap:
            return
        new = max(need, 2 * cap)

        def grown(a: NDArray[Any]) -> NDArray[Any]:
            b = np.empty((new, *a.shape[1:]), dtype=a.dtype)
            b[: self.n] = a[: self.n]
            return b

        self._emb = grown(self._emb)
        self._costs = grown(self._costs)
        self._ids = grown(self._ids)
        self._times = grown(self._times)
        self._updated = grown(self._updated)
        self._obj = {k: grown(a) for k, a in self._obj.items()}

    def _room(self, k: int, dim: int) -> tuple[int, int]:
        """Make room for ``k`` more steps of dimension ``dim`` (the embedding buffer is
        made at the first steps); their positions ``lo, hi``."""
        if self.dim == 0:
            self.dim = dim
            self._emb = np.empty((self.capacity, self.dim), dtype=np.float32)
        self._grow(self.n + k)
        return self.n, self.n + k

    def extend(self, delta: NamespaceData, *, vectors_in_place: bool = False) -> None:
        """Append the steps of ``delta`` (the positions right after the buffered ones);
        ``vectors_in_place``: their vectors are already where they go (the buffer took
        over their matrix)."""
        d = delta.view
        k = d.n
        if k == 0:
            self.batch_ends.extend(e for e in delta.batch_ends if e > self.n)
            return
        lo, hi = self._room(k, d.dim)
        if not vectors_in_place:
            self._emb[lo:hi] = d.embeddings
        self._costs[lo:hi] = d.costs
        self._ids[lo:hi] = delta.step_ids
        self._times[lo:hi] = delta.times
        self._updated[lo:hi] = delta.updated
        self._metadata.extend(delta.metadata)
        for name in _OBJECT_COLUMNS:
            self._obj[name][lo:hi] = getattr(d, name)
        self._entities.extend(d.entities)
        self._arguments.extend(delta.arguments)
        self.batch_ends.extend(e for e in delta.batch_ends if e > lo)
        self.users += int(np.count_nonzero(d.roles == "user"))
        self.n = hi
        self._snapshot = None

    def extend_rows(
        self, rows: Sequence[StepRow], embeddings: NDArray[np.float32], ids: Sequence[int]
    ) -> None:
        """Append the rows an add just wrote (the bytes the store now holds) as one add
        batch at the positions right after the buffered ones: :meth:`extend` of the
        same steps, written into the buffers row by row (an agent's add is one or two
        rows, where building a :class:`NamespaceData` of them first cost more than
        writing them)."""
        k = len(rows)
        if k == 0:
            return
        lo, hi = self._room(k, int(embeddings.shape[1]))
        self._emb[lo:hi] = embeddings
        self._ids[lo:hi] = ids
        for i, r in enumerate(rows):
            self._set_columns(lo + i, r)
            self._metadata.append(r.metadata_json)
            self._entities.append(frozenset(r.entities))
            self._arguments.append(r.arguments_json)
            self.users += r.role == "user"
        self.batch_ends.append(hi)
        self.n = hi
        self._snapshot = None

    def _set_columns(self, at: int, r: StepRow) -> None:
        """Write the array columns of row ``at`` from ``r`` (not its embedding, id or
        list columns)."""
        obj = self._obj
        self._costs[at] = r.cost
        self._times[at] = np.nan if r.time is None else float(r.time)
        self._updated[at] = np.nan if r.updated is None else float(r.updated)
        obj["tool_actions"][at] = r.tool_action
        obj["tool_signatures"][at] = r.tool_signature
        obj["subgoals"][at] = r.subgoal
        obj["sources"][at] = r.source
        obj["roles"][at] = r.role
        obj["texts"][at] = r.text

    def replaced(
        self, changes: Sequence[tuple[int, StepRow, NDArray[np.float32]]]
    ) -> NamespaceBuffer:
        """A new buffer of these steps with the ones at the positions of ``changes``
        replaced by their rows and embeddings (ids and add batches kept), as the store
        holds them after the update. This one is left as it was, as by
        :meth:`without`."""
        new = self.without(())
        for p, row, embedding in changes:
            was_user = new._obj["roles"][p] == "user"
            new._set_columns(p, row)
            new._emb[p] = embedding
            new._metadata[p] = row.metadata_json
            new._entities[p] = frozenset(row.entities)
            new._arguments[p] = row.arguments_json
            new.users += int(row.role == "user") - int(was_user)
        return new

    def same_row(self, p: int, data: NamespaceData, i: int = 0) -> bool:
        """Whether the step at position ``p`` equals row ``i`` of ``data`` in everything
        :meth:`starts_with` compares (its metadata and times may differ)."""
        v = data.view
        return bool(
            int(self._ids[p]) == int(data.step_ids[i])
            and int(self._costs[p]) == int(v.costs[i])
            and self._emb[p].tobytes() == np.ascontiguousarray(v.embeddings[i]).tobytes()
            and all(self._obj[c][p] == getattr(v, c)[i] for c in _OBJECT_COLUMNS)
            and self._entities[p] == v.entities[i]
            and self._arguments[p] == data.arguments[i]
        )

    def without(self, gone: Sequence[int] | NDArray[np.int64]) -> NamespaceBuffer:
        """A new buffer of these steps less those at positions ``gone`` (distinct, in
        range): the later ones move down and the add batches follow (a batch left
        without steps is dropped), as the store holds them after the delete. This one
        is left as it was (views handed out before keep what they held)."""
        n = self.n
        at = np.asarray(gone, dtype=np.int64)
        keep = np.ones(n, dtype=bool)
        keep[at] = False
        m = int(np.count_nonzero(keep))
        cap = max(64, m + m // HEADROOM_DIVISOR)
        # the kept rows as runs of consecutive positions: a few deletes copy a few
        # slices (5 ms for the vectors of 60,000 steps, where a masked copy took 15-24
        # ms); many scattered ones copy through the mask in one pass
        cut = np.unique(at)
        starts, ends = np.concatenate(([0], cut + 1)), np.concatenate((cut, [n]))
        runs = [(int(lo), int(hi)) for lo, hi in zip(starts, ends, strict=True) if hi > lo]
        masked = len(runs) > _MAX_RUNS
        keep_list = keep.tolist() if masked else []

        def kept(a: NDArray[Any]) -> NDArray[Any]:
            b = np.empty((cap, *a.shape[1:]), dtype=a.dtype)
            if masked:
                np.compress(keep, a[:n], axis=0, out=b[:m])
                return b
            to = 0
            for lo, hi in runs:
                b[to : to + hi - lo] = a[lo:hi]
                to += hi - lo
            return b

        def kept_list(items: list[Any]) -> list[Any]:
            if masked:
                return list(itertools.compress(items[:n], keep_list))
            out: list[Any] = []
            for lo, hi in runs:
                out += items[lo:hi]
            return out

        new = object.__new__(NamespaceBuffer)
        new.n, new.dim = m, self.dim
        new._emb, new._costs, new._ids = kept(self._emb), kept(self._costs), kept(self._ids)
        new._times, new._updated = kept(self._times), kept(self._updated)
        new._obj = {name: kept(a) for name, a in self._obj.items()}
        new._metadata = kept_list(self._metadata)
        new._entities = kept_list(self._entities)
        new._arguments = kept_list(self._arguments)
        new.batch_ends = list(kept_ends(self.batch_ends, np.flatnonzero(keep)))
        new.users = self.users - int(np.count_nonzero(self._obj["roles"][at] == "user"))
        new._snapshot = None
        return new

    def starts_with(self, other: NamespaceBuffer) -> bool:
        """Whether these steps begin with ``other``'s, unchanged in everything a
        retriever reads or replays: ids, vectors (bit for bit), costs, annotations,
        texts, tool arguments and add batches; their metadata and times may differ,
        and steps may follow."""
        n = other.n
        if self.n < n or (n and self.dim != other.dim):
            return False
        if not (
            np.array_equal(self._ids[:n], other._ids[:n])
            and np.array_equal(self._costs[:n], other._costs[:n])
            and np.array_equal(self._emb[:n].view(np.uint32), other._emb[:n].view(np.uint32))
        ):
            return False
        if any(self._obj[c][:n].tolist() != other._obj[c][:n].tolist() for c in _OBJECT_COLUMNS):
            return False
        return (
            self._entities[:n] == other._entities[:n]
            and self._arguments[:n] == other._arguments[:n]
            and [e for e in self.batch_ends if e <= n] == list(other.batch_ends)
        )

    def prefix_view(self, t: int) -> MemoryView:
        """Steps ``0 .. t-1`` as a view over the buffers: array slices and an
        :class:`EntityPrefix`, nothing copied (for replaying stored add batches)."""
        t = max(0, min(int(t), self.n))
        return MemoryView(
            embeddings=self._emb[:t],
            costs=self._costs[:t],
            entities=cast(tuple[frozenset[str], ...], EntityPrefix(self._entities, t)),
            **{name: a[:t] for name, a in self._obj.items()},
        )

    def data(self) -> NamespaceData:
        """The buffered steps as a :class:`NamespaceData` (slices of the buffers)."""
        if self._snapshot is None or self._snapshot.view.n != self.n:
            n = self.n
            # the list columns as prefixes of the lists, not tuple copies: O(1) per
            # snapshot where copies cost O(n) (2.8 ms per add at 100k steps)
            view = MemoryView(
                embeddings=self._emb[:n],
                costs=self._costs[:n],
                entities=cast(tuple[frozenset[str], ...], EntityPrefix(self._entities, n)),
                **{name: a[:n] for name, a in self._obj.items()},
            )
            self._snapshot = NamespaceData(
                view=view,
                step_ids=self._ids[:n],
                arguments=cast(tuple[str, ...], ListPrefix(self._arguments, n)),
                batch_ends=cast(tuple[int, ...], ListPrefix(self.batch_ends, len(self.batch_ends))),
                metadata=cast(tuple[str, ...], ListPrefix(self._metadata, n)),
                times=self._times[:n],
                updated=self._updated[:n],
            )
        return self._snapshot

    def set_metadata(
        self,
        positions: Sequence[int],
        metadata: Sequence[str],
        updated: float,
        times: Sequence[float] | None = None,
    ) -> None:
        """Replace the metadata of the steps at ``positions`` (already stored), and
        their times when ``times`` are given: nothing a retriever reads changes. The
        list is copied first, so earlier snapshots (their :class:`ListPrefix` columns)
        keep what they held."""
        self._metadata = list(self._metadata)
        for p, m in zip(positions, metadata, strict=True):
            self._metadata[p] = m
            self._updated[p] = updated
        if times is not None:
            self._times[list(positions)] = times
        self._snapshot = None
