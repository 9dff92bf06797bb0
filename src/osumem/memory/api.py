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

Its methods sit in layers, each in its own module: :mod:`osumem.memory.core` (the
state and keeping up with other writers), :mod:`osumem.memory.reads` (views, steps,
the retrieve pipeline), :mod:`osumem.memory.writes` (adds, deletes, updates); this
module holds opening, transactions and the lifecycle.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from osumem.embed import Encoder, as_encoder
from osumem.errors import (
    IncompatibleStoreError,
    InvalidInputError,
)
from osumem.memory.backends import open_store
from osumem.memory.blas import limited
from osumem.memory.config import (
    DEFAULT_NAMESPACE,
    MEMORY_ANN_MIN_STEPS,
    ON_DUPLICATE,
    MemoryConfig,
)
from osumem.memory.encoders import EXTERNAL_PREFIX, check_available, resolve_encoder
from osumem.memory.retrievers import MAX_OTHER_METHODS
from osumem.memory.validate import (
    OversizedInputError,
)
from osumem.memory.writes import MemoryWrites

__all__ = [
    "DEFAULT_NAMESPACE",
    "MAX_OTHER_METHODS",
    "MEMORY_ANN_MIN_STEPS",
    "ON_DUPLICATE",
    "Memory",
    "MemoryConfig",
    "OversizedInputError",
]


class Memory(MemoryWrites):
    """An incremental, optionally persistent trajectory memory. Use :meth:`open`.

    Several processes may write one store (each add is one write transaction); before
    answering, a memory catches up with what other writers committed (the store's
    change counter), so its positions and answers always equal a fresh open's. One
    ``Memory`` object is not meant to be used by two threads at once: serialise calls.
    """

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

    def check(self) -> None:
        """Run the store's full integrity check; raises only ``StoreError`` subclasses
        (``StoreCorruptError``, alias ``StoreIntegrityError``, listing every problem)."""
        self.store.check()

    @limited
    def wait_ready(self) -> None:
        """Wait until the work running on background threads is done.

        From ``ann_min_steps`` steps on, a retrieve never waits for an HNSW index: it
        answers exactly while the index builds (or catches up with a bulk of new steps)
        on a background thread, so which queries the index answered depends on timing.
        Call this before retrieves whose answers must not (tests, benchmarks).

        A similarity refresh of the OSUs (due every quarter of growth) is also
        computed in the background; the memory takes it at a fixed step count. Below
        2,048 steps a call that reaches that count before the refresh is built waits
        for it, so the answers do not depend on timing; from 2,048 steps on none
        waits until the next refresh is due: the memory answers from its structure
        without the refresh, and the first call after it is built takes it. This call
        waits for it and takes it now. A small add waits for one only when the adds
        have left 512 steps out of the structure: a run of small adds can leave the
        structure behind the stored steps (the next retrieve takes the rest); this
        call brings it up to date first. It also waits for the structures an edit
        sent to be rebuilt in the background (:attr:`rebuild_in_background`) and
        takes them.
        """
        self._methods.wait_ready()

    @limited
    def close(self) -> None:
        """Close the store and, if this memory opened it, the encoder's cache. Before
        closing, the retrievers built in this session are stored as snapshots (when
        they cover more than the stored ones), so the next open need not replay every
        add."""
        self._methods.close()  # rebuilds in the background stop: nothing to save
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
