"""The Postgres implementation of :class:`~osumem.memory.backends.base.MemoryStore`:
one schema of one database, shared by every process and host that opens its URL.

Why Postgres: several servers and agents on several machines share one memory, on the
database engine teams already run; pgvector keeps the embeddings (bit-exact float32)
and an HNSW index for nearest-neighbour queries over large namespaces.

A location is a libpq URL with an optional ``schema`` (default ``osumem``):
``postgresql://user:password@host:5432/dbname?schema=team_a``. The tables are those of
the SQLite store (:mod:`~osumem.memory.backends.postgres.schema`) plus ``versions``,
one row per namespace that is both its write lock and its change counter. Every write
is one transaction under the locks described in
:mod:`~osumem.memory.backends.postgres.connection`; positions and ids are assigned
inside it. :meth:`PostgresStore.data_version` is the sum of the namespace versions
minus the ones this store's own commits added.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import IncompatibleStoreError, StoreError
from osumem.memory.backends.base import NO_STOP, step_versions
from osumem.memory.backends.codec import (
    check_meta,
    decode_held,
    decode_pending,
    decode_steps,
    discarded,
    encode_pending,
    hash_tables,
    snapshot_row,
)
from osumem.memory.backends.postgres import schema, sql
from osumem.memory.backends.postgres.connection import (
    Connection,
    PostgresSettings,
    guarded,
    parse_location,
    psycopg,
    require_driver,
)
from osumem.memory.backends.postgres.edits import PostgresEdits
from osumem.memory.backends.postgres.integrity import collect_problems
from osumem.memory.backends.postgres.rows import (
    PgVector,
    decode_vectors,
    metadata_params,
    register_vector,
    step_params,
)
from osumem.memory.rows import AddBatch, AddContext, NamespaceData, SnapshotRow


def _library_version() -> str:
    from osumem import __version__

    return __version__


class PostgresStore(PostgresEdits):
    """A memory store in a Postgres database (with pgvector).

    Args:
        location: ``postgresql://[user[:password]@][host][:port]/dbname[?schema=NAME]``
            (any libpq URL option may follow; osumem reads ``schema`` and ``ann``:
            ``ann=process`` makes large namespaces rank with an HNSW index built in
            the memory's process instead of pgvector's index in the database).
        timeout: seconds a write waits for another writer's lock (and a call for a
            pooled connection) before :class:`~osumem.errors.StoreBusyError`.
        connect_timeout: seconds to wait for the server.
        pool_size: most connections kept open.
        read_only: open for queries only.

    Raises:
        StoreLocationError: the URL does not parse.
        StoreConnectionError: the server cannot be reached or the database is missing.
        StoreAuthError: the server refused the login.
        MissingExtensionError: the database lacks pgvector and it cannot be created.
        StoreError: another typed subclass (corrupt, foreign, newer schema).
        MissingExtraError: psycopg is not installed (the ``postgres`` extra).
    """

    backend = "postgres"

    def __init__(
        self,
        location: str,
        *,
        timeout: float = 30.0,
        read_only: bool = False,
        connect_timeout: float = 10.0,
        pool_size: int = 8,
    ) -> None:
        require_driver()
        settings = PostgresSettings(
            timeout=timeout,
            read_only=read_only,
            connect_timeout=connect_timeout,
            pool_size=pool_size,
        )
        self._location = location
        self.conn = Connection(parse_location(location), settings)
        self._meta: dict[str, str] | None = None
        try:
            present = schema.initialise(self.conn, _library_version())
            self.conn.open_pool(lambda c: register_vector(c, self.conn.name))
        except BaseException:
            self.conn.close()
            self.discard()
            raise
        self.present = frozenset(present)

    # --- identity and lifecycle -------------------------------------------------------

    @property
    def location(self) -> str:
        return self._location

    @property
    def schema(self) -> str:
        """The Postgres schema the store's tables live in."""
        return self.conn.schema

    @property
    def persistent(self) -> bool:
        return True

    def discard(self) -> None:
        """Drop the store's tables (and its schema, if this open made it) when this open
        created them; otherwise do nothing."""
        if not self.conn.created:
            return
        try:
            raw = self.conn.connect()
        except StoreError:
            return
        try:
            with raw.transaction():
                if self.conn.created_schema:
                    raw.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
                else:
                    for table in (*schema.TABLES,):
                        raw.execute(f'DROP TABLE IF EXISTS "{self.schema}".{table} CASCADE')
        except psycopg.Error:
            pass
        finally:
            raw.close()
        self.conn.created = False

    # --- transactions -----------------------------------------------------------------

    @contextmanager
    def transaction(self, namespace: str | None = None) -> Iterator[None]:
        """One write transaction: with ``namespace``, that namespace's lock (writers of
        other namespaces go on); without, the whole store's."""
        with self.conn.transaction(namespace):
            yield

    # --- meta -------------------------------------------------------------------------

    @guarded
    def data_version(self) -> int:
        """The sum of the namespace versions, less those this store's commits added."""
        row = self.conn.fetchone(sql.DATA_VERSION)
        return int(row[0] if row else 0) - self.conn.own_versions()

    @guarded
    def meta(self) -> dict[str, str]:
        if self._meta is not None:
            return dict(self._meta)
        with self.conn.cursor() as c:
            meta = schema.meta_rows(c, self.name)
        if meta.get("model_id") and not self.in_transaction:  # fixed once committed
            self._meta = dict(meta)
        return meta

    # --- reading ----------------------------------------------------------------------

    @guarded
    def namespaces(self) -> list[str]:
        return [r[0] for r in self.conn.fetchall(sql.NAMESPACES)]

    @guarded
    def n_steps(self, namespace: str) -> int:
        row = self.conn.fetchone(sql.N_STEPS, (namespace,))
        return int(row[0]) if row else 0

    @guarded
    def count_role(self, namespace: str, role: str, start: int = 0) -> int:
        row = self.conn.fetchone(sql.COUNT_ROLE, (namespace, start, role))
        return int(row[0]) if row else 0

    @guarded
    def pending(self, namespace: str) -> list[dict[str, Any]]:
        row = self.conn.fetchone(sql.SELECT_PENDING, (namespace,))
        if row is None:
            return []
        return decode_pending(row[0], self.name, namespace)

    @guarded
    def has_digest(self, namespace: str, digest: str) -> bool:
        if not self._has_digests:
            return False
        return self.conn.fetchone(sql.HAS_DIGEST, (namespace, digest)) is not None

    @guarded
    def digests(self, namespace: str) -> list[tuple[str, int]]:
        if not self._has_digests:
            return []
        return [(str(d), int(e)) for d, e in self.conn.fetchall(sql.SELECT_DIGESTS, (namespace,))]

    @guarded
    def step_ids(self, namespace: str | None = None) -> list[int]:
        if namespace is None:
            return [int(r[0]) for r in self.conn.fetchall(sql.STEP_IDS)]
        return [int(r[0]) for r in self.conn.fetchall(sql.NAMESPACE_STEP_IDS, (namespace,))]

    @guarded
    def step_versions(self, namespace: str) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        query = sql.STEP_VERSIONS if self._has_metadata else sql.STEP_VERSIONS_NO_METADATA
        return step_versions(self.conn.fetchall(query, (namespace,)))

    @guarded
    def load(self, namespace: str, start: int = 0, stop: int | None = None) -> NamespaceData:
        where = f"{self.name}: corrupt: namespace {namespace!r}"
        dim = self.dim
        query = sql.SELECT_STEPS if self._has_metadata else sql.SELECT_STEPS_NO_METADATA
        end = NO_STOP if stop is None else stop
        with self.conn.snapshot() as c:  # the steps and their batch ends of one moment
            rows = c.cursor(binary=True).execute(query, (namespace, start, end)).fetchall()
            ends = [r[0] for r in c.execute(sql.SELECT_BATCH_ENDS, (namespace, start, end))]
        emb = decode_vectors([r[11] for r in rows], [r[0] for r in rows], dim, where)
        return decode_steps(rows, ends, start=start, dim=dim, where=where, embeddings=emb)

    # --- writing ----------------------------------------------------------------------

    @guarded
    def _append(self, add: AddBatch) -> list[int]:
        namespace, rows, emb, encoder_id = add.namespace, add.rows, add.embeddings, add.encoder_id
        with self.conn.transaction(namespace, joined=add.joined), self.conn.cursor() as c:
            if len(rows):
                self._claim_encoder(c, encoder_id, int(emb.shape[1]))
            else:
                check_meta(self.name, schema.meta_rows(c, self.name))
            start = int(c.execute(sql.N_STEPS, (namespace,)).fetchone()[0])
            ids: list[int] = []
            if len(rows):
                (batch,) = c.execute(sql.INSERT_BATCH, (namespace, start + len(rows))).fetchone()
                cur = c.cursor()
                cur.executemany(
                    sql.INSERT_STEP,
                    [
                        step_params(namespace, start + i, batch, r, emb[i])
                        for i, r in enumerate(rows)
                    ],
                    returning=True,
                )
                while True:
                    ids.append(int(cur.fetchone()[0]))
                    if not cur.nextset():
                        break
                if self._has_metadata:
                    c.cursor().executemany(
                        sql.INSERT_METADATA,
                        [metadata_params(i, r) for i, r in zip(ids, rows, strict=True)],
                    )
            if add.pending is not None:
                self._set_pending(c, namespace, add.pending, add.pending_sources)
            if add.digest is not None and self._has_digests:
                c.execute(sql.INSERT_DIGEST, (namespace, add.digest, start + len(rows)))
        self.last_append = (namespace, start)
        return ids

    # --- changing stored steps ------------------------------------------------------

    def _claim_encoder(self, c: Any, encoder_id: str, dim: int) -> None:
        """Record the encoder at the first add (and make the vector index), or check
        that it is the recorded one."""
        meta = schema.meta_rows(c, self.name)
        check_meta(self.name, meta)
        if not meta["model_id"]:
            if c.execute(sql.CLAIM_META, (encoder_id, "model_id")).rowcount:
                c.execute(sql.CLAIM_META, (str(dim), "dim"))
                schema.create_vector_index(c, self.schema, dim)
                self._meta = None
                return
            meta = schema.meta_rows(c, self.name)  # a concurrent first add got there first
        if meta["model_id"] != encoder_id or int(meta["dim"]) != dim:
            raise IncompatibleStoreError(
                f"{self.name}: made with encoder {meta['model_id']!r} "
                f"(dim {meta['dim']}); got {encoder_id!r} (dim {dim})"
            )

    def _set_pending(
        self,
        c: Any,
        namespace: str,
        messages: Sequence[Mapping[str, Any]],
        sources: Sequence[str | None] | None,
    ) -> None:
        if messages:
            c.execute(sql.UPSERT_PENDING, (namespace, encode_pending(messages)))
        else:
            c.execute(sql.DELETE_PENDING, (namespace,))
        if not self._has_held_sources:
            return
        if messages and sources is not None and all(isinstance(x, str) for x in sources):
            c.execute(
                sql.UPSERT_HELD_SOURCES, (namespace, json.dumps(list(sources), ensure_ascii=False))
            )
        else:
            c.execute(sql.DELETE_HELD_SOURCES, (namespace,))

    @guarded
    def pending_with_sources(self, namespace: str) -> tuple[list[dict[str, Any]], list[str | None]]:
        query = (
            sql.SELECT_PENDING_WITH_SOURCES
            if self._has_held_sources
            else sql.SELECT_PENDING.replace("SELECT messages", "SELECT messages, NULL")
        )
        row = self.conn.fetchone(query, (namespace,))
        if row is None:
            return [], []
        return decode_held(row[0], row[1], self.name, namespace)

    @guarded
    def add_context(self, namespace: str, digest: str | None) -> AddContext:
        query = sql.add_context(self._has_digests, self._has_held_sources)
        row = self.conn.fetchone(query, {"ns": namespace, "digest": digest})
        total, logged, messages, sources, n = row if row is not None else (0, None, None, None, 0)
        version = int(total) - self.conn.own_versions()  # as data_version() counts
        held, of = decode_held(messages, sources, self.name, namespace)
        return AddContext(version, logged is not None, held, of, int(n))

    @guarded
    def discard_pending(self, namespace: str) -> list[dict[str, Any]]:
        with self.conn.transaction(namespace), self.conn.cursor() as c:
            row = c.execute(sql.SELECT_PENDING, (namespace,)).fetchone()
            c.execute(sql.DELETE_PENDING, (namespace,))
            if self._has_held_sources:
                c.execute(sql.DELETE_HELD_SOURCES, (namespace,))
        return [] if row is None else discarded(row[0])

    @guarded
    def delete_namespace(self, namespace: str) -> int:
        present = self._present()
        with self.conn.transaction(namespace), self.conn.cursor() as c:
            n = int(c.execute(sql.N_STEPS, (namespace,)).fetchone()[0])
            for table in schema.NAMESPACED:
                if present.get(table, True):
                    c.execute(sql.delete_namespace(table), (namespace,))
            self._edited(c, namespace)
        return n

    # --- snapshots (a cache of the retriever's structure) -------------------------------

    @guarded
    def snapshot(self, namespace: str) -> SnapshotRow | None:
        if not self._has_snapshots:
            return None
        with self.conn.cursor() as c:
            return snapshot_row(
                c.cursor(binary=True).execute(sql.SELECT_SNAPSHOT, (namespace,)).fetchone()
            )

    def save_snapshot(self, namespace: str, row: SnapshotRow) -> bool:
        """Store the snapshot without waiting: ``False`` when another writer holds the
        store or the namespace, or the store is read-only (a snapshot is a cache, and
        not a write other stores need to follow)."""
        if not self.conn.is_open or self.read_only or not self._has_snapshots:
            return False
        values = (namespace, row.steps, row.config, row.fingerprint, row.checksum, row.payload)
        try:
            with self.conn.cursor() as c, c.transaction():
                if not c.execute(sql.TRY_STORE_LOCK, (self.conn.lock_key(),)).fetchone()[0]:
                    return False
                c.execute(sql.TRY_NAMESPACE_ROW, (namespace,))
                c.execute(sql.UPSERT_SNAPSHOT, values)
        except (StoreError, psycopg.Error):
            return False
        return True

    # --- nearest neighbours (the flat ranking of large namespaces) ----------------------

    def nearest(
        self, namespace: str
    ) -> Callable[[NDArray[np.float32], int, int], NDArray[np.int64]] | None:
        """A search of ``namespace``'s steps by inner product with a query, from the
        HNSW index: ``search(q, k, n)`` returns about the ``k`` best positions below
        ``n``, best first (a step index's external source)."""
        store = self

        if self.conn.location.ann == "process" or not 0 < self.dim <= schema.VECTOR_INDEX_MAX_DIM:
            return None  # asked for, or no index: the retrievers rank in process

        def search(q: NDArray[np.float32], k: int, n: int) -> NDArray[np.int64]:
            k = max(1, min(int(k), n))
            with store.conn.cursor() as c:  # one round trip (the session set ef_search)
                rows = c.execute(sql.NEAREST, (namespace, n, PgVector.of(q), k)).fetchall()
            return np.asarray([r[0] for r in rows], dtype=np.int64)

        return search

    # --- checks -----------------------------------------------------------------------

    def integrity_problems(self) -> list[str]:
        """Every problem the store's checks find (tables, columns and meta; positions
        0..n-1 per namespace and batch ends; embedding sizes and finite values; JSON
        columns; held messages); empty when sound."""
        if not self.conn.is_open:
            raise StoreError(f"{self.name}: the store is closed")
        problems: list[str] = []
        try:
            with self.conn.snapshot() as c:
                collect_problems(c, self.conn, problems, _library_version())
        except StoreError as exc:
            problems.append(str(exc).replace(f"{self.name}: ", "").replace("corrupt: ", ""))
        except psycopg.Error as exc:
            err = self.conn.translate(exc)
            if not isinstance(err, StoreError) or "corrupt" not in str(err):
                raise err from None
            problems.append(str(err).replace(f"{self.name}: ", "").replace("corrupt: ", ""))
        return problems

    @guarded
    def content_hash(self) -> str:
        h = hashlib.sha256()
        tables = hash_tables({t for t, has in self._present().items() if has})
        with self.conn.snapshot() as c:
            for table, order in tables:
                h.update(table.encode())
                for row in c.cursor(binary=True).execute(sql.select_all(table, order)):
                    h.update(repr(tuple(row)).encode())
        return h.hexdigest()
