"""The retrievers of a :class:`~osumem.memory.Memory`, one per namespace and method,
kept up to date with the cached steps.

A namespace's retriever is built lazily at its first retrieval by replaying the
store's add-batch boundaries (``fit`` on the first batch, ``update`` on each next
one), so a reopened store answers exactly as the session that wrote it did; a stored
snapshot of the structure (:mod:`osumem.memory.snapshot`) lets it replay only the
batches after the snapshot. A causal query (``before``) gets a retriever built from
the steps before it alone.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from contextlib import suppress
from threading import Event
from typing import Any

from osumem.errors import InvalidInputError, StoreError, show_value
from osumem.memory import collector, snapshot
from osumem.memory.buffer import NamespaceBuffer
from osumem.memory.config import MemoryConfig
from osumem.memory.namespaces import NamespaceCache
from osumem.memory.rows import NamespaceData, SnapshotRow
from osumem.osu.background import BackgroundCall
from osumem.retrieve.base import Retriever

#: Most other methods a memory keeps built for ``retrieve(method=...)`` at once.
MAX_OTHER_METHODS = 4

#: An add of at least this many steps (a bulk ingest) brings the memory's own retriever
#: up to date before it returns: it pays its build, so the first retrieve after it does
#: not (see :meth:`RetrieverCache.prepare`).
PREPARE_MIN_STEPS = 512
#: A smaller add that leaves at least this many steps out of the retriever (once it is
#: built: the first add that leaves ``PREPARE_MIN_STEPS`` out builds it) replays some of
#: them (:data:`PREPARE_INCREMENT`), not waiting for a refresh unless
#: ``PREPARE_MIN_STEPS`` steps are out: a run of single adds keeps the structure within
#: about this many steps of the store, so neither an add nor the retrieve after the run
#: replays more than a bounded increment.
PREPARE_BEHIND = 64
#: How far one such add brings the retriever: the add batches ending within this many
#: steps (at least one batch).
PREPARE_INCREMENT = 16
#: A namespace whose structure was dropped by an edit (a delete, a text update, another
#: writer's edit) and needs a replay of at least this many steps to come back is rebuilt
#: on a background thread; until it is done, its retrievals answer as :data:`INTERIM`
#: does (see :meth:`RetrieverCache.sync`). Replaying 10,000 steps took 2.3–2.8 s,
#: 60,000 steps 14–16 s (``benchmarks/rebuild_after_delete.py``).
REBUILD_BACKGROUND_STEPS = 2048
#: The method that answers for a namespace while its structure is rebuilt in the
#: background: plain dense search over its current steps (no structure to rebuild).
INTERIM = "flat"


class RetrieverCache:
    """The retrievers of one method over the namespaces of a :class:`NamespaceCache`.

    Args:
        namespaces: the cached steps the retrievers are built from.
        method, params, seed: the retrieval method and its settings.
        ann_min_steps: the retrievers' HNSW threshold.
        replay_batches: rebuild along the stored add batches (else one ``fit``).
        snapshots: read and write the store's snapshots (only the memory's own method
            does: the store keeps one per namespace).
        take_ready: asked at each sync: whether to take the background work that is
            done (a similarity refresh an add went past without).
        in_background: asked when a namespace's structure was dropped by an edit:
            whether a long replay runs on a background thread (else the next call
            replays it).
    """

    def __init__(
        self,
        namespaces: NamespaceCache,
        *,
        method: str,
        params: Mapping[str, Any] | None,
        seed: int,
        ann_min_steps: int,
        replay_batches: bool,
        snapshots: bool,
        take_ready: Callable[[], bool] = lambda: True,
        in_background: Callable[[], bool] = lambda: True,
    ) -> None:
        self.namespaces = namespaces
        self.in_background = in_background
        #: whether a sync takes the background work that is done (see
        #: :attr:`Memory.take_background_work <osumem.memory.Memory.take_background_work>`)
        self.take_ready = take_ready
        self.store = namespaces.store
        self.method = method
        self.params = params
        self.seed = seed
        self.ann_min_steps = ann_min_steps
        self.replay_batches = replay_batches
        self.snapshots = snapshots and self.store.persistent and replay_batches
        self._fitted: dict[str, tuple[Retriever, int]] = {}
        self._snapshot_steps: dict[str, int] = {}  # steps the stored snapshot covers
        # per namespace: a snapshot being encoded on a background thread (the steps it
        # covers, the retriever it was read from, the call)
        self._encoding: dict[str, tuple[int, Retriever, BackgroundCall[SnapshotRow]]] = {}
        self._causal: tuple[tuple[str, int, int], Retriever] | None = None
        # per namespace: a rebuild replaying on a background thread (the call, and the
        # event that stops it between two add batches), the retriever answering
        # meanwhile (INTERIM) with the steps it holds, and the namespaces whose built
        # structure an edit dropped (their next long replay runs in the background)
        self._rebuilding: dict[str, tuple[BackgroundCall[tuple[Retriever, int]], Event]] = {}
        self._interim: dict[str, tuple[Retriever, int]] = {}
        self._edited: set[str] = set()

    def forget(self, namespace: str | None = None) -> None:
        """Drop the retrievers (of one namespace, or all); a rebuild in the background
        is stopped and its result dropped."""
        names = set(self._fitted) | set(self._rebuilding) | set(self._interim)
        dropped = names if namespace is None else {namespace}
        self._edited |= dropped  # its next long replay runs in the background
        for ns in dropped & names:
            self._stop_rebuild(ns)
        if namespace is None:
            self._fitted, self._snapshot_steps, self._encoding = {}, {}, {}
        else:
            self._fitted.pop(namespace, None)
            self._snapshot_steps.pop(namespace, None)
            self._encoding.pop(namespace, None)  # its steps may have changed: discarded
        self._causal = None

    def _stop_rebuild(self, namespace: str) -> None:
        self._interim.pop(namespace, None)
        running = self._rebuilding.pop(namespace, None)
        if running is not None:
            running[1].set()

    def rebuilding(self, namespace: str) -> bool:
        """Whether ``namespace``'s structure is being rebuilt in the background (its
        retrievals answer as :data:`INTERIM` does until it is taken)."""
        return namespace in self._rebuilding

    def rebuilt(self, namespace: str) -> bool:
        """Whether ``namespace``'s background rebuild is done, waiting to be taken."""
        running = self._rebuilding.get(namespace)
        return running is not None and not running[0].running

    def method_of(self, retriever: Retriever) -> str:
        """The method whose answer ``retriever`` gives: :data:`INTERIM` for one that
        stands in during a rebuild, else this cache's."""
        for interim, _ in self._interim.values():
            if interim is retriever:
                return INTERIM
        return self.method

    def close(self) -> None:
        """Stop the rebuilds running in the background (their results dropped)."""
        for namespace in list(self._rebuilding):
            self._stop_rebuild(namespace)

    def snapshot_steps(self, namespace: str) -> int:
        """The steps of the stored snapshot this cache loaded or wrote for
        ``namespace`` (0: none)."""
        return self._snapshot_steps.get(namespace, 0)

    def drop_causal(self) -> None:
        """Forget the kept causal retriever (another writer committed)."""
        self._causal = None

    def new(self, namespace: str | None = None) -> Retriever:
        """A fresh retriever of the method, seed and ANN threshold; for ``namespace``,
        its flat ranking of large memories comes from the store's vector index when the
        store has one (:meth:`MemoryStore.nearest
        <osumem.memory.backends.base.MemoryStore.nearest>`)."""
        from osumem.retrieve.registry import create

        retriever = create(self.method, self.params, seed=self.seed)
        retriever.ann_min_steps = self.ann_min_steps
        # the memory's queries never wait for an index build (wait_ready() does)
        retriever.step_index.background = True
        if namespace is not None:
            retriever.step_index.source = self.store.nearest(namespace)
        return retriever

    def sync(
        self,
        namespace: str,
        *,
        wait: bool = True,
        most: int | None = None,
        background: bool = True,
    ) -> Retriever | None:
        """The namespace's retriever, brought up to date (``None`` while it is empty).
        ``wait=False``: only as far as it gets without waiting for background work (the
        replay stops before an add batch whose update would wait for a similarity
        refresh still being computed); ``most``: by at most the add batches ending
        within that many more steps (at least one batch). The next call goes on from
        where either stopped.

        A namespace whose built structure an edit dropped (:meth:`forget`) and that
        needs a replay of at least :data:`REBUILD_BACKGROUND_STEPS` steps (from its
        snapshot, or from nothing) is replayed on a background thread when the cache
        rebuilds in the background (``in_background``) and ``background`` allows it;
        until the replay is done and taken, this returns the :data:`INTERIM` retriever
        over the namespace's current steps. The call that takes it replays the steps
        added meanwhile (in the background again when they are that many)."""
        data = self.namespaces.data(namespace)
        if data.view.n == 0:
            return None
        retriever, fitted = self._fitted.get(namespace, (None, 0))
        long_replay = namespace in self._edited
        if retriever is None and namespace in self._rebuilding:
            rebuilt = self._take_rebuild(namespace, wait=not background)
            if rebuilt is None:
                return self._stand_in(namespace, data)
            retriever, fitted = rebuilt
            long_replay = True  # the steps added while it ran, when they are many
        elif retriever is None:
            retriever, fitted = self._restore(namespace, data)
        if (
            long_replay
            and background
            and data.view.n - fitted >= REBUILD_BACKGROUND_STEPS
            and self.in_background()
        ):
            self._start_rebuild(namespace, data, retriever, fitted)
            return self._stand_in(namespace, data)
        self._edited.discard(namespace)
        upto = data.view.n
        if most is not None and fitted:
            upto = _batch_end_within(data.batch_ends, fitted, most, upto)
        retriever, fitted = self._replay(namespace, data, upto, retriever, fitted, wait=wait)
        if self.take_ready():
            retriever.apply_ready()
        self._fitted[namespace] = (retriever, fitted)
        if not self.store.in_transaction:
            self.save_snapshot(namespace, force=False)
        return retriever

    def prepare(self, namespace: str, n_steps: int | None = None, *, added: int = 0) -> None:
        """Called after an add of ``added`` steps: an add of at least
        :data:`PREPARE_MIN_STEPS` steps (a bulk ingest) brings the namespace's retriever
        up to date whatever it waits for, so the next retrieve does not build. After a
        smaller add that leaves at least :data:`PREPARE_BEHIND` steps out of the
        retriever (once built: a namespace this memory has not built yet is built by the
        first add that leaves :data:`PREPARE_MIN_STEPS` out, so a process that only
        adds to a small stored namespace loads nothing), it replays the add batches
        ending within :data:`PREPARE_INCREMENT` steps, as far as it gets without
        waiting for background work: a run of small adds in a tight loop pays the
        replay in small increments, and does not stall on a similarity refresh that the
        replay makes due (the next prepare, retrieve or :meth:`wait_ready` goes on).
        Once :data:`PREPARE_MIN_STEPS` steps are out of the built retriever (adds that
        outrun the refreshes), the add replays its increment whatever it waits for: the
        adds wait for the refreshes rather than leave an unbounded replay, and the
        refreshes it waits for, to the next retrieve. ``n_steps``: the namespace's step
        count when the caller knows it (else it is read)."""
        buf = self.namespaces.cached(namespace)
        if buf is not None:
            n_steps = buf.n
        elif n_steps is None:
            n_steps = self.store.n_steps(namespace)
        retriever, fitted = self._fitted.get(namespace, (None, 0))
        if added >= PREPARE_MIN_STEPS:
            self.sync(namespace)
            return
        behind = n_steps - fitted
        if retriever is None:  # built by a retrieve, or by the add that leaves this many out
            if behind >= PREPARE_MIN_STEPS:
                self.sync(namespace, wait=False, most=PREPARE_INCREMENT)
            return
        if behind < PREPARE_BEHIND:
            return
        if behind >= PREPARE_MIN_STEPS:
            self.sync(namespace, most=PREPARE_INCREMENT)  # the adds outran the refreshes
        elif not retriever.update_waits(fitted + 1):  # else a later call's (a refresh)
            self.sync(namespace, wait=False, most=PREPARE_INCREMENT)  # never waiting

    def _start_rebuild(
        self, namespace: str, data: NamespaceData, retriever: Retriever | None, fitted: int
    ) -> None:
        """Replay ``namespace`` from ``fitted`` steps (``retriever``: restored from its
        snapshot; ``None``: from nothing) up to its current steps, on a background
        thread. The replay reads the namespace's buffer as it is now: its rows only
        ever grow at the end (an edit makes a new buffer), so steps added meanwhile are
        replayed by the sync that takes the result."""
        self._edited.discard(namespace)
        upto, buf = data.view.n, self.namespaces.buffer(namespace)
        start = self.new(namespace) if retriever is None else retriever
        stop = Event()

        def rebuild() -> tuple[Retriever, int]:
            return self._replay(namespace, data, upto, start, fitted, buf, stop=stop)

        self._rebuilding[namespace] = (BackgroundCall(rebuild, "osumem-rebuild"), stop)

    def _take_rebuild(self, namespace: str, *, wait: bool) -> tuple[Retriever, int] | None:
        """``namespace``'s rebuilt retriever and the steps it covers, once the rebuild
        is done (``wait``: wait for it; without it, only when finished and this cache
        takes finished background work); ``None`` when not taken."""
        running = self._rebuilding.get(namespace)
        if running is None:
            return None
        call, stop = running
        if not wait and (call.running or not self.take_ready()):
            return None
        try:
            rebuilt = call.result()
        finally:
            if self._rebuilding.get(namespace) is running:
                del self._rebuilding[namespace]
                self._interim.pop(namespace, None)
        return None if stop.is_set() else rebuilt

    def _stand_in(self, namespace: str, data: NamespaceData) -> Retriever:
        """The :data:`INTERIM` retriever answering for ``namespace`` while its structure
        is rebuilt, brought up to its current steps."""
        held = self._interim.get(namespace)
        if held is None:
            from osumem.retrieve.registry import create

            interim = create(INTERIM, None, seed=self.seed)
            # every step scanned (or the store's own vector index): an HNSW index
            # built for a stand-in costs more CPU than its scans over the rebuild
            interim.ann_min_steps = 2**62
            interim.step_index.source = self.store.nearest(namespace)
            held = (interim.fit(data.view), data.view.n)
        elif held[1] != data.view.n:
            held = (held[0].update(data.view), data.view.n)
        self._interim[namespace] = held
        return held[0]

    def wait_ready(self) -> None:
        """Bring every built retriever up to date with its namespace's steps (the adds
        an after-add :meth:`prepare` left) and wait for its background index builds
        (and for the rebuilds running in the background, which it takes)."""
        for namespace in list(self._rebuilding):
            self.sync(namespace, background=False)  # the rebuild taken, then the rest
        for namespace in list(self._fitted):
            buf = self.namespaces.cached(namespace)
            if buf is not None and buf.n > self._fitted[namespace][1]:
                self.sync(namespace, background=False)
        for retriever, _ in self._fitted.values():
            retriever.wait_ready()
        if self._causal is not None:
            self._causal[1].wait_ready()
        if not self.store.in_transaction:
            for namespace in list(self._encoding):
                self._store_encoded(namespace, wait=True)

    def causal(self, namespace: str, before: int) -> Retriever:
        """A retriever built from the steps before ``before`` only (no later step can
        shape its OSUs, tree or partitions); the last one is kept for repeated calls."""
        data = self.namespaces.data(namespace)
        key = (namespace, before, data.view.n)
        if self._causal is not None and self._causal[0] == key:
            return self._causal[1]
        retriever, _ = self._replay(namespace, data, before)
        self._causal = (key, retriever)
        return retriever

    def _restore(self, namespace: str, data: NamespaceData) -> tuple[Retriever | None, int]:
        """A retriever loaded from the namespace's stored snapshot and the steps it
        covers, or ``(None, 0)`` when there is none that matches."""
        self._snapshot_steps[namespace] = 0
        if not self.snapshots:
            return None, 0
        row = self.store.snapshot(namespace)
        if row is None or not 0 < row.steps <= data.view.n:
            return None, 0
        retriever = self.new(namespace)
        n = row.steps
        buf = self.namespaces.buffer(namespace)
        view = data.view.prefix(n) if n == data.view.n else buf.prefix_view(n)
        with collector.paused():  # the units' member tuples, one per unit
            restored = snapshot.restore(retriever, row, data, view)
        if not restored:
            return None, 0
        self._snapshot_steps[namespace] = n
        return retriever, n

    def save_snapshot(self, namespace: str, *, force: bool) -> None:
        """Store a snapshot of the namespace's retriever when one is due (``force``:
        whenever it covers more than the stored one); a busy or read-only store skips
        it. A due one is encoded on a background thread (the retrieve or add that made
        it due reads the state and goes on) and stored by the first call here after
        the encoding is done; ``force`` (at close) encodes and stores it now."""
        if not self.snapshots or self.store.read_only:
            return
        retriever, fitted = self._fitted.get(namespace, (None, 0))
        buf = self.namespaces.cached(namespace)
        if retriever is None or buf is None or buf.n < fitted or not snapshot.supports(retriever):
            return
        if force:
            self._encoding.pop(namespace, None)  # this one covers at least as much
        else:
            self._store_encoded(namespace, wait=False)
        last = self._snapshot_steps.get(namespace, 0)
        if fitted <= last or not (force or snapshot.due(fitted, last)):
            return
        if force:
            row = snapshot.encode(retriever, buf.data(), fitted)
            if self.store.save_snapshot(namespace, row):
                self._snapshot_steps[namespace] = fitted
        elif namespace not in self._encoding:  # one at a time per namespace
            finish = snapshot.gather(retriever, buf.data(), fitted)
            call = BackgroundCall(finish, "osumem-snapshot")
            self._encoding[namespace] = (fitted, retriever, call)

    def _store_encoded(self, namespace: str, *, wait: bool) -> None:
        """Store the namespace's snapshot encoded in the background, once it is done
        (``wait``: wait for it); one read from a retriever this cache no longer holds
        for the namespace, or that failed, is dropped (a snapshot is a cache)."""
        pending = self._encoding.get(namespace)
        if pending is None or (pending[2].running and not wait):
            return
        if self._encoding.pop(namespace, None) is not pending:
            return  # another thread took it
        steps, source, call = pending
        try:
            row = call.result()
        except (ValueError, OSError, MemoryError):  # a snapshot is a cache: replay instead
            return
        held = self._fitted.get(namespace)
        if held is None or held[0] is not source or steps <= self._snapshot_steps.get(namespace, 0):
            return
        if self.store.save_snapshot(namespace, row):
            self._snapshot_steps[namespace] = steps

    def save_all(self) -> None:
        """Snapshots of every retriever built in this session that covers more than the
        stored one (at close; a snapshot is a cache: nothing here fails a close)."""
        for namespace in list(self._fitted):
            with suppress(StoreError, ValueError, OSError, MemoryError):
                self.save_snapshot(namespace, force=True)

    def built_from(self, data: NamespaceData) -> Retriever:
        """A new retriever over ``data`` alone (e.g. the steps that pass a filter, in
        their add batches), replayed as a memory holding only them would be."""
        retriever = self.new()
        retriever.defer_refresh = False  # built once for its query, never synced again
        retriever, _ = self._replay("", data, data.view.n, retriever, buf=NamespaceBuffer(data))
        return retriever

    def _replay(
        self,
        namespace: str,
        data: NamespaceData,
        upto: int,
        retriever: Retriever | None = None,
        fitted: int = 0,
        buf: NamespaceBuffer | None = None,
        *,
        wait: bool = True,
        stop: Event | None = None,
    ) -> tuple[Retriever, int]:
        """Bring ``retriever`` (a new one when ``None``) from ``fitted`` steps up to
        ``upto`` along the stored add boundaries, as the writing session did (over the
        namespace's buffer, or ``buf``); ``wait=False``: stop before an update that
        would wait for background work (see :meth:`sync`); ``stop``: stop between two
        batches once it is set."""
        if retriever is None:
            retriever = self.new(namespace)
        ends = data.batch_ends if self.replay_batches or fitted else (data.view.n,)
        if type(retriever).update is Retriever.update:
            ends = ()  # its update is a fresh fit: one fit of the prefix is the same state
        if buf is None:
            buf = self.namespaces.buffer(namespace)
        # the ends strictly between fitted and upto (increasing: found by bisection,
        # not by a pass over every batch of the namespace at each query)
        inside = ends[bisect.bisect_right(ends, fitted) : bisect.bisect_left(ends, upto)]
        for end in [*inside, upto]:
            if end <= fitted:
                continue
            if (not wait and fitted and retriever.update_waits(end)) or (
                stop is not None and stop.is_set()
            ):
                break
            # intermediate batches go through copy-free prefix views; the last one is
            # a plain view, which the retriever keeps
            v = data.view.prefix(end) if end == upto else buf.prefix_view(end)
            retriever = retriever.fit(v) if fitted == 0 else retriever.update(v)
            fitted = end
        return retriever, fitted


def _batch_end_within(ends: tuple[int, ...], fitted: int, most: int, n: int) -> int:
    """The last add-batch end at most ``most`` steps past ``fitted`` (the first end
    after ``fitted`` when that one is further), at most ``n``."""
    i = bisect.bisect_right(ends, fitted + most)
    if i == 0 or ends[i - 1] <= fitted:
        i = bisect.bisect_right(ends, fitted) + 1
    return min(n, ends[i - 1]) if 0 < i <= len(ends) else n


class MethodCaches:
    """The retriever caches of one memory over ``namespaces``: its own method's
    (:attr:`own`, with snapshots) and those of other methods asked for by
    ``retrieve(method=...)`` (their default parameters, no snapshots, at most
    :data:`MAX_OTHER_METHODS` kept, the oldest dropped first)."""

    def __init__(self, namespaces: NamespaceCache, config: MemoryConfig) -> None:
        self.namespaces = namespaces
        self.config = config
        #: whether syncs take the background work that is done (every cache asks this)
        self.take_ready = True
        #: whether a long replay after an edit runs in the background (every cache asks)
        self.rebuild_in_background = True
        self.own = self._new(config.method, config.params, snapshots=True)
        self._others: dict[str, RetrieverCache] = {}  # newest last

    def _new(
        self, method: str, params: Mapping[str, Any] | None, *, snapshots: bool
    ) -> RetrieverCache:
        cfg = self.config
        return RetrieverCache(
            self.namespaces,
            method=method,
            params=params,
            seed=cfg.seed,
            ann_min_steps=cfg.ann_min_steps,
            replay_batches=cfg.replay_batches,
            snapshots=snapshots,
            take_ready=lambda: self.take_ready,
            in_background=lambda: self.rebuild_in_background,
        )

    def cache(self, method: str | None) -> RetrieverCache:
        """The retrievers of ``method`` (``None``: the memory's own)."""
        if method is None or method == self.config.method:
            return self.own
        if not isinstance(method, str):
            raise InvalidInputError(f"method: expected a method name, got {show_value(method)}")
        found = self._others.pop(method, None)
        if found is None:
            from osumem.retrieve.registry import make_config

            make_config(method, None)  # an unknown method fails here, typed
            found = self._new(method, None, snapshots=False)
            while len(self._others) >= MAX_OTHER_METHODS:
                self._others.pop(next(iter(self._others))).close()
        self._others[method] = found
        return found

    def forget(self, namespace: str | None) -> None:
        """Drop the retrievers of ``namespace`` (``None``: all) in every cache."""
        for c in (self.own, *self._others.values()):
            c.forget(namespace)

    def drop_causal(self) -> None:
        """Forget every kept causal retriever (another writer committed)."""
        for c in (self.own, *self._others.values()):
            c.drop_causal()

    def wait_ready(self) -> None:
        """Wait for the background index builds of every cached retriever."""
        for c in (self.own, *self._others.values()):
            c.wait_ready()

    def close(self) -> None:
        """Stop every cache's rebuilds running in the background."""
        for c in (self.own, *self._others.values()):
            c.close()
