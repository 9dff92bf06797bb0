"""The backend interface of the agent memory's store.

:class:`MemoryStore` is what :class:`~osumem.memory.Memory` needs from a store and
nothing more; the SQLite file (:class:`~osumem.memory.backends.sqlite.SQLiteStore`) is
its first implementation. A backend proves itself by passing the conformance suite
(``tests/memory/backends/test_store_conformance.py``), written once against this interface.

What every backend guarantees:

- **Transactions.** Every write method runs in one transaction, or inside the caller's
  :meth:`~MemoryStore.transaction` (nested blocks are savepoints of the outer one); a
  failure rolls all of it back. Writers serialise: positions and held messages are
  read and written inside the write transaction, so concurrent writers (threads,
  processes, hosts) never interleave inside one add.
- **Positions.** :meth:`~MemoryStore.append` assigns a namespace's positions (0, 1, 2,
  … without gaps) and the global step ids inside its transaction; callers never pass
  them. A position is a step's place in its namespace's order: deleting steps
  (:meth:`~MemoryStore.delete_steps`) moves the later ones down, so the positions stay
  0..n-1 without gaps, while a step's id is its identity, never changed and never
  given to another step, not even after the step is deleted.
- **Deleted means gone.** Deleting or replacing steps (and deleting a namespace)
  leaves nothing of the old content readable in the store once the transaction has
  committed, and a stored snapshot that covered a changed step is deleted with it.
  SQLite: not in the file either (``secure_delete`` and a checkpoint of the
  write-ahead log). A server database: no query reads the deleted rows or their index
  entries; its own files keep dead row versions until it reclaims them (Postgres:
  VACUUM; VACUUM FULL rewrites the table), and its write-ahead log and backups keep
  what its operator keeps.
- **Change detection by a counter.** :meth:`~MemoryStore.data_version` changes
  whenever another writer commits and stays the same across this store's own writes
  (SQLite's ``data_version``; a server database keeps a commit counter in the
  database, increments it in every write transaction and subtracts its own commits).
- **Typed failures.** Only :class:`~osumem.errors.StoreError` subclasses escape
  (busy, read-only, I/O, corrupt, foreign, newer schema, incompatible encoder).
- **Plain types.** Everything crossing this interface is a str, int, bytes, a NumPy
  array or one of the records of :mod:`osumem.memory.rows`; nothing is pickled.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from abc import ABC, ABCMeta, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from osumem.errors import StoreCorruptError, StoreError
from osumem.memory.rows import AddBatch, AddContext, NamespaceData, SnapshotRow, StepRow

#: The format name written into every store.
STORE_FORMAT = "osumem-memory"
#: Bumped whenever the schema changes incompatibly; stores of another version are refused.
SCHEMA_VERSION = 1


class _Constructible(ABCMeta):
    """``MemoryStore(path, ...)``, the spelling of earlier releases, still opens a
    SQLite store (with a DeprecationWarning) for one release."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is MemoryStore and LEGACY_STORE is not None:
            warnings.warn(
                "MemoryStore(path) is deprecated: MemoryStore is the backend interface; "
                "use osumem.memory.open_store(path) (or SQLiteStore(path))",
                DeprecationWarning,
                stacklevel=2,
            )
            return LEGACY_STORE(*args, **kwargs)
        return super().__call__(*args, **kwargs)


#: What ``MemoryStore(path)`` opens (:mod:`osumem.memory.backends` sets SQLite).
LEGACY_STORE: Any = None


class MemoryStore(ABC, metaclass=_Constructible):
    """A memory store: namespaces of steps, their add batches, held messages, log
    digests and retriever snapshots (see the module docstring for the guarantees).

    Attributes:
        name: how messages name the store (``"memory store <location>"``).
        read_only: opened for queries only; every write raises
            :class:`~osumem.errors.StoreReadOnlyError`.
        created: this open created the store (so :meth:`discard` may remove it).
    """

    #: The backend's name (``"sqlite"``).
    backend: ClassVar[str] = ""
    name: str
    read_only: bool
    created: bool

    # --- lifecycle --------------------------------------------------------------------

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the store is, as :func:`~osumem.memory.backends.open_store` takes it
        (a path, a URL; ``":memory:"`` in RAM)."""

    @property
    @abstractmethod
    def persistent(self) -> bool:
        """Whether the store outlives this process (a file or a server; not RAM)."""

    @property
    @abstractmethod
    def is_open(self) -> bool:
        """Whether :meth:`close` has not been called yet."""

    @abstractmethod
    def close(self) -> None:
        """Finish pending work and close (idempotent)."""

    @abstractmethod
    def discard(self) -> None:
        """After :meth:`close`: remove the store if this open created it (a failed
        first open or ingest leaves nothing behind); otherwise do nothing."""

    # --- schema, meta, change detection -------------------------------------------------

    @abstractmethod
    def schema_version(self) -> int:
        """The schema version the store holds (this library reads
        :data:`SCHEMA_VERSION`)."""

    @abstractmethod
    def meta(self) -> dict[str, str]:
        """The store's metadata: ``format``, ``schema_version``, ``library_version``,
        ``model_id`` (the encoder id) and ``dim``."""

    #: The encoder id and dimension as committed by the first add, once read: they never
    #: change afterwards, so :attr:`encoder_id` and :attr:`dim` (read by every add and
    #: retrieve) need not query the store again. Filled only from a read outside a
    #: transaction, so a first add that is rolled back leaves nothing cached.
    _fixed_encoder: tuple[str, int] | None = None
    #: ``(namespace, first position)`` of the last :meth:`append` made through this
    #: object (positions assigned inside its transaction): lets a caller holding the
    #: namespace's earlier steps tell whether the new ones follow them directly.
    last_append: tuple[str, int] | None = None

    def _encoder_and_dim(self) -> tuple[str, int]:
        fixed = self._fixed_encoder
        if fixed is not None and self.is_open:
            return fixed
        meta = self.meta()
        value = meta.get("dim", "0")
        if not value.isdigit():
            raise StoreCorruptError(f"{self.name}: corrupt: meta 'dim' is {value!r}")
        pair = (meta.get("model_id", ""), int(value))
        if pair[0] and not self._sees_uncommitted:
            self._fixed_encoder = pair
        return pair

    @property
    def _sees_uncommitted(self) -> bool:
        """Whether a read now may see writes not committed yet: inside this thread's
        own transaction (a backend whose threads share a connection: inside any)."""
        return self.in_transaction

    @property
    def encoder_id(self) -> str:
        """The encoder id recorded at the first add ("" while empty)."""
        return self._encoder_and_dim()[0]

    @property
    def dim(self) -> int:
        """The embedding dimension recorded at the first add (0 while empty)."""
        return self._encoder_and_dim()[1]

    @abstractmethod
    def data_version(self) -> int:
        """A counter of other writers' commits: changes whenever another writer
        commits, unchanged by this store's own writes."""

    # --- transactions ---------------------------------------------------------------

    @abstractmethod
    def transaction(self, namespace: str | None = None) -> AbstractContextManager[None]:
        """One write transaction, rolled back on any exception; nested calls are
        savepoints of the outer one. ``namespace``: the one namespace the block writes
        (a backend may then lock that namespace only; ``None``: any, the whole store
        is locked); every write method names its namespace itself."""

    @property
    @abstractmethod
    def in_transaction(self) -> bool:
        """Whether a :meth:`transaction` is open on this store."""

    # --- steps ------------------------------------------------------------------------

    def append(
        self,
        namespace: str,
        rows: Sequence[StepRow],
        embeddings: NDArray[np.float32],
        *,
        encoder_id: str,
        pending: Sequence[Mapping[str, Any]] | None = None,
        pending_sources: Sequence[str | None] | None = None,
        digest: str | None = None,
        joined: bool = False,
    ) -> list[int]:
        """Append ``rows`` (with their L2-normalised ``embeddings``) to ``namespace`` as
        one add batch, in one transaction: positions and ids are assigned inside it,
        the namespace's held messages are replaced by ``pending`` (when given; the
        source of each in ``pending_sources``) and ``digest`` is recorded. The first add records ``encoder_id`` and the dimension;
        a later add with another raises :class:`~osumem.errors.IncompatibleStoreError`.
        Returns the new step ids. Callers validate first; the backend writes the
        checked :class:`~osumem.memory.rows.AddBatch` (:meth:`_append`).

        ``joined``: called inside an open :meth:`transaction` whose block lets any
        error of the append propagate out of it (so the block is rolled back whole,
        and the append's own writes with it): the append then opens no savepoint of
        its own. Inside an open transaction a savepoint is what keeps a failed append
        from leaving part of its rows behind when the caller catches the error; in
        SQLite it costs a statement journal (a temporary file) per add. Outside a
        transaction ``joined`` changes nothing."""
        emb = np.ascontiguousarray(embeddings, dtype="<f4")
        if emb.ndim != 2 or emb.shape[0] != len(rows):
            raise StoreError(f"append: {len(rows)} rows but embeddings of shape {emb.shape}")
        return self._append(
            AddBatch(
                namespace,
                rows,
                emb,
                encoder_id,
                pending,
                pending_sources,
                digest,
                joined=joined,
            )
        )

    @abstractmethod
    def _append(self, batch: AddBatch) -> list[int]:
        """Write ``batch`` as :meth:`append` describes (one transaction, positions and
        ids assigned inside it)."""

    @abstractmethod
    def n_steps(self, namespace: str) -> int:
        """Number of steps stored in ``namespace``."""

    @abstractmethod
    def count_role(self, namespace: str, role: str, start: int = 0) -> int:
        """Number of steps with ``role`` in ``namespace`` at positions ``>= start``."""

    @abstractmethod
    def load(self, namespace: str, start: int = 0, stop: int | None = None) -> NamespaceData:
        """One namespace's steps at positions ``start`` up to ``stop`` (excluded; to the
        last when ``None``; embeddings exactly as stored) and its add-batch ends after
        ``start`` up to ``stop``. A damaged row raises
        :class:`~osumem.errors.StoreCorruptError`."""

    @abstractmethod
    def step_versions(self, namespace: str) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """The ids of the namespace's steps in position order, and when each was last
        changed by :meth:`replace_steps` or :meth:`set_metadata` (``updated``; NaN
        when never), read at one moment."""

    @abstractmethod
    def step_ids(self, namespace: str | None = None) -> list[int]:
        """Every stored step id, increasing; with ``namespace``, the ids of its steps
        in position order."""

    # --- changing stored steps ------------------------------------------------------

    @abstractmethod
    def delete_steps(self, namespace: str, positions: Sequence[int]) -> list[int]:
        """Delete the steps at ``positions`` (distinct positions the namespace holds:
        the caller checked them inside its transaction) in one transaction and return
        their ids in position order. Afterwards:

        - the later steps keep their order and ids and move down
          (:func:`position_after_delete`), so positions stay 0..n-1;
        - every add-batch end and log-digest end position moves down the same way; a
          batch left without steps is dropped (two ends that become equal are one);
        - the namespace's snapshot is deleted when it covers a deleted position
          (``snapshot.steps > min(positions)``), otherwise kept;
        - the deleted ids are never given to a later step (of any namespace);
        - nothing of the deleted rows stays readable (see "Deleted means gone").

        A position the namespace does not hold raises
        :class:`~osumem.errors.StoreError` and changes nothing."""

    @abstractmethod
    def replace_steps(
        self,
        namespace: str,
        positions: Sequence[int],
        rows: Sequence[StepRow],
        embeddings: NDArray[np.float32],
    ) -> None:
        """Replace the whole content of the steps at ``positions`` (their text, every
        annotation, cost, embedding, metadata and times: all of ``rows``, one per
        position; the embeddings of the store's dimension) in one transaction. A
        row's change time is written through :func:`moved_time` (so it always moves). Ids,
        positions and add batches stay; the namespace's snapshot is deleted when it
        covers one of the positions; the old content is gone as for
        :meth:`delete_steps`. A position the namespace does not hold raises
        :class:`~osumem.errors.StoreError` and changes nothing."""

    @abstractmethod
    def set_metadata(
        self,
        namespace: str,
        positions: Sequence[int],
        metadata: Sequence[str],
        updated: float,
    ) -> None:
        """Replace the metadata (JSON texts of objects, one per position) of the steps at
        ``positions`` and set their ``updated`` time (through :func:`moved_time`, per
        step), in one transaction; nothing a
        retriever reads changes, so the snapshot stays. A position the namespace does
        not hold raises :class:`~osumem.errors.StoreError` and changes nothing."""

    @abstractmethod
    def edits(self, namespace: str) -> int:
        """How many times the stored steps of ``namespace`` were changed other than by
        an add: every :meth:`delete_steps`, :meth:`replace_steps`, :meth:`set_metadata`
        and :meth:`delete_namespace` adds one in its transaction, and the count is never
        reset (0 for a namespace never edited). A memory that cached the namespace
        catches up when the count moved: when it moved by one and ids are missing, that
        edit was a delete of them (it drops them from what it cached), otherwise it
        reads the namespace again."""

    # --- held messages and digests ------------------------------------------------------

    @abstractmethod
    def pending(self, namespace: str) -> list[dict[str, Any]]:
        """Messages held back for ``namespace`` (empty when none)."""

    @abstractmethod
    def pending_with_sources(self, namespace: str) -> tuple[list[dict[str, Any]], list[str | None]]:
        """The held messages of ``namespace`` and the source of each, read together
        (one snapshot while other writers commit); a source is ``None`` where none was
        recorded (the message goes with the next add of any source)."""

    @abstractmethod
    def discard_pending(self, namespace: str) -> list[dict[str, Any]]:
        """Delete the held messages of ``namespace`` (one transaction) and return them
        (a damaged entry as ``{"unreadable": <raw text>}``)."""

    @abstractmethod
    def has_digest(self, namespace: str, digest: str) -> bool:
        """Whether a log with ``digest`` was recorded in ``namespace``."""

    def add_context(self, namespace: str, digest: str | None) -> AddContext:
        """What an add reads of ``namespace`` before it writes: :meth:`data_version`,
        whether ``digest`` is recorded (``False`` for ``None``), the held messages with
        their sources (:meth:`pending_with_sources`) and the step count
        (:meth:`n_steps`). A backend answers it in one statement (one round trip); this
        default asks each."""
        version = self.data_version()
        logged = digest is not None and self.has_digest(namespace, digest)
        held, sources = self.pending_with_sources(namespace)
        return AddContext(version, logged, held, sources, self.n_steps(namespace))

    @abstractmethod
    def digests(self, namespace: str) -> list[tuple[str, int]]:
        """The log digests recorded for ``namespace`` as ``(digest, end position)``,
        ordered by end position then digest (what an export carries)."""

    # --- snapshots (a cache of a retriever's structure) ---------------------------------

    @abstractmethod
    def snapshot(self, namespace: str) -> SnapshotRow | None:
        """The stored snapshot of ``namespace`` (unchecked), or ``None``."""

    @abstractmethod
    def save_snapshot(self, namespace: str, row: SnapshotRow) -> bool:
        """Store ``row`` as the snapshot of ``namespace`` without waiting for another
        writer; ``False`` when it was not written (busy, read-only, ...): a snapshot is
        a cache."""

    # --- nearest neighbours ----------------------------------------------------------

    def nearest(
        self, namespace: str
    ) -> Callable[[NDArray[np.float32], int, int], NDArray[np.int64]] | None:
        """A search of ``namespace``'s steps by similarity with a query held by the
        store itself (a vector index): ``search(q, k, n)`` returns about the ``k`` best
        positions below ``n``, best first; ``None`` (the default) when the store has
        none and the retrievers rank in process."""
        return None

    # --- namespaces ---------------------------------------------------------------------

    @abstractmethod
    def namespaces(self) -> list[str]:
        """Namespaces holding at least one step or held message, sorted."""

    @abstractmethod
    def delete_namespace(self, namespace: str) -> int:
        """Delete everything of ``namespace`` (steps with their metadata, batches, held
        messages, digests, snapshot) in one transaction; return the number of steps
        deleted. As for :meth:`delete_steps`, the ids are never given out again and
        nothing of the deleted rows stays readable."""

    # --- integrity --------------------------------------------------------------------

    @abstractmethod
    def integrity_problems(self) -> list[str]:
        """Every problem the backend's checks find (storage pages, tables and meta,
        positions and batch ends, embedding sizes and finite values, JSON columns,
        held messages); empty when sound. Raises only ``StoreError`` subclasses."""

    def check(self) -> None:
        """Raise :class:`~osumem.errors.StoreCorruptError` listing every problem (at
        most 12, then a count), if any."""
        problems = [" ".join(p.split()) for p in self.integrity_problems()]
        if len(problems) > 12:
            problems = [*problems[:12], f"and {len(problems) - 12} more"]
        if problems:
            raise StoreCorruptError(f"{self.name}: corrupt: " + "; ".join(problems))

    @abstractmethod
    def content_hash(self) -> str:
        """SHA-256 over the stored content (not the snapshots, a cache) in a fixed
        order: equal hashes mean equal content."""

    # --- context manager ----------------------------------------------------------------

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def position_after_delete(position: int, deleted: Sequence[int]) -> int:
    """Where a position (or an end position: one past a step) lands after the steps at
    ``deleted`` (sorted, distinct) are deleted: moved down by the deleted positions
    before it. What :meth:`MemoryStore.delete_steps` does to positions, batch ends and
    digest ends alike."""
    import bisect

    return position - bisect.bisect_left(deleted, position)


def moved_time(given: float | None, stored: float | None) -> float:
    """The change time (``updated``) a change of a step writes: ``given``, unless it
    is missing or the one stored already; then now, or just after the stored one when
    the clock is not past it. Every change moves a step's change time, which is how
    another memory on the store tells which steps an edit changed."""
    if given is not None and not math.isnan(given) and given != stored:
        return float(given)
    now = time.time()
    if stored is not None and not math.isnan(stored) and now <= stored:
        now = math.nextafter(stored, math.inf)
    return now


#: The ``stop`` a load without one reads up to: past every position.
NO_STOP = 2**31 - 1


def step_versions(rows: Sequence[tuple[Any, Any]]) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """:meth:`MemoryStore.step_versions` from its ``(id, updated)`` rows."""
    ids = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
    updated = np.fromiter(
        (np.nan if r[1] is None else float(r[1]) for r in rows), dtype=np.float64, count=len(rows)
    )
    return ids, updated


def checked_positions(name: str, namespace: str, positions: Sequence[int], n: int) -> list[int]:
    """``positions`` sorted, after checking that they are distinct positions of a
    namespace of ``n`` steps (a :class:`~osumem.errors.StoreError` naming the first
    that is not), for the step-changing methods of a backend."""
    out = sorted(int(p) for p in positions)
    for a, b in itertools.pairwise(out):
        if a == b:
            raise StoreError(f"{name}: namespace {namespace!r}: position {a} given twice")
    for p in out:
        if not 0 <= p < n:
            raise StoreError(f"{name}: namespace {namespace!r} holds positions 0..{n - 1}, not {p}")
    return out
