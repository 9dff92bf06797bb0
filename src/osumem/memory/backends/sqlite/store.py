"""The SQLite implementation of :class:`~osumem.memory.backends.base.MemoryStore`:
one file (or RAM).

Why SQLite: it ships with Python, gives atomic transactions and survives a killed
writer. The store runs in WAL mode with ``synchronous=FULL``; every write is one
``BEGIN IMMEDIATE`` … ``COMMIT`` transaction (the read-modify-write of positions and
held messages included), so a step is either wholly stored and acknowledged, or not
stored at all, and concurrent writers never interleave inside one add.

What is stored (tables in :mod:`~osumem.memory.backends.sqlite.schema`):

- ``meta``: the format name, schema version, library version that created the store,
  the encoder's model id and embedding dimension.
- ``steps``: one row per step: a global step id, the namespace, the position inside
  the namespace (0, 1, 2, … without gaps), the add-batch that wrote it, role, text,
  tool action, argument dict (JSON), tool signature, entities (sorted JSON list),
  subgoal, source episode, token cost and the L2-normalised float32 embedding (a blob
  of ``dim`` little-endian float32 values).
- ``batches``: the end position of every add-batch per namespace (a reopened memory
  replays the retriever's ``fit``/``update`` calls along these boundaries).
- ``pending``: messages held back by the message reader, per namespace, stored in the
  same transaction.
- ``digests``: the content hash (or caller-given id) of every log added as a log.
- ``snapshots``: per namespace, a cache of the retriever's structure (see
  :mod:`osumem.memory.snapshot`); not part of :meth:`SQLiteStore.content_hash`.

A file on a read-only medium (or opened with ``read_only=True``) is opened for
queries only. Nothing here is pickled; a store is readable with any SQLite client.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import (
    IncompatibleStoreError,
    StoreBusyError,
    StoreError,
    StoreIOError,
)
from osumem.memory.backends.base import NO_STOP, step_versions
from osumem.memory.backends.codec import (
    check_meta,
    decode_held,
    discarded,
    hash_tables,
    snapshot_row,
)
from osumem.memory.backends.sqlite import schema, sql
from osumem.memory.backends.sqlite.connection import Connection, SQLiteSettings, guarded
from osumem.memory.backends.sqlite.edits import SQLiteEdits
from osumem.memory.backends.sqlite.integrity import collect_problems
from osumem.memory.backends.sqlite.rows import (
    READ_CHUNK,
    decode_pending,
    decode_steps,
    encode_pending,
    metadata_params,
    read_step_rows,
    step_params,
)
from osumem.memory.rows import AddBatch, AddContext, NamespaceData, SnapshotRow


def _library_version() -> str:
    from osumem import __version__

    return __version__


class SQLiteStore(SQLiteEdits):
    """A SQLite-backed step store. ``path=None`` keeps everything in memory.

    Args:
        path: the database file (created if missing) or ``None``.
        synchronous: SQLite ``synchronous`` pragma (``OFF``, ``NORMAL``, ``FULL``,
            ``EXTRA``); ``FULL`` (default) makes every acknowledged transaction durable
            even across power loss.
        timeout: seconds to wait for a lock held by another connection before
            :class:`~osumem.errors.StoreBusyError`.
        read_only: open for reading only (also chosen automatically when the file or
            its folder cannot be written, e.g. a read-only mount).

    Raises:
        ConfigError: a bad setting.
        DataFileError: the path is a folder, its folder is missing, or a read-only
            open names a missing file.
        StoreError: one of its typed subclasses (busy, read-only, I/O, corrupt,
            foreign, newer schema) when the file cannot be opened as a store.
    """

    backend = "sqlite"

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        synchronous: str = "FULL",
        timeout: float = 30.0,
        read_only: bool = False,
    ) -> None:
        if isinstance(synchronous, str):
            synchronous = synchronous.upper()
        settings = SQLiteSettings(synchronous=synchronous, timeout=timeout, read_only=read_only)
        self.conn = Connection(None if path is None else Path(path), settings)
        try:
            present = schema.initialise(self.conn, _library_version())
        except sqlite3.Error as exc:
            err = self.conn.translate(exc)
            self.conn.abandon()
            raise err from exc
        except UnicodeDecodeError as exc:
            err2 = self.conn.undecodable(exc)
            self.conn.abandon()
            raise err2 from exc
        except BaseException:
            self.conn.abandon()
            raise
        self.present = frozenset(present)
        #: ``data_version`` as read in the open write transaction (which one, value):
        #: with the write lock held no other connection commits, so it cannot move
        self._tx_version: tuple[int, int] | None = None
        #: where the last append left the database: (the moment, as ``data_version``,
        #: ``total_changes`` and the connection's rollbacks; namespace; its next
        #: position; the next step id)
        self._tail: tuple[tuple[int, int, int], str, int, int] | None = None

    # --- identity and lifecycle -------------------------------------------------------

    @property
    def path(self) -> Path | None:
        """The database file (``None`` in memory)."""
        return self.conn.path

    @property
    def location(self) -> str:
        return ":memory:" if self.conn.path is None else str(self.conn.path)

    @property
    def persistent(self) -> bool:
        return self.conn.path is not None

    def close(self) -> None:
        """Checkpoint the write-ahead log (a clean close leaves no ``-wal`` content) and
        close the connection (idempotent)."""
        self.conn.close()

    def discard(self) -> None:
        self.conn.discard()

    def checkpoint(self, *, truncate: bool = False) -> None:
        """Copy the write-ahead log into the database file (``PASSIVE``, or
        ``TRUNCATE``, which also empties the ``-wal`` file)."""
        self.conn.checkpoint(truncate=truncate)

    # --- transactions -----------------------------------------------------------------

    @contextmanager
    def transaction(self, namespace: str | None = None) -> Iterator[None]:
        """One ``BEGIN IMMEDIATE`` transaction: SQLite locks the whole file for every
        writer, whatever ``namespace`` the block writes."""
        with self.conn.transaction():
            yield

    @property
    def _sees_uncommitted(self) -> bool:
        # the threads share one connection: another thread's open transaction is
        # visible to this thread's reads
        return bool(self.conn.in_any_transaction)

    # --- meta -------------------------------------------------------------------------

    @guarded
    def data_version(self) -> int:
        """SQLite's ``data_version``: changes whenever another connection commits (read
        once per write transaction: under its lock nobody else commits). Only the thread
        that began the transaction reads or keeps that one value: another thread's read
        may have run before the transaction began (a server's reader threads share the
        connection), and another connection may have committed in between."""
        conn = self.conn
        memo = self._tx_version
        own = conn.in_own_transaction
        if own and memo is not None and memo[0] == conn.transactions:
            return memo[1]
        version = int(conn.execute(sql.DATA_VERSION).fetchone()[0])
        if own and not conn.read_only:
            self._tx_version = (conn.transactions, version)
        return version

    def _moment(self) -> tuple[int, int, int]:
        """Inside a write transaction: what says whether the database moved since
        another moment of this store (another connection's commit moves
        ``data_version``, this one's own writes ``total_changes``, a rollback the
        count of rollbacks)."""
        return (self.data_version(), self.conn.raw.total_changes, self.conn.rollbacks)

    @guarded
    def meta(self) -> dict[str, str]:
        return schema.meta_rows(self.conn)

    @property
    def model_id(self) -> str:
        """Deprecated: :attr:`encoder_id`."""
        warnings.warn(
            "MemoryStore.model_id is deprecated; use MemoryStore.encoder_id",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.encoder_id

    # --- reading ----------------------------------------------------------------------

    @guarded
    def namespaces(self) -> list[str]:
        return [r[0] for r in self.conn.execute(sql.NAMESPACES).fetchall()]

    @guarded
    def n_steps(self, namespace: str) -> int:
        """Number of steps stored in ``namespace`` (positions are 0..n-1, so this is one
        index lookup, not a count)."""
        (n,) = self.conn.execute(sql.N_STEPS, (namespace,)).fetchone()
        return int(n)

    @guarded
    def count_role(self, namespace: str, role: str, start: int = 0) -> int:
        (n,) = self.conn.execute(sql.COUNT_ROLE, (namespace, start, role)).fetchone()
        return int(n)

    @guarded
    def pending(self, namespace: str) -> list[dict[str, Any]]:
        row = self.conn.execute(sql.SELECT_PENDING, (namespace,)).fetchone()
        if row is None:
            return []
        return decode_pending(row[0], self.name, namespace)

    @guarded
    def has_digest(self, namespace: str, digest: str) -> bool:
        if not self._has_digests:
            return False
        return self.conn.execute(sql.HAS_DIGEST, (namespace, digest)).fetchone() is not None

    @guarded
    def digests(self, namespace: str) -> list[tuple[str, int]]:
        if not self._has_digests:
            return []
        rows = self.conn.execute(sql.SELECT_DIGESTS, (namespace,)).fetchall()
        return [(str(d), int(e)) for d, e in rows]

    @guarded
    def step_ids(self, namespace: str | None = None) -> list[int]:
        if namespace is None:
            return [r[0] for r in self.conn.execute(sql.STEP_IDS)]
        return [r[0] for r in self.conn.execute(sql.NAMESPACE_STEP_IDS, (namespace,))]

    @guarded
    def load(self, namespace: str, start: int = 0, stop: int | None = None) -> NamespaceData:
        query = sql.SELECT_STEPS if self._has_metadata else sql.SELECT_STEPS_NO_METADATA
        end = NO_STOP if stop is None else stop
        dim = self.dim
        where = f"{self.name}: corrupt: namespace {namespace!r}"
        cursor = self.conn.execute(query, (namespace, start, end))
        expected = max(0, min(self.n_steps(namespace), end) - start)
        read = read_step_rows(iter(lambda: cursor.fetchmany(READ_CHUNK), []), expected, dim)
        ends = [r[0] for r in self.conn.execute(sql.SELECT_BATCH_ENDS, (namespace, start, end))]
        if read is None:  # a blob of the wrong size: decoded whole, to name the first bad row
            cursor.close()  # the read stopped partway: its statement is not left open
            rows = self.conn.execute(query, (namespace, start, end)).fetchall()
            return decode_steps(rows, ends, start=start, dim=dim, where=where)
        rows, vectors = read
        return decode_steps(rows, ends, start=start, dim=dim, where=where, embeddings=vectors)

    @guarded
    def step_versions(self, namespace: str) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        query = sql.STEP_VERSIONS if self._has_metadata else sql.STEP_VERSIONS_NO_METADATA
        return step_versions(self.conn.execute(query, (namespace,)).fetchall())

    # --- writing ----------------------------------------------------------------------

    @guarded
    def _append(self, add: AddBatch) -> list[int]:
        conn = self.conn
        namespace, rows, emb, encoder_id = add.namespace, add.rows, add.embeddings, add.encoder_id
        with conn.transaction(joined=add.joined):
            # the recorded encoder, read under the write lock unless a committed read
            # already fixed it (it never changes after the first add)
            fixed = self._fixed_encoder
            if fixed is None:
                meta = schema.meta_rows(conn)
                check_meta(self.name, meta)
                fixed = (meta["model_id"], int(meta["dim"]))
            model, dim = fixed
            if len(rows):
                if not model:
                    conn.executemany(
                        sql.UPDATE_META, [(encoder_id, "model_id"), (str(emb.shape[1]), "dim")]
                    )
                    dim = emb.shape[1]
                elif model != encoder_id or dim != emb.shape[1]:
                    raise IncompatibleStoreError(
                        f"{self.name}: made with encoder {model!r} "
                        f"(dim {dim}); got {encoder_id!r} (dim {emb.shape[1]})"
                    )
            # the namespace's next position and the next id: where the last append of
            # this store left them when nothing moved since (no other writer, no other
            # write or rollback of this one), else read
            tail = self._tail
            if tail is not None and tail[1] == namespace and tail[0] == self._moment():
                start, first = tail[2], tail[3]
            else:
                start = self.n_steps(namespace)
                (first,) = conn.execute(sql.NEXT_STEP_ID, (sql.RETIRED_ID_KEY,)).fetchone()
            batch = 0
            if len(rows):
                cur = conn.execute(sql.INSERT_BATCH, (namespace, start + len(rows)))
                batch = int(cur.lastrowid or 0)
            ids = list(range(first, first + len(rows)))
            conn.executemany(
                sql.INSERT_STEP,
                [
                    step_params(ids[i], namespace, start + i, batch, r, emb[i])
                    for i, r in enumerate(rows)
                ],
            )
            if self._has_metadata:
                conn.executemany(
                    sql.INSERT_METADATA,
                    [metadata_params(i, r) for i, r in zip(ids, rows, strict=False)],
                )
            if add.pending is not None:
                self._set_pending(namespace, add.pending, add.pending_sources)
            if add.digest is not None and self._has_digests:
                conn.execute(sql.INSERT_DIGEST, (namespace, add.digest, start + len(rows)))
            self._tail = (self._moment(), namespace, start + len(rows), first + len(rows))
        self.last_append = (namespace, start)
        return ids

    def _set_pending(
        self,
        namespace: str,
        messages: Sequence[Mapping[str, Any]],
        sources: Sequence[str | None] | None,
    ) -> None:
        conn = self.conn
        if messages:
            conn.execute(sql.UPSERT_PENDING, (namespace, encode_pending(messages)))
        else:
            conn.execute(sql.DELETE_PENDING, (namespace,))
        if not self._has_held_sources:
            return
        if messages and sources is not None and all(isinstance(x, str) for x in sources):
            conn.execute(
                sql.UPSERT_HELD_SOURCES,
                (namespace, json.dumps(list(sources), ensure_ascii=False)),
            )
        else:
            conn.execute(sql.DELETE_HELD_SOURCES, (namespace,))

    @guarded
    def pending_with_sources(self, namespace: str) -> tuple[list[dict[str, Any]], list[str | None]]:
        query = (
            sql.SELECT_PENDING_WITH_SOURCES
            if self._has_held_sources
            else (sql.SELECT_PENDING_NO_SOURCES)
        )
        row = self.conn.execute(query, (namespace,)).fetchone()
        if row is None:
            return [], []
        return decode_held(row[0], row[1], self.name, namespace)

    @guarded
    def add_context(self, namespace: str, digest: str | None) -> AddContext:
        query = sql.add_context(self._has_digests, self._has_held_sources)
        version, logged, messages, sources, n = self.conn.execute(
            query, (namespace, digest)
        ).fetchone()
        held, of = decode_held(messages, sources, self.name, namespace)
        return AddContext(int(version), logged is not None, held, of, int(n))

    @guarded
    def discard_pending(self, namespace: str) -> list[dict[str, Any]]:
        with self.conn.transaction():
            row = self.conn.execute(sql.SELECT_PENDING, (namespace,)).fetchone()
            self.conn.execute(sql.DELETE_PENDING, (namespace,))
            if self._has_held_sources:
                self.conn.execute(sql.DELETE_HELD_SOURCES, (namespace,))
        return [] if row is None else discarded(row[0])

    @guarded
    def delete_namespace(self, namespace: str) -> int:
        present = self._present()
        with self.conn.transaction():
            n = self.n_steps(namespace)
            ids = [i for i, _ in self.conn.execute(sql.IDS_FROM, (namespace, 0))]
            for table in schema.NAMESPACED:
                if present.get(table, True):
                    self.conn.execute(sql.delete_namespace(table), (namespace,))
            self._retire(ids)
            self._edited(namespace)
        return n

    # --- snapshots (a cache of the retriever's structure) -------------------------------

    @guarded
    def snapshot(self, namespace: str) -> SnapshotRow | None:
        if not self._has_snapshots:
            return None
        return snapshot_row(self.conn.execute(sql.SELECT_SNAPSHOT, (namespace,)).fetchone())

    def save_snapshot(self, namespace: str, row: SnapshotRow) -> bool:
        if not self.conn.is_open or self.read_only or not self._has_snapshots:
            return False
        values = (namespace, row.steps, row.config, row.fingerprint, row.checksum, row.payload)
        try:
            with self.conn.without_waiting(), self.conn.transaction():
                self.conn.execute(sql.REPLACE_SNAPSHOT, values)
        except (StoreError, sqlite3.Error):
            return False
        return True

    # --- checks -----------------------------------------------------------------------

    def integrity_problems(self) -> list[str]:
        """Every problem found by SQLite's ``integrity_check`` and the store's own checks
        (tables, columns and meta; positions 0..n-1 per namespace and batch ends; blob
        sizes and finite vectors; JSON columns; held messages); empty when sound.

        Raises only :class:`~osumem.errors.StoreError` subclasses (a page SQLite cannot
        even read is reported as corrupt)."""
        if not self.conn.is_open:
            raise StoreError(f"{self.name}: the store is closed")
        problems: list[str] = []
        try:
            collect_problems(self.conn, problems, _library_version())
        except sqlite3.Error as exc:
            err = self.conn.translate(exc)
            if isinstance(err, StoreBusyError | StoreIOError) and "SQLite error" not in str(err):
                raise err from exc
            problems.append(f"SQLite cannot read the file ({exc})")
        except StoreError as exc:
            if isinstance(exc, StoreBusyError):
                raise
            problems.append(str(exc).replace(f"{self.name}: ", "").replace("corrupt: ", ""))
        except UnicodeDecodeError as exc:
            problems.append(f"a text value is not valid UTF-8 ({exc.reason} at byte {exc.start})")
        except (ValueError, TypeError, KeyError, OverflowError, MemoryError) as exc:
            problems.append(f"unreadable content ({type(exc).__name__}: {exc})")
        return problems

    @guarded
    def content_hash(self) -> str:
        h = hashlib.sha256()
        tables = hash_tables(set(self.present))
        for table, order in tables:
            h.update(table.encode())
            for row in self.conn.execute(sql.select_all(table, order)):
                h.update(repr(row).encode())
        return h.hexdigest()
