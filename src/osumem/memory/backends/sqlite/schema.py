"""The SQLite store's schema: its tables, the ordered named migrations that build
them, and the checks that a file is a sound store of this version.

Schema version :data:`~osumem.memory.backends.base.SCHEMA_VERSION` holds nine tables.
A new file gets every migration in one transaction; a file written by an earlier
release gets the migrations it lacks, in order, each in its own transaction (a file
opened read-only is read as it is: the later tables are optional to a reader).
"""

from __future__ import annotations

from osumem.errors import ForeignStoreError, StoreCorruptError
from osumem.memory.backends.codec import (
    FIRST_TABLES,
    MIGRATIONS,
    Migration,
    check_format,
    meta_defaults,
)
from osumem.memory.backends.sqlite import sql
from osumem.memory.backends.sqlite.connection import Connection
from osumem.memory.rows import STEP_TEXT_COLUMNS

TABLES: dict[str, str] = {
    "meta": "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "steps": """CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY,
    ns TEXT NOT NULL,
    pos INTEGER NOT NULL CHECK (pos >= 0),
    batch INTEGER NOT NULL,
    role TEXT NOT NULL,
    text TEXT NOT NULL,
    tool_action TEXT NOT NULL,
    arguments TEXT NOT NULL,
    tool_signature TEXT NOT NULL,
    entities TEXT NOT NULL,
    subgoal TEXT NOT NULL,
    source TEXT NOT NULL,
    cost INTEGER NOT NULL CHECK (cost > 0),
    embedding BLOB NOT NULL,
    UNIQUE (ns, pos)
)""",
    "batches": """CREATE TABLE IF NOT EXISTS batches (
    id INTEGER PRIMARY KEY,
    ns TEXT NOT NULL,
    end_pos INTEGER NOT NULL,
    UNIQUE (ns, end_pos)
)""",
    "pending": "CREATE TABLE IF NOT EXISTS pending (ns TEXT PRIMARY KEY, messages TEXT NOT NULL)",
    # the key is the table (WITHOUT ROWID): an add writes one page of it, not a rowid
    # table's and its key index's; a store made before keeps its rowid table (the same
    # columns, key and statements)
    "digests": """CREATE TABLE IF NOT EXISTS digests (
    ns TEXT NOT NULL,
    digest TEXT NOT NULL,
    end_pos INTEGER NOT NULL,
    PRIMARY KEY (ns, digest)
) WITHOUT ROWID""",
    # the source of each held message of ``pending`` (a JSON list, in the same order);
    # no row: the held messages belong to whichever source adds next
    "held_sources": (
        "CREATE TABLE IF NOT EXISTS held_sources (ns TEXT PRIMARY KEY, sources TEXT NOT NULL)"
    ),
    # per step: the caller's metadata (a JSON object), when it was added and when it
    # was last changed (seconds since the epoch); a step without a row (stored before
    # this table existed) has no metadata and unknown times
    "step_metadata": """CREATE TABLE IF NOT EXISTS step_metadata (
    id INTEGER PRIMARY KEY,
    metadata TEXT NOT NULL,
    time REAL,
    updated REAL
)""",
    # per namespace: how many times its stored steps were changed other than by an add
    # (deleted, replaced, given new metadata, the namespace deleted); other memories on
    # the store reload a namespace whose count moved
    "namespace_edits": (
        "CREATE TABLE IF NOT EXISTS namespace_edits (ns TEXT PRIMARY KEY, edits INTEGER NOT NULL)"
    ),
    "snapshots": """CREATE TABLE IF NOT EXISTS snapshots (
    ns TEXT PRIMARY KEY,
    steps INTEGER NOT NULL,
    config TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    checksum TEXT NOT NULL,
    payload BLOB NOT NULL
)""",
}
#: The tables every store of this version has (the first release's).
REQUIRED = FIRST_TABLES
#: The columns of the required tables, in order.
COLUMNS = {
    "meta": ("key", "value"),
    "steps": ("id", "ns", "pos", "batch", *STEP_TEXT_COLUMNS, "cost", "embedding"),
    "batches": ("id", "ns", "end_pos"),
    "pending": ("ns", "messages"),
}
#: Statements a migration runs after creating its tables, by table: a deleted step
#: takes its metadata row along, whichever release deletes it.
TRIGGERS: dict[str, tuple[str, ...]] = {
    "step_metadata": (
        "CREATE TRIGGER IF NOT EXISTS step_metadata_follows_steps AFTER DELETE ON steps "
        "BEGIN DELETE FROM step_metadata WHERE id = old.id; END",
    ),
}
#: The tables holding per-namespace rows (``ns`` column), in content-hash order.
NAMESPACED = ("steps", "batches", "pending", "digests", "snapshots", "held_sources")


def apply(migration: Migration, conn: Connection, library_version: str) -> None:
    """Create the tables of ``migration`` (with their triggers; and the meta rows, with
    ``meta``)."""
    for table in migration.creates:
        conn.execute(TABLES[table])
        for statement in TRIGGERS.get(table, ()):
            conn.execute(statement)
    if "meta" in migration.creates:
        conn.executemany(sql.INSERT_META, meta_defaults(library_version))


def tables(conn: Connection) -> set[str]:
    """The tables the file holds."""
    return {r[0] for r in conn.execute(sql.TABLES)}


def initialise(conn: Connection, library_version: str) -> set[str]:
    """Create a new store, or check an existing one and apply the migrations it lacks;
    returns the tables present afterwards."""
    present = tables(conn)
    if not present:
        if conn.read_only:
            raise ForeignStoreError(f"{conn.name}: an empty file, not a memory store")
        with conn.transaction():  # re-checked under the write lock: creators may race
            if not tables(conn):
                for migration in MIGRATIONS:
                    apply(migration, conn, library_version)
        present = tables(conn)
    validate(conn, present, library_version)
    if not conn.read_only:
        for migration in MIGRATIONS:
            if not migration.applied(present):
                with conn.transaction():
                    apply(migration, conn, library_version)
                present.update(migration.creates)
    return present


def meta_rows(conn: Connection) -> dict[str, str]:
    """The ``meta`` table as a dict (a non-text row is corrupt)."""
    out: dict[str, str] = {}
    for key, value in conn.execute(sql.SELECT_META):
        if not isinstance(key, str) or not isinstance(value, str):
            raise StoreCorruptError(
                f"{conn.name}: corrupt: meta row {key!r} = {value!r} is not text"
            )
        out[key] = value
    return out


def validate(conn: Connection, present: set[str], library_version: str) -> None:
    """Refuse a file that is not a sound store of this version (cheap checks only)."""
    name = conn.name
    if "meta" not in present:
        if present & set(REQUIRED):
            raise StoreCorruptError(f"{name}: corrupt: table 'meta' is missing")
        raise ForeignStoreError(
            f"{name}: an SQLite file but not an osumem memory store (tables: {sorted(present)})"
        )
    check_format(name, meta_rows(conn), library_version)
    for table in REQUIRED:
        if table not in present:
            raise StoreCorruptError(f"{name}: corrupt: table {table!r} is missing")
        cols = tuple(r[1] for r in conn.execute(f"PRAGMA table_info({table})"))
        if cols != COLUMNS[table]:
            raise StoreCorruptError(
                f"{name}: corrupt: table {table!r} has columns {list(cols)}, "
                f"expected {list(COLUMNS[table])}"
            )
