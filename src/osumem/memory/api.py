"""The agent-facing memory: add steps or chat messages as the agent runs, retrieve the
past steps that support a query under a token budget.

>>> from osumem.memory import Memory
>>> with Memory.open("mem.db", encoder="hashing") as mem:          # doctest: +SKIP
...     mem.add_messages(messages, namespace="task-7")
...     print(mem.retrieve("which flight did the user book?", 256,
...                        namespace="task-7").render())

Each namespace is its own episode: its own positions, view and retriever; nothing
crosses namespaces. Every add is one store transaction, validated before anything is
written, and then brings the namespace's retriever up to date through
``Retriever.update`` (OSU-Mem adds the new steps to its pool without a rebuild).

:class:`Memory` is a thin facade over three parts, each in its own module: the
namespace cache (:mod:`osumem.memory.namespaces`: the loaded steps, following other
writers), the retriever cache (:mod:`osumem.memory.retrievers`: replay along the
stored add batches, snapshots, causal queries) and the message planner
(:mod:`osumem.memory.planner`: messages to validated rows, embeddings and held
messages), over a store behind the backend interface
(:class:`~osumem.memory.backends.MemoryStore`).
"""

from __future__ import annotations

import time as _time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Self

import numpy as np
from numpy.typing import NDArray

from osumem.embed import Encoder, as_encoder
from osumem.errors import (
    ConfigError,
    DuplicateInputError,
    IncompatibleStoreError,
    InvalidInputError,
)
from osumem.memory.backends import MemoryStore, open_store
from osumem.memory.blas import limited
from osumem.memory.config import (
    DEFAULT_NAMESPACE,
    MEMORY_ANN_MIN_STEPS,
    ON_DUPLICATE,
    MemoryConfig,
)
from osumem.memory.editing import StepEditor
from osumem.memory.encoders import EXTERNAL_PREFIX, check_available, resolve_encoder
from osumem.memory.explain import Explanation
from osumem.memory.filtered import FilteredRetrievers
from osumem.memory.filters import compile_filter
from osumem.memory.namespaces import NamespaceCache
from osumem.memory.planner import MessagePlanner, canonical
from osumem.memory.query import query_vector
from osumem.memory.retrieved import Retrieved, StoredStep, retrieved_from
from osumem.memory.retrievers import MAX_OTHER_METHODS, MethodCaches
from osumem.memory.rows import StepRow
from osumem.memory.validate import (
    OversizedInputError,
    _show,
    check_messages,
    check_metadata,
    check_namespace,
    check_time,
    log_digest,
    text_message,
)
from osumem.retrieve.base import Retriever
from osumem.retrieve.budget import validated_budget
from osumem.types import MemoryView, Step

__all__ = [
    "DEFAULT_NAMESPACE",
    "MAX_OTHER_METHODS",
    "MEMORY_ANN_MIN_STEPS",
    "ON_DUPLICATE",
    "Memory",
    "MemoryConfig",
    "OversizedInputError",
]


class Memory:
    """An incremental, optionally persistent trajectory memory. Use :meth:`open`.

    Several processes may write one store (each add is one write transaction); before
    answering, a memory catches up with what other writers committed (the store's
    change counter), so its positions and answers always equal a fresh open's. One
    ``Memory`` object is not meant to be used by two threads at once: serialise calls.
    """

    def __init__(
        self,
        store: MemoryStore,
        encoder: Encoder | None,
        config: MemoryConfig,
        *,
        encoder_spec: str | None = None,
        owns_encoder: bool = False,
    ) -> None:
        self.store = store
        self.config = config
        self._encoder = encoder
        self._encoder_spec = encoder_spec
        self._owns_encoder = owns_encoder or encoder_spec is not None
        # dropped namespaces take their retrievers along (every method's)
        self._views = NamespaceCache(store, on_forget=lambda ns: self._methods.forget(ns))
        self._methods = MethodCaches(self._views, config)
        self._retrievers = self._methods.own
        self._planner = MessagePlanner(config, store, self._need_encoder, lambda: self._encoder)
        self._editor = StepEditor(config, store, self._views, self._planner, self._need_encoder)
        self._filtered = FilteredRetrievers()
        #: Catch up with other writers' commits before each call (the default). An owner
        #: that shares this memory between threads (the server) turns it off and calls
        #: :meth:`refresh` itself while no reader runs.
        self.follow_writers = True

    @classmethod
    def open(
        cls,
        path: str | Path | None = None,
        *,
        encoder: Encoder | str | Path | None = None,
        method: str = "osumem",
        params: Mapping[str, Any] | None = None,
        seed: int = 0,
        budget: int = 256,
        read_only: bool = False,
        timeout: float = 30.0,
        **settings: Any,
    ) -> Memory:
        """Open (or create) a memory.

        Args:
            path: SQLite file of the persistent store; ``None`` keeps it in memory.
            encoder: an :class:`~osumem.embed.Encoder`, or a name resolved by
                :func:`~osumem.memory.encoders.resolve_encoder` (``"sbert"``,
                ``"hashing"``, a model path). ``None``: the encoder the store recorded,
                or SBERT for a new store, loaded at the first text to encode.
            method, params, seed, budget: see :class:`MemoryConfig`.
            read_only: open for queries only (chosen automatically on a read-only
                file, folder or medium); every add then raises ``StoreReadOnlyError``.
            timeout: seconds to wait for another writer's lock before
                ``StoreBusyError``.
            settings: the other :class:`MemoryConfig` fields.

        Raises:
            StoreError: typed by cause (``StoreBusyError``, ``StoreReadOnlyError``,
                ``StoreIOError``, ``StoreCorruptError``, ``ForeignStoreError``,
                ``NewerSchemaError``, ``IncompatibleStoreError`` for another encoder).
            InvalidInputError: the encoder cannot be loaded (unknown name, missing
                extra). A failed open leaves no new file behind.
        """
        config = MemoryConfig(method=method, params=params, seed=seed, budget=budget, **settings)
        encoder = as_encoder(encoder)  # an encoder of an earlier release: model_id
        if encoder is not None and not isinstance(encoder, Encoder | str | Path):
            raise InvalidInputError(
                f"encoder: expected an Encoder, a name or a path, got {type(encoder).__name__}"
            )
        store = open_store(path, read_only=read_only, timeout=timeout)
        try:
            enc = resolve_encoder(encoder)
            recorded = store.encoder_id
            known = bool(recorded) and not recorded.startswith(EXTERNAL_PREFIX)
            if enc is not None and known and (enc.encoder_id != recorded or enc.dim != store.dim):
                raise IncompatibleStoreError(
                    f"memory store {path}: made with encoder {recorded!r} (dim "
                    f"{store.dim}); opened with {enc.encoder_id!r} (dim {enc.dim})"
                )
            spec = None if enc is not None else (recorded or "sbert")
            if spec is not None:
                check_available(spec)  # a missing extra fails here, not at the first add
            memory = cls(
                store,
                enc,
                config,
                encoder_spec=spec,
                owns_encoder=enc is not None and not isinstance(encoder, Encoder),
            )
        except BaseException:
            store.close()
            store.discard()
            raise
        return memory

    # --- encoder --------------------------------------------------------------------

    @property
    def encoder(self) -> Encoder | None:
        """The encoder (loaded on first use); ``None`` for a vectors-only store."""
        if self._encoder is None and self._encoder_spec:
            self._encoder = resolve_encoder(self._encoder_spec)
            self._encoder_spec = None
        return self._encoder

    def _need_encoder(self, what: str) -> Encoder:
        enc = self.encoder
        if enc is None:
            raise InvalidInputError(
                f"{what}: this memory has no encoder (store encoder {self.store.encoder_id!r}); "
                "pass vectors, or open it with encoder=..."
            )
        return enc

    # --- keeping up with other writers ---------------------------------------------

    def _refresh(self) -> None:
        """Bring the cached namespaces up to what other writers committed."""
        if self.follow_writers and self._views.refresh():
            self._methods.drop_causal()

    def _writers_moved(self) -> bool:
        """Inside a write transaction: catch up with other writers and say whether any
        committed since this memory last caught up (just before the transaction, in an
        add). With the write lock held nobody else commits until the end, so when
        nobody did, what the add read before the transaction still holds. A memory
        that does not follow other writers cannot tell: always ``True``."""
        if not self.follow_writers:
            return True
        moved = self._views.refresh()
        if moved:
            self._methods.drop_causal()
        return moved

    @limited
    def refresh(self) -> set[str]:
        """Bring the loaded namespaces up to what other writers (processes, servers)
        committed since, whatever :attr:`follow_writers` says; returns the namespaces
        whose loaded steps changed (their retrievers catch up at their next use)."""
        before = self.loaded()
        if self._views.refresh():
            self._methods.drop_causal()
        after = self.loaded()
        return {ns for ns, n in before.items() if after.get(ns) != n}

    def loaded(self) -> dict[str, int]:
        """The namespaces this memory holds in its caches, with their step counts."""
        return self._views.sizes()

    @contextmanager
    def transaction(self) -> Iterator[Memory]:
        """Group several adds into one transaction: all are stored, or none (a failure
        inside rolls every add of the block back).

        >>> with mem.transaction():                                   # doctest: +SKIP
        ...     for log in logs:
        ...         mem.add_messages(log, namespace="runs")
        """
        outer = not self.store.in_transaction
        try:
            with self.store.transaction():
                yield self
        except BaseException:
            if outer:
                self._views.forget()
            raise

    # --- reading --------------------------------------------------------------------

    def namespaces(self) -> list[str]:
        """Namespaces holding steps (or held messages), sorted."""
        return self.store.namespaces()

    def n_steps(self, namespace: str = DEFAULT_NAMESPACE) -> int:
        """Number of steps in ``namespace``."""
        check_namespace(namespace)
        return self.store.n_steps(namespace)

    @limited
    def view(self, namespace: str = DEFAULT_NAMESPACE) -> MemoryView:
        """The columnar view of ``namespace`` (what the retriever reads)."""
        check_namespace(namespace)
        self._refresh()
        return self._views.data(namespace).view

    @limited
    def retriever(self, namespace: str = DEFAULT_NAMESPACE) -> Retriever | None:
        """The namespace's retriever, brought up to date (``None`` while it is empty)."""
        check_namespace(namespace)
        self._refresh()
        return self._retrievers.sync(namespace)

    def held(self, namespace: str = DEFAULT_NAMESPACE) -> list[dict[str, Any]]:
        """The messages of ``namespace`` held back by :meth:`add_messages` (an
        assistant tool call still waiting for its response, with any responses that
        came already); they become steps with the next add."""
        check_namespace(namespace)
        return self.store.pending(namespace)

    def discard_held(self, namespace: str = DEFAULT_NAMESPACE) -> list[dict[str, Any]]:
        """Delete the held messages of ``namespace`` (one transaction) and return
        them; the calls they hold never become steps. Works on damaged entries too."""
        check_namespace(namespace)
        return self.store.discard_pending(namespace)

    def delete_namespace(self, namespace: str = DEFAULT_NAMESPACE) -> int:
        """Delete every step and held message of ``namespace`` (one transaction) and
        return the number of steps deleted (0 for an unknown namespace). Other
        ``Memory`` objects on the store drop the namespace at their next call."""
        check_namespace(namespace)
        n = self.store.delete_namespace(namespace)
        self._views.forget(namespace)
        self._filtered.forget()
        return n

    @limited
    def retrieve(
        self,
        query: str | NDArray[Any] | Sequence[float],
        budget: int | None = None,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        method: str | None = None,
        before: int | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> Retrieved:
        """Select past steps of ``namespace`` for ``query`` under ``budget`` tokens.

        Args:
            query: a non-empty text (encoded with the memory's encoder) or a finite
                query vector; anything else is an ``InvalidInputError``.
            budget: token budget (default: the memory's ``budget``).
            namespace: which episode to search.
            method: a registered retrieval method to answer with instead of the
                memory's own (default parameters, built on first use over the same
                steps); ``None``: the memory's method.
            before: only steps at positions ``< before`` (causality); ``None``: all.
                The answer is what the memory would have given right after step
                ``before - 1`` was added: the structure is rebuilt from those steps
                alone, so later steps cannot influence it.
            filter: only steps that pass this filter (see :mod:`osumem.memory.filters`:
                equality and ranges on metadata, ``role``, ``tool``, ``source``,
                ``time``), applied before anything is ranked or packed: the answer is
                the one a memory holding only the passing steps gives
                (:mod:`osumem.memory.filtered`), so the budget fills from them.

        Raises:
            InvalidFilterError: an unknown operator, a value of the wrong type, a
                metadata key no step of the namespace holds (the clause named).
        """
        with validated_budget(self.config.budget if budget is None else budget) as b:
            return self._retrieve(query, b, namespace, method, before, filter)

    def _retrieve(
        self,
        query: Any,
        b: int,
        namespace: str,
        method: str | None,
        before: int | None,
        filter: Mapping[str, Any] | None = None,
    ) -> Retrieved:
        check_namespace(namespace)
        flt = compile_filter(filter)
        cache = self._methods.cache(method)
        if before is not None and (
            isinstance(before, bool) or not isinstance(before, int | np.integer)
        ):
            raise InvalidInputError(f"before: expected an integer position, got {_show(before)}")
        if before is not None and before < 0:
            raise InvalidInputError(f"before: expected a position >= 0, got {before}")
        before = None if before is None else int(before)
        q, text = query_vector(
            query,
            max_text_chars=self.config.max_text_chars,
            dim=self.store.dim,
            encoder_id=self.store.encoder_id,
            encode=lambda t: self._need_encoder("retrieve(query text)").encode([t])[0],
        )
        self._refresh()
        retriever = cache.sync(namespace)
        if retriever is None or before == 0:
            empty = Explanation(cache.method, b, 0)
            return Retrieved(namespace, cache.method, b, (), text, explanation=empty)
        data = self._views.data(namespace)
        if flt is not None:
            mask = flt.mask(data, namespace)
            if before is not None:
                mask[before:] = False
            keep = np.flatnonzero(mask).astype(np.int64)
            if keep.size == 0:
                empty = Explanation(cache.method, b, 0)
                return Retrieved(namespace, cache.method, b, (), text, explanation=empty)
            if keep.size < data.view.n:
                sub, part = self._filtered.get(cache, namespace, data, keep)
                picked = sub.retrieve(q, b, text=text).positions
                return retrieved_from(
                    sub,
                    q,
                    picked,
                    part,
                    namespace=namespace,
                    method=cache.method,
                    budget=b,
                    text=text,
                    mapping=keep,
                )
        if before is not None and before < data.view.n:
            retriever = cache.causal(namespace, before)
        sel = retriever.retrieve(q, b, text=text)
        return retrieved_from(
            retriever,
            q,
            sel.positions,
            data,
            namespace=namespace,
            method=cache.method,
            budget=b,
            text=text,
        )

    # --- writing --------------------------------------------------------------------

    @limited
    def add_steps(
        self,
        steps: Sequence[Step],
        *,
        namespace: str = DEFAULT_NAMESPACE,
        embeddings: NDArray[Any] | None = None,
        metadata: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        time: Any = None,
    ) -> list[int]:
        """Append ``steps`` to ``namespace`` (one transaction) and return their step ids.

        Each :class:`~osumem.types.Step` keeps its own annotations and ``cost`` (its
        token cost). ``embeddings`` (one row per step) are used as given; without them
        the step texts are encoded. A step with an empty ``source`` gets
        ``namespace`` as its source. ``metadata``: one dict for every step, or a list
        of one per step (JSON data; returned with each retrieved step, filtered on by
        ``retrieve(filter=...)``); ``time``: when the steps happened (seconds since the
        epoch or a ``datetime``; default: now). Nothing is written if any step is
        invalid.
        """
        check_namespace(namespace)
        rows = self._planner.step_rows(steps, namespace)
        if isinstance(metadata, Sequence) and not isinstance(metadata, str | bytes):
            if len(metadata) != len(rows):
                raise InvalidInputError(
                    f"metadata: {len(metadata)} dicts for {len(rows)} steps (give one per "
                    "step, or one dict for all)"
                )
            limit = self.config.max_text_chars
            texts = [check_metadata(m, f"metadata[{i}]", limit) for i, m in enumerate(metadata)]
            at = check_time(time, "time") if time is not None else _time.time()
            rows = [replace(r, metadata_json=m, time=at) for r, m in zip(rows, texts, strict=True)]
        else:
            rows = self._stamped(rows, metadata, time)
        emb = self._planner.embed(rows, embeddings)
        with self.store.transaction(namespace):
            self._refresh()
            ids = self._write(namespace, rows, emb, embeddings is not None, pending=None)
        self._views.extend(namespace, rows, emb, ids)
        self._retrievers.prepare(namespace)  # a bulk add builds now, not at the next query
        return ids

    @limited
    def add_messages(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        namespace: str = DEFAULT_NAMESPACE,
        source: str | None = None,
        prefix_namespace: bool | None = None,
        hold_open_calls: bool = True,
        on_duplicate: str | None = None,
        log_id: str | None = None,
        format: str = "auto",
        metadata: Mapping[str, Any] | None = None,
        time: Any = None,
    ) -> list[int]:
        """Append an agent's chat messages to ``namespace``; return the new step ids.

        Messages become steps as :func:`osumem.ingest.openai_chat.read_messages`
        defines (one per user message, assistant text and tool call; a tool response
        is its call's observation). The messages may come a few at a time: when the
        last assistant message's tool calls have no response yet and
        ``hold_open_calls`` is set, that message is held (stored, not yet a step) and
        joins the next add, so its step carries the response (see :meth:`held` and
        :meth:`discard_held`). Subgoal segments and tool-call matching continue across
        adds. Everything, the held messages included, is validated before anything
        is written, so an accepted add never makes a later valid add fail.

        Args:
            source: the steps' source name (default: ``namespace``); it labels subgoals
                and, with ``prefix_namespace``, prefixes entities and signatures.
            prefix_namespace: default: the memory's ``prefix_namespace`` setting.
            on_duplicate: what to do when these messages (same content, or the same
                ``log_id``) were added to the namespace before: ``"skip"`` (add
                nothing, return ``[]``, so a re-run or a retried add stores nothing
                twice), ``"append"`` (add them again) or ``"error"``
                (``DuplicateInputError``); ``None``: the memory's ``on_duplicate``
                setting (``"skip"`` unless opened with another). Adds made with ``"append"`` and no
                ``log_id`` are not remembered for this. An agent that may send the
                same message twice on purpose passes a ``log_id`` per message (its
                index or id in the run) or ``"append"``.
            log_id: a caller-given identity of the messages (instead of their content).
            format: the messages' shape: ``"openai"`` (``tool_calls``),
                ``"openai-legacy"`` (``function_call`` / ``role: "function"``),
                ``"anthropic"`` (``tool_use`` / ``tool_result`` blocks) or ``"auto"``
                (default: read from the messages); see
                :func:`osumem.ingest.normalize_messages`. Messages that make no step
                (a system prompt, an empty assistant message) are not stored.
            metadata: JSON data stored with every step this add makes (a held tool
                call's step gets the metadata of the add that completes it), returned
                with each retrieved step and filtered on by ``retrieve(filter=...)``.
            time: when the messages happened (seconds since the epoch or a
                ``datetime``; default: now), what ``filter={"time": ...}`` compares.
        """
        check_namespace(namespace)
        if on_duplicate is None:
            on_duplicate = self.config.on_duplicate
        if on_duplicate not in ON_DUPLICATE:
            raise ConfigError(
                f"on_duplicate: expected one of {ON_DUPLICATE}, got {_show(on_duplicate)}"
            )
        if log_id is not None:
            check_namespace(log_id, "log_id")
        if source is not None:
            check_namespace(source, "source")
        if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
            raise InvalidInputError("messages: expected a list of message dicts")
        clean = canonical(check_messages(messages, self.config.max_text_chars), format)
        digest = log_digest(clean, log_id)
        src = namespace if source is None else source
        meta = check_metadata(metadata, "metadata", self.config.max_text_chars)
        at = check_time(time, "time")
        prefix = self.config.prefix_namespace if prefix_namespace is None else prefix_namespace
        self._refresh()
        if on_duplicate != "append" and self._is_duplicate(namespace, digest, on_duplicate):
            return []
        state = self._views.held_state(namespace, src)
        plan = self._planner.plan(clean, state, namespace, src, prefix, hold_open_calls)
        with self.store.transaction(namespace):
            now = state
            if self._writers_moved():  # what was read above may be stale: read it again
                if on_duplicate != "append" and self._is_duplicate(namespace, digest, on_duplicate):
                    return []
                now = self._views.held_state(namespace, src)
                if now != state:  # another writer moved the namespace meanwhile
                    plan = self._planner.plan(clean, now, namespace, src, prefix, hold_open_calls)
            # an agent's streaming adds (append, no id) are not logs: no digest kept
            keep = on_duplicate != "append" or log_id is not None
            others, of = now[2], now[3]  # other sources' held messages stay held
            rows = self._stamped(plan.rows, meta, at)
            # nothing was held and nothing is: the store's held messages stay as they are
            unchanged = not now[0] and not others and not plan.held
            ids = self._write(
                namespace,
                rows,
                plan.embeddings,
                False,
                pending=None if unchanged else [*others, *plan.held],
                pending_sources=None if unchanged else [*of, *([src] * len(plan.held))],
                digest=digest if keep else None,
                users=now[1],
            )
        self._views.extend(namespace, rows, plan.embeddings, ids)
        self._retrievers.prepare(namespace)  # a bulk add builds now, not at the next query
        return ids

    def add(
        self,
        text: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        role: str = "user",
        metadata: Mapping[str, Any] | None = None,
        time: Any = None,
        source: str | None = None,
        on_duplicate: str | None = None,
        log_id: str | None = None,
    ) -> list[int]:
        """Store one text as a step of ``namespace``: a ``"user"`` turn (default) or an
        ``"assistant"`` one, exactly as :meth:`add_messages` stores the message
        ``{"role": role, "content": text}`` (the same step text, subgoal segments and
        duplicate handling); returns the new step ids (``[]`` when skipped as a
        duplicate).

        >>> mem.add("I prefer aisle seats", namespace="ana", metadata={"kind": "pref"})  # doctest: +SKIP
        """
        return self.add_messages(
            [text_message(text, role)],
            namespace=namespace,
            source=source,
            on_duplicate=on_duplicate,
            log_id=log_id,
            metadata=metadata,
            time=time,
        )

    def _stamped(self, rows: list[StepRow], metadata: Any, time: Any) -> list[StepRow]:
        """``rows`` with their metadata (a dict, or its checked JSON text) and time (default:
        now)."""
        if not rows:
            return rows
        meta = (
            metadata
            if isinstance(metadata, str)
            else check_metadata(metadata, "metadata", self.config.max_text_chars)
        )
        at = check_time(time, "time")
        stamp = _time.time() if at is None else at
        return [replace(r, metadata_json=meta, time=stamp) for r in rows]

    # --- changing stored steps -------------------------------------------------------

    @limited
    def delete(
        self,
        namespace: str,
        positions: int | Sequence[int] | None = None,
        *,
        ids: int | Sequence[int] | None = None,
    ) -> list[int]:
        """Delete steps of ``namespace`` named by their ``positions`` or their ``ids``
        (exactly one of the two; one transaction); return the ids deleted.

        The later steps move down (positions stay 0..n-1, in order; ids never change
        and are never given to another step), the add batches and log digests follow,
        and the next retrieval equals that of a memory built from scratch from the
        remaining steps in the same add batches (see :mod:`osumem.memory.editing`).
        Nothing of a deleted step stays in the store (SQLite's ``secure_delete`` and a
        checkpoint of the write-ahead log), nor in the retrievers' indexes (rebuilt) or
        the stored snapshot (dropped when it covered the step).

        Raises:
            StepNotFoundError: a position or id the namespace does not hold (named);
                nothing is deleted then.
        """
        check_namespace(namespace)
        with self.store.transaction(namespace):
            self._refresh()
            deleted = self._editor.delete(namespace, positions, ids)
        if deleted:
            self._views.forget(namespace)
            self._filtered.forget()
        return deleted

    @limited
    def update(
        self,
        namespace: str,
        position: int | None = None,
        *,
        id: int | None = None,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        embedding: NDArray[Any] | Sequence[float] | None = None,
        cost: int | None = None,
    ) -> StoredStep:
        """Change one step of ``namespace``, named by ``position`` or ``id``: its
        ``text`` (stored as given, encoded again, its token cost counted again; or the
        given ``embedding`` and ``cost``) and/or its ``metadata`` (replaced whole).
        Returns the step as stored now.

        The step keeps its id, position, role, tool, entities and subgoal. A text
        update rebuilds the namespace's retrievers (from a snapshot before the step
        when one is stored), so the next retrieval equals that of a memory built with
        the new text; a metadata-only update changes nothing a retriever reads and
        rebuilds nothing. The old text leaves no trace in the store.

        Raises:
            StepNotFoundError: no such position or id in the namespace.
        """
        check_namespace(namespace)
        with self.store.transaction(namespace):
            self._refresh()
            p, content = self._editor.update(
                namespace,
                position,
                id,
                text=text,
                metadata=metadata,
                embedding=None if embedding is None else np.asarray(embedding),
                cost=cost,
            )
        if content:
            self._views.forget(namespace)
        else:
            stored = self.store.load(namespace, start=p)
            buf = self._views.cached(namespace)
            if buf is not None:
                buf.set_metadata([p], [stored.metadata[0]], float(stored.updated[0]))
                self._views.edited(namespace)
        self._filtered.forget()
        return self.steps(namespace, positions=[p])[0]

    def steps(
        self,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        positions: int | Sequence[int] | None = None,
        ids: int | Sequence[int] | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[StoredStep]:
        """The stored steps of ``namespace`` (with their metadata and times): those at
        ``positions``, or with ``ids`` (in the order given), or all in position order;
        ``filter`` keeps only those that pass (as ``retrieve(filter=...)``).

        Raises:
            StepNotFoundError: a named position or id the namespace does not hold.
        """
        check_namespace(namespace)
        self._refresh()
        return self._editor.steps(namespace, filter=filter, positions=positions, ids=ids)

    def contains_log(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        namespace: str = DEFAULT_NAMESPACE,
        log_id: str | None = None,
    ) -> bool:
        """Whether this log (same content, or the same ``log_id``) was added to
        ``namespace`` as a log (with ``on_duplicate`` skip/error or a ``log_id``)."""
        check_namespace(namespace)
        if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
            raise InvalidInputError("messages: expected a list of message dicts")
        clean = canonical(check_messages(messages, self.config.max_text_chars), "auto")
        return self.store.has_digest(namespace, log_digest(clean, log_id))

    def _is_duplicate(self, namespace: str, digest: str, on_duplicate: str) -> bool:
        if not self.store.has_digest(namespace, digest):
            return False
        if on_duplicate == "error":
            raise DuplicateInputError(
                f"namespace {namespace!r}: this log was added before ({digest[:19]}…); "
                "pass on_duplicate='append' to add it again"
            )
        return True

    def _write(
        self,
        namespace: str,
        rows: list[StepRow],
        emb: NDArray[np.float32],
        external: bool,
        *,
        pending: Sequence[Mapping[str, Any]] | None,
        pending_sources: Sequence[str | None] | None = None,
        digest: str | None = None,
        users: int | None = None,
    ) -> list[int]:
        """Store validated rows (inside the caller's transaction; the store checks the
        vectors' dimension against what it holds under its write lock); ``users``: the
        namespace's user steps before them, when the caller read it in this
        transaction."""
        encoder_id = self._encoder_id_for(external, emb.shape[1])
        if users is None:
            users = self._views.users(namespace) if rows else 0
        ids = self.store.append(
            namespace,
            rows,
            emb,
            encoder_id=encoder_id,
            pending=pending,
            pending_sources=pending_sources,
            digest=digest,
        )
        self._views.count_added(namespace, users, rows)
        if encoder_id.startswith(EXTERNAL_PREFIX) and self._encoder is None:
            self._encoder_spec = None  # a vectors-only store: never guess an encoder
        return ids

    def _encoder_id_for(self, external: bool, dim: int) -> str:
        recorded = self.store.encoder_id
        if recorded:
            return recorded
        enc = self._encoder if external else self.encoder
        return enc.encoder_id if enc is not None else f"{EXTERNAL_PREFIX}:d{dim}"

    # --- lifecycle ------------------------------------------------------------------

    def check(self) -> None:
        """Run the store's full integrity check; raises only ``StoreError`` subclasses
        (``StoreCorruptError``, alias ``StoreIntegrityError``, listing every problem)."""
        self.store.check()

    @limited
    def wait_ready(self) -> None:
        """Wait until the index builds running on background threads are done.

        From ``ann_min_steps`` steps on, a retrieve never waits for an HNSW index: it
        answers exactly while the index builds (or catches up with a bulk of new steps)
        on a background thread, so which queries the index answered depends on timing.
        Call this before retrieves whose answers must not (tests, benchmarks).
        """
        self._methods.wait_ready()

    @limited
    def close(self) -> None:
        """Close the store and, if this memory opened it, the encoder's cache. Before
        closing, the retrievers built in this session are stored as snapshots (when
        they cover more than the stored ones), so the next open need not replay every
        add."""
        if self.store.is_open and not self.store.in_transaction:
            self._retrievers.save_all()  # the memory's own method keeps snapshots
        self.store.close()
        close = getattr(self._encoder, "close", None)
        if self._owns_encoder and callable(close):
            close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
