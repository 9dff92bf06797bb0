"""The memory store backends the conformance suite (``test_store_conformance.py``)
runs against, and the damage it does to them.

A backend here knows how to name a fresh store (a location ``Memory.open`` and
``open_store`` take), how to run a statement on it from outside (another connection,
as damage or another writer would), how to hold its write lock, whether a byte string
can still be read anywhere in its storage (``residue``: deleted means gone) and how to
turn a store back into one of the schema before step metadata. A new backend adds
a class with the same methods and its name to :data:`BACKENDS`; every conformance
test then runs against it too.
"""

from __future__ import annotations

import hashlib
import sqlite3
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from osumem.errors import ForeignStoreError, NewerSchemaError, StoreCorruptError


class SQLiteBackend:
    """The SQLite file backend."""

    name = "sqlite"
    #: Damage this backend can hold (SQLite's TEXT may hold bytes that are not UTF-8, its
    #: blobs any float32 values).
    capabilities = frozenset({"invalid_text", "nan_vector", "erased_files"})
    #: Damage statements written otherwise for this backend (name → statement, params).
    damage: ClassVar[dict[str, tuple[str, tuple[Any, ...]]]] = {}
    #: The session fixture this backend needs (a running server), or None.
    fixture: str | None = None

    def location(self, root: Path, name: str = "mem") -> str:
        """A location for a new store under ``root``."""
        return str(root / f"{name}.db")

    def execute(self, location: str, statement: str, params: Sequence[Any] = ()) -> None:
        """Run one statement on the store from another connection and commit it."""
        con = sqlite3.connect(location)
        try:
            con.execute(statement, tuple(params))
            con.commit()
        finally:
            con.close()

    def residue(self, location: str, needle: bytes) -> bool:
        """Whether ``needle`` can still be read anywhere in the store's files (the
        database, its write-ahead log), deleted rows and free pages included."""
        for suffix in ("", "-wal", "-journal"):
            path = Path(location + suffix)
            if path.exists() and needle in path.read_bytes():
                return True
        return False

    def drop_metadata_table(self, location: str) -> None:
        """Make the store one of the schema before step metadata (migration 0005)."""
        con = sqlite3.connect(location)
        try:
            con.execute("DROP TRIGGER step_metadata_follows_steps")
            con.execute("DROP TABLE step_metadata")
            con.commit()
        finally:
            con.close()

    @contextmanager
    def write_lock(self, location: str) -> Iterator[None]:
        """Hold the store's write lock from another connection."""
        con = sqlite3.connect(location, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            con.execute("ROLLBACK")
            con.close()


class PostgresBackend:
    """The Postgres backend: every store is its own schema of the test server's
    database ``osumem`` (the session fixture ``pg_server`` starts the server)."""

    name = "postgres"
    #: A UTF8 database holds valid text only, pgvector refuses NaN and infinities, and
    #: deleted rows stay in the table files until VACUUM reuses their space.
    capabilities: frozenset[str] = frozenset()
    #: The HNSW index casts every embedding to the store's dimension, so a vector of
    #: another size can be written only once the index is gone.
    damage: ClassVar[dict[str, tuple[str, tuple[Any, ...]]]] = {
        "short blob": (
            "DROP INDEX steps_embedding_hnsw; UPDATE steps SET embedding = '[0]' WHERE id = 3",
            (),
        )
    }
    fixture = "pg_server"
    server: Any = None

    def bind(self, server: Any) -> PostgresBackend:
        self.server = server
        return self

    def location(self, root: Path, name: str = "mem") -> str:
        """A URL of a new store: a schema named after ``root``/``name``."""
        schema = "t_" + hashlib.sha256(str(root / name).encode()).hexdigest()[:20]
        return self.server.url(schema=schema)

    def _connect(self, location: str, **kwargs: Any) -> Any:
        import psycopg

        from osumem.memory.backends.postgres.connection import parse_location

        loc = parse_location(location)
        con = psycopg.connect(loc.conninfo, **kwargs)
        con.execute(f'SET search_path TO "{loc.schema}", public')
        return con

    def execute(self, location: str, statement: str, params: Sequence[Any] = ()) -> None:
        """Run one statement on the store from another connection and commit it."""
        with self._connect(location, autocommit=True) as con:
            if params:
                con.execute(statement.replace("?", "%s"), tuple(params))
            else:  # may be several statements
                con.execute(statement)

    def drop_metadata_table(self, location: str) -> None:
        """Make the store one of the schema before step metadata (migration 0005)."""
        self.execute(location, "DROP TABLE step_metadata")

    def residue(self, location: str, needle: bytes) -> bool:
        """Whether ``needle`` can be read by a query of the store's tables (their dead
        row versions are Postgres's: see the capability)."""
        text = needle.decode()
        with self._connect(location, autocommit=True) as con:
            for table, column in (
                ("steps", "text"),
                ("step_metadata", "metadata"),
                ("snapshots", "encode(payload, 'escape')"),
            ):
                found = con.execute(
                    f"SELECT 1 FROM {table} WHERE strpos({column}, %s) > 0 LIMIT 1", (text,)
                ).fetchone()
                if found:
                    return True
        return False

    @contextmanager
    def write_lock(self, location: str) -> Iterator[None]:
        """Hold the store's lock exclusively from another connection (as a whole-store
        writer does)."""
        from osumem.memory.backends.postgres.connection import parse_location, store_lock_key

        with self._connect(location, autocommit=True) as con:
            key = store_lock_key(parse_location(location).schema)
            con.execute("SELECT pg_advisory_lock(%s)", (key,))
            try:
                yield
            finally:
                con.execute("SELECT pg_advisory_unlock(%s)", (key,))


#: A small agent log: a request, a tool call and its result, a closing message.
LOG = [
    {"role": "user", "content": "cancel reservation ABC123"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "function": {"name": "cancel", "arguments": '{"rid": "ABC123"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "cancelled"},
    {"role": "assistant", "content": "Done: ABC123 is cancelled."},
]


#: The backends every conformance test runs against, by name.
BACKENDS: dict[str, Any] = {"sqlite": SQLiteBackend(), "postgres": PostgresBackend()}


def float32_blob(values: Sequence[float]) -> bytes:
    """An embedding as stored: little-endian float32 values."""
    return struct.pack(f"<{len(values)}f", *values)


#: Damage a store's schema or meta can suffer: name → (statement, error type, message).
SCHEMA_DAMAGE = {
    "dropped table": ("DROP TABLE batches", StoreCorruptError, "missing"),
    "renamed table": ("ALTER TABLE steps RENAME TO steps_old", StoreCorruptError, "missing"),
    "dropped meta": ("DROP TABLE meta", StoreCorruptError, "meta"),
    "bad meta dim": ("UPDATE meta SET value='abc' WHERE key='dim'", StoreCorruptError, "dim"),
    "missing meta row": ("DELETE FROM meta WHERE key='model_id'", StoreCorruptError, "model_id"),
    "newer schema": (
        "UPDATE meta SET value='7' WHERE key='schema_version'",
        NewerSchemaError,
        "schema version 7",
    ),
    "foreign format": (
        "UPDATE meta SET value='other' WHERE key='format'",
        ForeignStoreError,
        "not an osumem memory store",
    ),
}

#: Damage a store's rows can suffer: name → (statement, parameters, message, capability
#: the backend needs to hold it or None). Embeddings here are 16-d.
ROW_DAMAGE: dict[str, tuple[str, tuple[Any, ...], str, str | None]] = {
    "non-JSON pending": (
        "INSERT INTO pending (ns, messages) VALUES ('default', '{not json')",
        (),
        "held messages",
        None,
    ),
    "short blob": (
        "UPDATE steps SET embedding = ? WHERE id = 3",
        (b"\x00" * 4,),
        "embedding",
        None,
    ),
    "NaN vector": (
        "UPDATE steps SET embedding = ? WHERE id = 5",
        (float32_blob([float("nan")] * 16),),
        "non-finite",
        "nan_vector",
    ),
    "bad entities": ("UPDATE steps SET entities = 'nope' WHERE id = 2", (), "entities", None),
    "bad metadata": (
        "UPDATE step_metadata SET metadata = '[1]' WHERE id = 2",
        (),
        "metadata",
        None,
    ),
    "invalid UTF-8 text": (
        "UPDATE steps SET text = CAST(x'c328ff' AS TEXT) WHERE id = 2",
        (),
        "UTF-8",
        "invalid_text",
    ),
}


# The fixtures of every conformance test module: ``from store_backends import
# backend_fixture, location_fixture`` registers them as ``backend`` (one per backend,
# a server backend bound to the session's server) and ``location`` (a fresh store's).
@pytest.fixture(name="backend", scope="module", params=sorted(BACKENDS))
def backend_fixture(request: pytest.FixtureRequest) -> Any:
    found = BACKENDS[request.param]
    if found.fixture is not None:  # a server backend: the session's server
        found.bind(request.getfixturevalue(found.fixture))
    return found


@pytest.fixture(name="location")
def location_fixture(backend: Any, tmp_path: Path) -> str:
    return str(backend.location(tmp_path))
