"""The per-namespace cache of a :class:`~osumem.memory.Memory`: each loaded
namespace's steps in growable columns (:class:`~osumem.memory.buffer.NamespaceBuffer`),
kept equal to what the store holds while other writers commit."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from osumem.memory import collector
from osumem.memory.backends import MemoryStore
from osumem.memory.buffer import NamespaceBuffer
from osumem.memory.held import HeldSnapshot, split_held
from osumem.memory.rows import AddContext, NamespaceData, StepRow, stored_row

#: Another writer's edit of at most this many steps is read as those steps.
_FEW_CHANGED = 64


class NamespaceCache:
    """The loaded namespaces of one store.

    ``on_forget(namespace)`` is called whenever a namespace's cached steps are dropped
    (``None``: all of them), so what was built from them (retrievers) goes too.
    """

    def __init__(self, store: MemoryStore, on_forget: Callable[[str | None], None]) -> None:
        self.store = store
        self._on_forget = on_forget
        self._buffers: dict[str, NamespaceBuffer] = {}
        self._counts: dict[str, tuple[int, int]] = {}  # namespace -> (steps, user steps)
        self._edits: dict[str, int] = {}  # namespace -> the store's edit count when loaded
        self._starts: dict[str, int] = {}  # namespace -> first position of the add just written
        self._version = store.data_version()
        #: the namespaces whose cached steps the last :meth:`refresh` changed
        self.changed: set[str] = set()

    def refresh(self, data_version: int | None = None) -> bool:
        """Bring the cached namespaces up to what other writers committed: new steps
        are appended to the cached columns (the retriever then takes them as an
        ``update`` along the stored batch ends); a namespace whose steps were deleted,
        replaced or given new metadata (its edit count moved) is read again
        (:meth:`_reload`: its retrievers are kept when only metadata changed); one that
        shrank otherwise is dropped. :attr:`changed` names the namespaces changed.
        Returns whether anything was committed since the last call. ``data_version``:
        the store's, when the caller has just read it."""
        version = self.store.data_version() if data_version is None else data_version
        self.changed = set()
        if version == self._version:
            return False
        self._version = version
        for ns in list(self._buffers):
            buf = self._buffers[ns]
            edits = self.store.edits(ns)
            if edits != self._edits.get(ns, 0):
                self.changed.add(ns)
                self._reload(ns, buf, edits)
                continue
            n = self.store.n_steps(ns)
            if n == buf.n:
                continue
            self.changed.add(ns)
            if n < buf.n:
                self.forget(ns)
                continue
            buf.extend(self.store.load(ns, start=buf.n))
        return True

    def _reload(self, namespace: str, old: NamespaceBuffer, edits: int) -> None:
        """Another writer changed stored steps of ``namespace`` (its edit count moved to
        ``edits``, read before this): its steps are read again. What was built from
        them goes, unless the steps are the old ones unchanged in everything a
        retriever reads (:meth:`NamespaceBuffer.starts_with`: only metadata or times
        changed, steps may have been added), as after this memory's own metadata
        update. An edit committed after ``edits`` was read is caught at the next
        refresh.

        One edit since this memory's last look (each edit counts one) is read from the
        namespace's ids and change times (:meth:`MemoryStore.step_versions`): when ids
        are missing, it was a delete of them (:meth:`_took_delete`); when some steps'
        change times moved, it changed those (:meth:`_took_changes`). Only the steps
        added since, and the changed ones, are read then."""
        if edits == self._edits.get(namespace, 0) + 1:
            ids, updated = self.store.step_versions(namespace)
            caught = self._took_delete(namespace, old, ids)
            if caught is None:
                caught = self._took_changes(namespace, old, ids, updated)
            if caught is not None:
                buf, content = caught
                self._took(namespace, buf, edits, rebuilt=content)
                return
        new = self._loaded(namespace)
        if new.n == 0:
            self.forget(namespace)
            return
        self._took(namespace, new, edits, rebuilt=not new.starts_with(old))

    def _took(self, namespace: str, buf: NamespaceBuffer, edits: int, rebuilt: bool) -> None:
        """Cache ``buf`` as the namespace's steps, as of its store edit count ``edits``;
        ``rebuilt``: what was built from the steps goes (their content changed)."""
        self._buffers[namespace] = buf
        self._counts.pop(namespace, None)
        self._edits[namespace] = edits
        if rebuilt:
            self._on_forget(namespace)

    def _took_delete(
        self, namespace: str, old: NamespaceBuffer, ids: NDArray[np.int64]
    ) -> tuple[NamespaceBuffer, bool] | None:
        """If the namespace's ``ids`` are those of ``old`` less some (in order), then
        any newer ones: ``old``'s steps less the missing ones, with the new ones read
        and appended (a new buffer), and ``True`` (the content changed); else
        ``None``."""
        held = old.data().step_ids
        kept = np.isin(held, ids)
        m = int(np.count_nonzero(kept))
        if m == held.shape[0] or m == 0:
            return None  # nothing deleted, or nothing left: read it all
        if not np.array_equal(ids[:m], held[kept]) or (ids[m:] <= held.max()).any():
            return None
        buf = old.without(np.flatnonzero(~kept))
        return None if not self._took_tail(namespace, buf, ids) else (buf, True)

    def _took_changes(
        self,
        namespace: str,
        old: NamespaceBuffer,
        ids: NDArray[np.int64],
        updated: NDArray[np.float64],
    ) -> tuple[NamespaceBuffer, bool] | None:
        """If the namespace's ``ids`` begin with ``old``'s and any others are newer, and
        the change times (``updated``) of at most :data:`_FEW_CHANGED` of ``old``'s
        steps moved: those steps are read. The ones whose content changed make a new
        buffer (:meth:`NamespaceBuffer.replaced`; ``True``: the content changed); the
        others only had their metadata or times replaced (written into the buffer,
        which keeps its structure). Steps added since are read and appended. Otherwise
        ``None``."""
        held = old.data()
        n = held.view.n
        if ids.shape[0] < n or not np.array_equal(ids[:n], held.step_ids):
            return None
        if ids.shape[0] > n and (ids[n:] <= held.step_ids.max()).any():
            return None
        now, was = updated[:n], held.updated
        moved = np.flatnonzero(~((now == was) | (np.isnan(now) & np.isnan(was))))
        if moved.size == 0 or moved.size > _FEW_CHANGED:
            return None  # nothing to tell what changed, or much: read it all
        rows = []
        for p in moved.tolist():
            got = self.store.load(namespace, p, p + 1)
            if got.view.n != 1 or int(got.step_ids[0]) != int(ids[p]):
                return None  # moved on meanwhile: read it all
            rows.append((p, got))
        changed = [(p, stored_row(got, 0), got.view.embeddings[0]) for p, got in rows]
        content = any(not old.same_row(p, got) for p, got in rows)
        if content:
            buf = old.replaced(changed)
        else:
            buf = old
            for p, got in rows:
                buf.set_metadata([p], got.metadata, float(got.updated[0]), got.times.tolist())
        return None if not self._took_tail(namespace, buf, ids) else (buf, content)

    def _took_tail(self, namespace: str, buf: NamespaceBuffer, ids: NDArray[np.int64]) -> bool:
        """Append to ``buf`` the steps after its own, whose ``ids`` the caller read;
        ``False`` when the store moved on meanwhile."""
        if ids.shape[0] == buf.n:
            return True
        tail = self.store.load(namespace, start=buf.n)
        if not np.array_equal(tail.step_ids, ids[buf.n :]):
            return False
        buf.extend(tail)
        return True

    def sizes(self) -> dict[str, int]:
        """The loaded namespaces and their step counts."""
        return {ns: buf.n for ns, buf in self._buffers.items()}

    def forget(self, namespace: str | None = None) -> None:
        """Drop the cached steps (of one namespace, or all)."""
        for cached in (self._buffers, self._counts, self._edits):
            if namespace is None:
                cached.clear()
            else:
                cached.pop(namespace, None)
        self._on_forget(namespace)

    def buffer(self, namespace: str) -> NamespaceBuffer:
        """The namespace's buffer, loaded from the store at first use."""
        buf = self._buffers.get(namespace)
        if buf is None:
            edits = self.store.edits(namespace)
            buf = self._loaded(namespace)
            self._buffers[namespace] = buf
            self._edits[namespace] = edits
        return buf

    def _loaded(self, namespace: str) -> NamespaceBuffer:
        """The namespace's steps read from the store, the garbage collector paused
        meanwhile (:mod:`osumem.memory.collector`: the read makes objects for every
        stored column of every step, in no reference cycle)."""
        with collector.paused():
            return NamespaceBuffer(self.store.load(namespace))

    def dropped(self, namespace: str, ids: Sequence[int], edits: int) -> None:
        """This memory deleted the steps ``ids`` of ``namespace`` (committed; ``edits``:
        the store's edit count of the namespace right after the delete): its cached
        steps become those left, as the store now holds them (the later ones moved
        down, the add batches left without steps dropped), without reading them back;
        what was built from the steps goes, as with :meth:`forget`. A new buffer: the
        old one's rows never change under a view handed out before."""
        buf = self._buffers.get(namespace)
        if buf is None:
            self.forget(namespace)
            return
        gone = np.flatnonzero(np.isin(buf.data().step_ids, np.asarray(ids, dtype=np.int64)))
        if gone.size != len(ids):  # not all of them cached: read back
            self.forget(namespace)
            return
        self._took(namespace, buf.without(gone), edits, rebuilt=True)

    def replaced(
        self, namespace: str, p: int, row: StepRow, embedding: NDArray[np.float32], edits: int
    ) -> None:
        """This memory replaced the content of the step at position ``p`` of
        ``namespace`` (committed; ``edits`` as for :meth:`dropped`): its cached steps
        become a new buffer with that row changed, without reading the namespace
        back; what was built from the steps goes, as with :meth:`forget`."""
        buf = self._buffers.get(namespace)
        if buf is None or not 0 <= p < buf.n:
            self.forget(namespace)
            return
        self._took(namespace, buf.replaced([(p, row, embedding)]), edits, rebuilt=True)

    def edited(self, namespace: str, edits: int) -> None:
        """Record this memory's own edit of ``namespace`` (a metadata change applied to
        the cached buffer in place; ``edits`` as for :meth:`dropped`), so
        :meth:`refresh` does not reload it."""
        if namespace in self._buffers:
            self._edits[namespace] = edits

    def cached(self, namespace: str) -> NamespaceBuffer | None:
        """The namespace's buffer if it is loaded."""
        return self._buffers.get(namespace)

    def data(self, namespace: str) -> NamespaceData:
        """The namespace's steps (loaded at first use)."""
        return self.buffer(namespace).data()

    def users(self, namespace: str, n_steps: int | None = None) -> int:
        """User steps stored in ``namespace`` (the subgoal segment counter), kept
        incrementally: only steps added since the last count are looked at.
        ``n_steps``: the namespace's step count, when the caller has just read it."""
        n = self.store.n_steps(namespace) if n_steps is None else n_steps
        buf = self._buffers.get(namespace)
        if buf is not None and buf.n == n:
            return buf.users
        seen, users = self._counts.get(namespace, (0, 0))
        if seen > n:
            seen, users = 0, 0
        if seen < n:
            users += self.store.count_role(namespace, "user", start=seen)
        self._counts[namespace] = (n, users)
        return users

    def held_state(
        self, namespace: str, source: str, context: AddContext | None = None
    ) -> HeldSnapshot:
        """What an add from ``source`` continues: its held messages, the namespace's
        user-step count, and the other sources' held messages with their sources
        (:mod:`osumem.memory.held`); from ``context`` when the add has read it."""
        if context is None:
            context = self.store.add_context(namespace, None)
        mine, others, of = split_held(context.held, context.held_sources, source)
        return mine, self.users(namespace, context.n_steps), others, of

    def count_added(
        self, namespace: str, users_before: int, rows: Sequence[StepRow], start: int | None
    ) -> int | None:
        """Record an add of ``rows`` just written at positions from ``start`` (inside
        the caller's transaction; ``None``: the store did not say) to a namespace that
        held ``users_before`` user steps. A loaded namespace's buffer counts the user steps it is extended with
        (:meth:`extend`, told where the rows start); the count of a namespace that is
        not loaded is recorded, and caught up from there when another writer moves it
        on. Returns the namespace's step count after the add (``None``: no rows)."""
        if not rows:
            return None
        if start is None:
            self._starts.pop(namespace, None)
            n = self.store.n_steps(namespace)
        else:
            self._starts[namespace] = start
            n = start + len(rows)
        if namespace not in self._buffers:
            self._counts[namespace] = (n, users_before + sum(r.role == "user" for r in rows))
        return n

    def extend(
        self,
        namespace: str,
        rows: Sequence[StepRow],
        embeddings: NDArray[np.float32],
        ids: Sequence[int],
    ) -> None:
        """Append committed rows to the cached namespace (the same bytes the store now
        holds, so the live view equals a reloaded one)."""
        start = self._starts.pop(namespace, None)
        buf = self._buffers.get(namespace)
        if buf is None or not rows:
            return
        if start != buf.n:
            # steps the buffer does not hold came before these (another writer, or
            # another memory on this store): reload lazily
            self.forget(namespace)
            return
        buf.extend_rows(rows, embeddings, ids)
