"""One long-lived memory shared by many concurrent requests.

Why this shape: :class:`~osumem.memory.Memory` keeps per-namespace caches (the columnar
view, the retriever and its lazily derived structures) that are not safe to mutate from
several threads, and its SQLite connection may only be used by the thread that opened
it. So a :class:`MemoryService` runs

- every call that touches the store (adds, first loads of a namespace, deletes, listing)
  on **one store thread**, the single writer, holding the exclusive side of a
  readers-writer lock while it changes the in-memory state; an add is returned (and so
  acknowledged) only after its transaction committed and the namespace's retriever was
  brought up to date;
- every retrieval on a pool of **reader threads**, holding the shared side of the lock,
  against namespaces the store thread has already loaded and synchronised ("warm"), so a
  retrieval only reads in-memory structures (and the store's change counter).

Other writers (other servers on one Postgres database, or a process writing the same
SQLite file) are followed: before answering, a retrieval compares the store's change
counter with the one the service last caught up with; when another writer committed,
the store thread brings every loaded namespace up to date under the exclusive lock
first, so an add acknowledged by any server is in every server's next answer.

Query encoding (the bulk of a text retrieval) runs in the reader threads too, so reads
overlap each other and wait for a write only while it commits and updates the index.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from osumem.errors import BudgetError, InvalidInputError
from osumem.frozen import Boolean, Constraints, FrozenConfig, Interval
from osumem.memory import DEFAULT_NAMESPACE, Memory, MemoryConfig, Retrieved, contents, export
from osumem.memory.blas import blas_threads
from osumem.memory.retrieved import StoredStep
from osumem.memory.validate import text_message
from osumem.retrieve.budget import validated_budget
from osumem.serve.threads import ReadWriteLock, SerializedEncoder, set_torch_threads

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class ServiceLimits(FrozenConfig):
    """Bounds on what one request may ask (all keyword-only, validated on construction:
    every bad value is reported at once in one :class:`~osumem.errors.ConfigError`).

    Attributes:
        max_budget: largest token budget of a retrieval.
        max_messages: most messages in one add.
        max_query_chars: longest query text, in characters.
        max_body_bytes: largest HTTP request body, in bytes (larger: HTTP 413).
        max_methods: most retrieval methods other than the default kept built at once.
    """

    max_budget: int = 32_768
    max_messages: int = 1_000
    max_query_chars: int = 10_000
    max_body_bytes: int = 4 * 1024 * 1024
    max_methods: int = 4

    config_name = "ServiceLimits"
    parameter_constraints: ClassVar[Constraints] = {
        **dict.fromkeys(
            ("max_budget", "max_messages", "max_query_chars", "max_body_bytes"),
            Interval(int, 1, None),
        ),
        "max_methods": Interval(int, 0, None),
    }


@dataclass(frozen=True, kw_only=True)
class ServiceThreads(FrozenConfig):
    """The threads of a :class:`MemoryService` (see its arguments)."""

    readers: int = 4
    torch_threads: int | None = 1
    inline_reads: bool = False

    config_name = "MemoryService"
    parameter_constraints: ClassVar[Constraints] = {
        "readers": Interval(int, 1, None),
        "torch_threads": (Interval(int, 1, None), None),
        "inline_reads": Boolean(),
    }


@dataclass(frozen=True)
class AddResult:
    """What an acknowledged add returns: the new step ids (committed) and counts."""

    namespace: str
    step_ids: list[int]
    steps_in_namespace: int
    held_messages: int


class MemoryService:
    """A thread-safe front of one :class:`Memory` for servers (see the module doc).

    Args:
        path: the store: a SQLite file or a ``postgresql://`` URL (created if missing);
            ``None`` keeps the memory in RAM.
        encoder: encoder name or path as :meth:`Memory.open` takes it (``None``: the
            store's own, SBERT for a new store); loaded once, at start.
        method: the default retrieval method.
        readers: reader threads (concurrent retrievals).
        limits: request bounds.
        torch_threads: torch's intra-op threads once the encoder is loaded (``None``:
            leave torch's default). One thread per request is the default: requests
            run side by side on the reader threads, and on a busy machine torch's
            default pool is many times slower per query (see docs/decisions.md).
        inline_reads: answer an async retrieval (:meth:`aretrieve`, so every HTTP and
            MCP one) in the event loop's own thread when that needs no wait (the
            namespace is loaded, no write holds or waits for the lock, no other writer
            committed since the caches caught up), else on a reader thread. It saves
            the hand-off to a reader thread and back and the reader threads' contention
            for the interpreter lock, but holds up the event loop for the retrieval's
            length. Off by default: on two cores it cut the server's CPU per retrieval
            by 12-30% under a retrieve-only load and made no measurable difference
            under a load with a quarter adds, and a model encoder's query encoding runs
            outside the interpreter lock, where reader threads overlap it (see
            docs/decisions.md).
        memory_settings: other :class:`~osumem.memory.MemoryConfig` fields.
    """

    def __init__(
        self,
        path: str | Path | None,
        *,
        encoder: str | None = None,
        method: str = "osumem",
        readers: int = 4,
        limits: ServiceLimits | None = None,
        torch_threads: int | None = 1,
        inline_reads: bool = False,
        **memory_settings: Any,
    ) -> None:
        threads = ServiceThreads(
            readers=readers, torch_threads=torch_threads, inline_reads=inline_reads
        )
        self._torch_threads = threads.torch_threads
        self.limits = limits or ServiceLimits()
        self.path: Path | str | None = (
            path if path is None or (isinstance(path, str) and "://" in path) else Path(path)
        )
        self._settings = dict(memory_settings)
        self._lock = ReadWriteLock()
        self._store = ThreadPoolExecutor(max_workers=1, thread_name_prefix="osumem-store")
        self._readers = ThreadPoolExecutor(
            max_workers=threads.readers,
            thread_name_prefix="osumem-read",
            initializer=lambda: set_torch_threads(self._torch_threads),  # per thread
        )
        #: whether :meth:`aretrieve` answers in the caller's thread when it can
        self.inline_reads = threads.inline_reads
        self._warm: set[str] = set()
        self._pending_adds: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._generation: dict[str, int] = {}  # namespace -> number of writes seen
        self._others: dict[str, tuple[Memory, dict[str, int]]] = {}  # method -> memory
        self._closed = False
        self._encoder_to_close: Any = None
        self._encoder_id = ""
        self._followed = 0  # the store's change counter the caches last caught up with
        try:
            self.memory: Memory = self._on_store(
                lambda: self._open(encoder, method, memory_settings)
            ).result()
            self.memory.follow_writers = False  # the service catches up itself
            # readers share its structures: background work is taken under the
            # exclusive lock (the service's writes), never by a retrieve
            self.memory.take_background_work = False
            self._followed = self._on_store(self.memory.store.data_version).result()
        except BaseException:
            self._store.shutdown(wait=True)
            self._readers.shutdown(wait=True)
            raise

    # --- set-up -----------------------------------------------------------------------

    def _open(self, encoder: str | None, method: str, settings: Mapping[str, Any]) -> Memory:
        opened = Memory.open(self.path, encoder=encoder, method=method, **settings)
        try:
            enc = opened.encoder  # loaded now, once, not at the first request
            set_torch_threads(self._torch_threads)
            self._encoder_id = enc.encoder_id if enc is not None else opened.store.encoder_id
            if enc is None:
                return opened
            self._encoder_to_close = enc
            shared = SerializedEncoder(enc)
            shared.encode(["warm up"])
            # the same store and settings, with the encoder behind one lock
            return Memory(opened.store, shared, opened.config)
        except BaseException:
            opened.close()
            raise

    def _on_store(self, fn: Callable[[], T]) -> Future[T]:
        if self._closed:
            raise RuntimeError("the memory service is closed")
        return self._store.submit(fn)

    @property
    def method(self) -> str:
        """The default retrieval method."""
        return self.memory.config.method

    @property
    def encoder_id(self) -> str:
        """The encoder's id ("" when the store has none)."""
        return self._encoder_id

    # --- synchronous API (blocking; any thread) --------------------------------------------

    def add_messages(
        self,
        namespace: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        source: str | None = None,
        prefix_namespace: bool | None = None,
        hold_open_calls: bool = True,
        on_duplicate: str | None = None,
        log_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AddResult:
        """Append OpenAI-format messages to ``namespace``; returns once committed (the
        options as :meth:`Memory.add_messages` takes them).

        Raises the memory's typed errors (nothing is written then).
        """
        options = {
            "source": source,
            "prefix_namespace": prefix_namespace,
            "hold_open_calls": hold_open_calls,
            "on_duplicate": on_duplicate,
            "log_id": log_id,
            "metadata": metadata,
        }
        return self._add(namespace, messages, options).result()

    def add(
        self,
        text: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        role: str = "user",
        metadata: Mapping[str, Any] | None = None,
        source: str | None = None,
        on_duplicate: str | None = None,
        log_id: str | None = None,
    ) -> AddResult:
        """Store one text as a user or assistant step, as :meth:`Memory.add` does;
        returns once committed."""
        return self._add_text(
            text, namespace, role, metadata, source, on_duplicate, log_id
        ).result()

    def delete(
        self,
        namespace: str,
        positions: int | Sequence[int] | None = None,
        *,
        ids: int | Sequence[int] | None = None,
    ) -> list[int]:
        """Delete steps of ``namespace`` by ``positions`` or ``ids``, as
        :meth:`Memory.delete` does; returns the ids deleted. ``delete(namespace)``
        alone is the deprecated spelling of :meth:`delete_namespace` (for one release)."""
        if positions is None and ids is None:
            _deprecated("MemoryService.delete(namespace)", "MemoryService.delete_namespace")
            return self.delete_namespace(namespace)  # type: ignore[return-value]
        return self._edit(namespace, lambda mem: mem.delete(namespace, positions, ids=ids)).result()

    def update(
        self,
        namespace: str,
        position: int | None = None,
        *,
        id: int | None = None,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> StoredStep:
        """Change one step's text or metadata, as :meth:`Memory.update` does; returns
        the step as stored now."""
        return self._update_future(namespace, position, id, text, metadata).result()

    def retrieve(
        self,
        query: str,
        budget: int | None = None,
        *old: Any,
        namespace: str = DEFAULT_NAMESPACE,
        method: str | None = None,
        explain: bool = False,
        filter: Mapping[str, Any] | None = None,
    ) -> Retrieved:
        """The memory's answer for ``query`` in ``namespace`` under ``budget`` tokens
        (default: the memory's), with ``method`` (default: the service's): the
        signature of ``Memory.retrieve`` and ``MemoryClient.retrieve``. Equal to
        ``Memory.retrieve`` on a memory opened with that method over the same store.
        With ``explain``, the result's explanation is computed too (while no write can
        change the structure it explains); ``filter`` as :meth:`Memory.retrieve` takes
        it.

        The spelling of earlier releases, ``retrieve(namespace, query, budget[,
        method])``, still works for one release (a DeprecationWarning)."""
        query, budget, namespace, method = _retrieve_args(
            "MemoryService.retrieve", query, budget, old, namespace, method
        )
        with validated_budget(self.memory.config.budget if budget is None else budget) as b:
            self._check_retrieve(query, b)
            name = self.method if method is None or method == "" else str(method)
            while True:
                mem = self._ready(namespace, name)
                self._lock.acquire_read()
                try:
                    current = self._followed_now()
                except BaseException:
                    self._lock.release_read()
                    raise
                if current and self._is_warm(mem, namespace, name):
                    break
                self._lock.release_read()  # a write got in between: warm it again
                if not current:
                    self._on_store(self._catch_up).result()
            return self._answer_and_release(mem, query, b, namespace, explain, filter)

    def namespaces(self) -> list[str]:
        """Namespaces holding steps or held messages, sorted."""
        return self._on_store(lambda: self.memory.namespaces()).result()

    def n_steps(self, namespace: str) -> int:
        """Number of steps stored in ``namespace``."""
        return self._on_store(lambda: self.memory.n_steps(namespace)).result()

    def delete_namespace(self, namespace: str = DEFAULT_NAMESPACE) -> int:
        """Delete every step and held message of ``namespace`` (one transaction);
        returns the number of steps deleted (0 for an unknown namespace)."""
        return self._delete_future(namespace).result()

    def steps_of(
        self,
        namespace: str,
        *,
        positions: int | Sequence[int] | None = None,
        ids: int | Sequence[int] | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[StoredStep]:
        """The stored steps of ``namespace`` with their metadata, as
        :meth:`Memory.steps` lists them."""
        return self._on_store(
            lambda: self.memory.steps(namespace, positions=positions, ids=ids, filter=filter)
        ).result()

    def namespace_info(self) -> list[dict[str, Any]]:
        """Every namespace with its step count and held messages
        (:func:`osumem.memory.contents.namespace_info`)."""
        return self._on_store(lambda: contents.namespace_info(self.memory)).result()

    def steps(self, namespace: str, **options: Any) -> dict[str, Any]:
        """The steps of ``namespace`` with their units, as
        :func:`osumem.memory.contents.step_records` takes ``options``."""
        return self._on_store(
            lambda: contents.step_records(self._followed_primary(namespace), namespace, **options)
        ).result()

    def page_data(self, namespace: str, **options: Any) -> dict[str, Any]:
        """The viewer page's data of ``namespace`` (no query: the page asks
        :meth:`retrieve` for one), see :func:`osumem.memory.contents.page_data`."""
        return self._on_store(
            lambda: contents.page_data(self._followed_primary(namespace), namespace, **options)
        ).result()

    def export_lines(
        self, namespaces: Sequence[str] | None = None, *, embeddings: bool = True
    ) -> list[str]:
        """The export of ``namespaces`` (default: all) as JSON lines
        (:func:`osumem.memory.export.export_lines`), read on the store thread."""
        return self._on_store(
            lambda: list(export.export_lines(self.memory, namespaces, embeddings=embeddings))
        ).result()

    def import_lines(
        self, lines: Sequence[str], *, replace: bool = False, where: str = "request body"
    ) -> export.ImportSummary:
        """Import an export (its lines) in one transaction, as
        :func:`osumem.memory.export.import_export` does; the namespaces it writes are
        dropped from every cache before readers see them."""
        return self._import_future(lines, replace, where).result()

    # --- asynchronous API (for the HTTP and MCP faces) --------------------------------------

    async def aadd_messages(
        self,
        namespace: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        source: str | None = None,
        prefix_namespace: bool | None = None,
        hold_open_calls: bool = True,
        on_duplicate: str | None = None,
        log_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AddResult:
        """:meth:`add_messages` without blocking the event loop."""
        options = {
            "source": source,
            "prefix_namespace": prefix_namespace,
            "hold_open_calls": hold_open_calls,
            "on_duplicate": on_duplicate,
            "log_id": log_id,
            "metadata": metadata,
        }
        fut = self._add(namespace, messages, options)
        return await asyncio.wrap_future(fut)

    async def aretrieve(
        self,
        query: str,
        budget: int | None = None,
        *old: Any,
        namespace: str = DEFAULT_NAMESPACE,
        method: str | None = None,
        explain: bool = False,
        filter: Mapping[str, Any] | None = None,
    ) -> Retrieved:
        """:meth:`retrieve` for the event loop: on a reader thread, or in the loop's own
        thread when :attr:`inline_reads` is on and it needs no wait."""
        query, budget, namespace, method = _retrieve_args(
            "MemoryService.aretrieve", query, budget, old, namespace, method
        )
        if self._closed:
            raise RuntimeError("the memory service is closed")
        if self.inline_reads:
            done = self._retrieve_now(query, budget, namespace, method, explain, filter)
            if done is not None:
                return done
        fut = self._readers.submit(
            functools.partial(
                self.retrieve,
                query,
                budget,
                namespace=namespace,
                method=method,
                explain=explain,
                filter=filter,
            )
        )
        return await asyncio.wrap_future(fut)

    async def anamespaces(self) -> list[str]:
        """:meth:`namespaces` without blocking the event loop."""
        return await asyncio.wrap_future(self._on_store(lambda: self.memory.namespaces()))

    async def adelete_namespace(self, namespace: str = DEFAULT_NAMESPACE) -> int:
        """:meth:`delete_namespace` without blocking the event loop."""
        return await asyncio.wrap_future(self._delete_future(namespace))

    async def adelete(
        self,
        namespace: str,
        positions: int | Sequence[int] | None = None,
        *,
        ids: int | Sequence[int] | None = None,
    ) -> list[int]:
        """:meth:`delete` without blocking the event loop (``adelete(namespace)`` alone:
        the deprecated spelling of :meth:`adelete_namespace`)."""
        if positions is None and ids is None:
            _deprecated("MemoryService.adelete(namespace)", "MemoryService.adelete_namespace")
            return await self.adelete_namespace(namespace)  # type: ignore[return-value]
        fut = self._edit(namespace, lambda mem: mem.delete(namespace, positions, ids=ids))
        return await asyncio.wrap_future(fut)

    async def aadd(
        self,
        text: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        role: str = "user",
        metadata: Mapping[str, Any] | None = None,
        source: str | None = None,
        on_duplicate: str | None = None,
        log_id: str | None = None,
    ) -> AddResult:
        """:meth:`add` without blocking the event loop."""
        fut = self._add_text(text, namespace, role, metadata, source, on_duplicate, log_id)
        return await asyncio.wrap_future(fut)

    async def aupdate(
        self,
        namespace: str,
        position: int | None = None,
        *,
        id: int | None = None,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> StoredStep:
        """:meth:`update` without blocking the event loop."""
        return await asyncio.wrap_future(
            self._update_future(namespace, position, id, text, metadata)
        )

    async def asteps_of(
        self,
        namespace: str,
        *,
        positions: int | Sequence[int] | None = None,
        ids: int | Sequence[int] | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[StoredStep]:
        """:meth:`steps_of` without blocking the event loop."""
        fut = self._on_store(
            lambda: self.memory.steps(namespace, positions=positions, ids=ids, filter=filter)
        )
        return await asyncio.wrap_future(fut)

    async def acall(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """One of the blocking reading or import methods (``namespace_info``,
        ``n_steps``, ``steps``, ``page_data``, ``export_lines``, ``import_lines``) without blocking the
        event loop."""
        if name not in (
            "namespace_info",
            "n_steps",
            "steps",
            "page_data",
            "export_lines",
            "import_lines",
        ):
            raise AttributeError(name)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: getattr(self, name)(*args, **kwargs))

    # --- internals ------------------------------------------------------------------------

    def _add(
        self,
        namespace: str,
        messages: Sequence[Mapping[str, Any]],
        options: Mapping[str, Any],
    ) -> Future[AddResult]:
        """Queue an add (``options``: the keyword arguments of
        :meth:`Memory.add_messages`) for the store thread."""
        if isinstance(messages, Sequence) and len(messages) > self.limits.max_messages:
            raise InvalidInputError(
                f"messages: {len(messages)} messages in one add; the server accepts at most "
                f"{self.limits.max_messages}"
            )

        if self._closed:
            raise RuntimeError("the memory service is closed")
        future: Future[AddResult] = Future()
        self._pending_adds.put((namespace, messages, options, future))
        self._on_store(self._drain_adds)
        return future

    def _drain_adds(self) -> None:
        """Group commit, on the store thread: every add queued now is written in its own
        transaction and acknowledged as soon as it commits; the namespaces they touched
        are brought up to date once, at the end, before readers get in again."""
        batch = []
        while True:
            try:
                batch.append(self._pending_adds.get_nowait())
            except queue.Empty:
                break
        if not batch:
            return  # an earlier drain took them
        mem = self.memory
        touched: list[str] = []
        sizes = self._begin_write()
        try:
            for namespace, messages, options, future in batch:
                if not future.set_running_or_notify_cancel():
                    continue
                self._generation[namespace] = self._generation.get(namespace, 0) + 1
                self._warm.discard(namespace)
                if namespace not in touched:
                    touched.append(namespace)
                try:
                    ids = mem.add_messages(messages, namespace=namespace, **options)
                    result = AddResult(
                        namespace, ids, mem.n_steps(namespace), len(mem.store.pending(namespace))
                    )
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)  # committed: acknowledge now
            for namespace in touched:  # then the index, before any reader sees the steps
                self._warm_up(mem, namespace)
                self._warm.add(namespace)
        finally:
            self._end_write(sizes, keep=touched)

    def _edit(self, namespace: str, change: Callable[[Memory], T]) -> Future[T]:
        """Run ``change`` (a delete or an update of ``namespace``'s stored steps) on the
        store thread under the write lock; the namespace is warmed again at its next
        retrieval, and the memories of other methods are rebuilt for it."""

        def write() -> T:
            sizes = self._begin_write()
            try:
                self._stale(namespace)
                return change(self.memory)
            finally:
                self._end_write(sizes)

        return self._on_store(write)

    def _delete_future(self, namespace: str) -> Future[int]:
        return self._edit(namespace, lambda mem: self._delete(namespace))

    def _update_future(
        self,
        namespace: str,
        position: int | None,
        step_id: int | None,
        text: str | None,
        metadata: Mapping[str, Any] | None,
    ) -> Future[StoredStep]:
        return self._edit(
            namespace,
            lambda mem: mem.update(namespace, position, id=step_id, text=text, metadata=metadata),
        )

    def _add_text(
        self,
        text: str,
        namespace: str,
        role: str,
        metadata: Mapping[str, Any] | None,
        source: str | None,
        on_duplicate: str | None,
        log_id: str | None,
    ) -> Future[AddResult]:
        options = {
            "source": source,
            "on_duplicate": on_duplicate,
            "log_id": log_id,
            "metadata": metadata,
        }
        return self._add(namespace, [text_message(text, role)], options)

    def _import_future(
        self, lines: Sequence[str], replace: bool, where: str
    ) -> Future[export.ImportSummary]:
        data = export.read_export(lines, where, max_text_chars=self.memory.config.max_text_chars)

        def write() -> export.ImportSummary:
            sizes = self._begin_write()
            try:
                touched = [ns.name for ns in data.namespaces]
                for namespace in touched:
                    self._stale(namespace)
                for method in [
                    m for m, (_, seen) in self._others.items() if set(seen) & set(touched)
                ]:
                    self._others.pop(method)  # rebuilt on their next use
                return export.import_export(self.memory, data, replace=replace, where=where)
            finally:
                self._end_write(sizes)

        return self._on_store(write)

    # --- following other writers ------------------------------------------------------

    def _memories(self) -> list[Memory]:
        return [self.memory, *(mem for mem, _ in self._others.values())]

    def _stale(self, namespace: str) -> None:
        """``namespace`` changed: no reader may use its structures until warmed again."""
        self._generation[namespace] = self._generation.get(namespace, 0) + 1
        self._warm.discard(namespace)

    def _begin_write(self) -> dict[int, dict[str, int]]:
        """Take the exclusive lock (on the store thread); while it is held the memories
        follow other writers themselves and take the background work that is done (no
        retrieve runs). Returns what each memory has loaded."""
        self._lock.acquire_write()
        sizes = {id(mem): mem.loaded() for mem in self._memories()}
        for mem in self._memories():
            mem.follow_writers = True
            mem.take_background_work = True
        return sizes

    def _end_write(self, sizes: dict[int, dict[str, int]], keep: Sequence[str] = ()) -> None:
        """Release the exclusive lock; a loaded namespace that changed meanwhile (another
        writer's steps came in with a refresh) and that the write did not warm again
        (``keep``) is marked stale first."""
        try:
            for mem in self._memories():
                mem.follow_writers = False
                mem.take_background_work = False
                now = mem.loaded()
                for namespace, n in sizes.get(id(mem), {}).items():
                    if now.get(namespace) != n and namespace not in keep:
                        self._stale(namespace)
        finally:
            self._lock.release_write()

    def _followed_now(self) -> bool:
        """Whether the caches have caught up with every other writer's commit (a cheap
        read of the store's change counter). Called under the shared lock, or on the
        store thread: the threads share the store's connection, and a read of another
        thread running while the store thread begins a write transaction would be
        inside it, or hold an older snapshot of the file open, on which SQLite refuses
        the write at once when another process has committed since."""
        return self.memory.store.data_version() == self._followed

    def _followed_primary(self, namespace: str) -> Memory:
        """On the store thread: the primary memory caught up with other writers and
        ``namespace`` warm."""
        self._catch_up()
        return self._warm_primary(namespace)

    def _catch_up(self) -> None:
        """On the store thread: bring every loaded namespace of every memory up to what
        other writers committed, under the exclusive lock."""
        version = self.memory.store.data_version()
        if version == self._followed:
            return  # another request caught up already
        sizes = self._begin_write()
        try:
            for mem in self._memories():
                mem.refresh()
            self._followed = version
        finally:
            self._end_write(sizes)

    def _retrieve_now(
        self,
        query: str,
        budget: int | None,
        namespace: str,
        method: str | None,
        explain: bool,
        filter: Mapping[str, Any] | None,
    ) -> Retrieved | None:
        """:meth:`retrieve` in the calling thread when it needs no wait: the namespace is
        warm, no write holds or waits for the lock, and no other writer committed since
        the caches caught up; ``None`` (nothing done) otherwise."""
        with validated_budget(self.memory.config.budget if budget is None else budget) as b:
            self._check_retrieve(query, b)
            name = self.method if method is None or method == "" else str(method)
            mem = self.memory if name == self.method else self._others.get(name, (None,))[0]
            if mem is None or not self._lock.try_acquire_read():
                return None
            # Under the shared lock no write of this service is committing, so the
            # change counter is read without waiting for a commit's sync.
            try:
                ready = (
                    self._is_warm(mem, namespace, name)
                    and not mem.rebuilt(namespace)  # taken on the store thread first
                    and self.memory.store.data_version() == self._followed
                )
            except BaseException:
                self._lock.release_read()
                raise
            if not ready:
                self._lock.release_read()
                return None
            return self._answer_and_release(mem, query, b, namespace, explain, filter)

    def _answer_and_release(
        self,
        mem: Memory,
        query: str,
        budget: int,
        namespace: str,
        explain: bool,
        filter: Mapping[str, Any] | None,
    ) -> Retrieved:
        """``mem``'s answer (with its explanation when asked), taken under the shared
        lock, which is released here."""
        try:
            result = mem.retrieve(query, budget, namespace=namespace, filter=filter)
            if explain:
                result.explain()
            return result
        finally:
            self._lock.release_read()

    def _check_retrieve(self, query: Any, budget: int) -> None:
        """The service's own bounds on a query and an already validated budget."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError(f"query: expected a non-empty text, got {query!r}")
        if len(query) > self.limits.max_query_chars:
            raise InvalidInputError(
                f"query: {len(query)} characters; the server accepts at most "
                f"{self.limits.max_query_chars}"
            )
        if budget > self.limits.max_budget:
            raise BudgetError(
                f"budget: {budget} tokens; the server accepts at most {self.limits.max_budget}"
            )

    def _is_warm(self, mem: Memory, namespace: str, method: str) -> bool:
        """Whether ``mem`` may answer ``namespace`` without writing (call under a lock)."""
        if method == self.method:
            return mem is self.memory and namespace in self._warm
        entry = self._others.get(method)
        return (
            entry is not None
            and entry[0] is mem
            and entry[1].get(namespace, -1) == self._generation.get(namespace, 0)
        )

    def _ready(self, namespace: str, method: str) -> Memory:
        """The memory for ``method`` with ``namespace`` loaded and synchronised (done on
        the store thread when needed)."""
        if method == self.method:
            mem = self.memory
            if namespace in self._warm and not mem.rebuilt(namespace):
                return mem
            if namespace in self._warm:  # a rebuild an edit started is done: take it
                return self._on_store(lambda: self._take_rebuilt(namespace)).result()
            return self._on_store(lambda: self._warm_primary(namespace)).result()
        entry = self._others.get(method)
        if entry is not None and entry[1].get(namespace, -1) == self._generation.get(namespace, 0):
            return entry[0]
        return self._on_store(lambda: self._warm_other(namespace, method)).result()

    def _warm_primary(self, namespace: str) -> Memory:
        # No lock needed: no reader uses a namespace that is not warm, and loading one
        # only adds new entries to the memory's per-namespace dicts.
        mem = self.memory
        if namespace not in self._warm:
            self._warm_up(mem, namespace)
            self._warm.add(namespace)
        return mem

    def _take_rebuilt(self, namespace: str) -> Memory:
        """On the store thread, under the exclusive lock: take ``namespace``'s structure
        that an edit sent to be rebuilt in the background (its readers answered from a
        stand-in meanwhile), once it is done, and warm it."""
        mem = self.memory
        if not mem.rebuilt(namespace):
            return mem  # another request took it
        sizes = self._begin_write()
        try:
            self._warm_up(mem, namespace)  # the sync takes it (background work allowed)
        finally:
            self._end_write(sizes, keep=[namespace])
        return mem

    def _warm_other(self, namespace: str, method: str) -> Memory:
        """A memory with another method over the same store and encoder, rebuilt when a
        namespace it loaded was written since (its caches cannot follow the writes)."""
        gen = self._generation.get(namespace, 0)
        entry = self._others.get(method)
        if entry is not None and entry[1].get(namespace, -1) == gen:
            return entry[0]
        if entry is None or namespace in entry[1]:
            if self.limits.max_methods == 0:
                raise InvalidInputError(
                    f"method: this server answers with {self.method!r} only, got {method!r}"
                )
            base = self.memory
            config = MemoryConfig(method=method, seed=base.config.seed, **self._settings)
            if entry is None and len(self._others) >= self.limits.max_methods:
                self._others.pop(next(iter(self._others)))  # the oldest
            entry = (Memory(base.store, base.encoder, config), {})
            entry[0].follow_writers = False
            entry[0].take_background_work = False
            entry[0].rebuild_in_background = False
        mem, loaded = entry
        self._warm_up(mem, namespace)  # readers use this namespace only once marked
        loaded[namespace] = gen
        self._others[method] = entry
        return mem

    @staticmethod
    def _warm_up(mem: Memory, namespace: str) -> None:
        """Load ``namespace`` and bring every lazily built structure of its retriever up
        to date, so later retrievals only read: the retriever brought up to date, then
        its own warm-up (:meth:`Retriever.warm_up
        <osumem.retrieve.base.Retriever.warm_up>`: the work the next real retrieval
        would otherwise do)."""
        retriever = mem.retriever(namespace) if mem.store.dim else None
        if retriever is None:
            mem.view(namespace)
            return
        with blas_threads(mem.config.blas_threads):  # as inside the memory's own calls
            retriever.warm_up()
        # a restored pool rebuilds its similarity index at its next refresh, inside an
        # add, holding the write lock: start building it now
        pool = retriever.osu_pool()
        if pool is not None:
            pool.prepare_refresh()

    def _delete(self, namespace: str) -> int:
        """Delete a namespace (one transaction) and drop every cache of it."""
        n = self.memory.delete_namespace(namespace)
        self._warm.discard(namespace)
        for other, _ in self._others.values():
            other.delete_namespace(namespace)  # already gone: drops that memory's caches
        return n

    def close(self) -> None:
        """Finish running requests, then close the store and the encoder (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._readers.shutdown(wait=True)
        self._store.submit(self.memory.close).result()
        close = getattr(self._encoder_to_close, "close", None)
        if callable(close):
            close()
        self._store.shutdown(wait=True)

    def __enter__(self) -> MemoryService:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)


def _retrieve_args(
    name: str,
    query: Any,
    budget: Any,
    old: tuple[Any, ...],
    namespace: str,
    method: str | None,
) -> tuple[Any, Any, str, str | None]:
    """``(query, budget, namespace, method)`` of a retrieve call, in the shared
    signature or the service's spelling of earlier releases, ``(namespace, query,
    budget[, method])`` (recognised by a text in the budget's place; a warning)."""
    if not isinstance(budget, str):
        if old:
            raise TypeError(f"{name}: namespace and method are keyword arguments")
        return query, budget, namespace, method
    warnings.warn(
        f"{name}(namespace, query, budget) is deprecated; use "
        f"{name}(query, budget, namespace=..., method=...)",
        DeprecationWarning,
        stacklevel=3,
    )
    if not old or len(old) > 2:
        raise TypeError(f"{name}(namespace, query, budget[, method]): give the budget")
    return budget, old[0], str(query), old[1] if len(old) == 2 else method
