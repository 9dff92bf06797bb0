"""The embedded persistent store of the agent memory: one SQLite file.

Why SQLite: it ships with Python, gives atomic transactions and survives a killed
writer. The store runs in WAL mode with ``synchronous=FULL``; every write is one
``BEGIN IMMEDIATE`` … ``COMMIT`` transaction (the read-modify-write of positions and
held messages included), so a step is either wholly stored and acknowledged, or not
stored at all, and concurrent writers never interleave inside one add.

What is stored (schema version :data:`SCHEMA_VERSION`):

- ``meta``: the format name, schema version, library version that created the store,
  the encoder's model id and embedding dimension.
- ``steps``: one row per step: a global step id, the namespace, the position inside
  the namespace (0, 1, 2, … without gaps), the add-batch that wrote it, role, text,
  tool action, argument dict (JSON), tool signature, entities (sorted JSON list),
  subgoal, source episode, token cost and the L2-normalised float32 embedding (a blob
  of ``dim`` little-endian float32 values).
- ``batches``: the end position of every add-batch per namespace. Reopening replays
  the retriever's ``fit``/``update`` calls along these boundaries, so a reopened memory
  rebuilds exactly the structure the writing session had (no re-encoding).
- ``pending``: messages held back by the message reader (a trailing tool call whose
  response has not arrived yet), per namespace, stored in the same transaction.
- ``digests``: the content hash (or caller-given id) of every log added, per
  namespace, so adding the same log twice can be recognised. Added after the first
  release; a store without it is still read (and gets it at its next write).
- ``snapshots``: per namespace, a cache of the retriever's incremental structure after
  some add-batch (arrays in NumPy's ``.npz`` format, no pickle) with the step count it
  covers, a key of the method's settings, a fingerprint of the steps it was built from
  and a SHA-256 of the payload. A reopened memory loads it and replays only the later
  batches; one that does not match in every respect is ignored. Not part of
  :meth:`MemoryStore.content_hash` (a cache, not content).

Failures are typed (all :class:`~osumem.errors.StoreError`): busy (another process held
the lock past the timeout), read-only, I/O, corrupt, foreign (not a memory store),
newer schema. A file on a read-only medium (or opened with ``read_only=True``) is
opened for queries only.

Nothing here is pickled; a store is readable with any SQLite client.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sqlite3
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from osumem.errors import (
    DataFileError,
    ForeignStoreError,
    IncompatibleStoreError,
    NewerSchemaError,
    StoreBusyError,
    StoreCorruptError,
    StoreError,
    StoreIOError,
    StoreReadOnlyError,
)
from osumem.memory.integrity import STEP_TEXT_COLUMNS, collect_problems, translate_error
from osumem.types import MemoryView

__all__ = [
    "SCHEMA_VERSION",
    "STORE_FORMAT",
    "ForeignStoreError",
    "IncompatibleStoreError",
    "MemoryStore",
    "NamespaceData",
    "NewerSchemaError",
    "StepRow",
    "StoreBusyError",
    "StoreCorruptError",
    "StoreError",
    "StoreIOError",
    "StoreIntegrityError",
    "StoreReadOnlyError",
]

#: The format name written into every store.
STORE_FORMAT = "osumem-memory"
#: Bumped whenever the schema changes incompatibly; stores of another version are refused.
SCHEMA_VERSION = 1
#: The error :meth:`MemoryStore.check` raises (the corrupt-store error under its old name).
StoreIntegrityError = StoreCorruptError
#: A passive WAL checkpoint runs after this many commits of one connection (SQLite's own
#: size-based auto-checkpoint runs as well), so a lost ``-wal`` file costs little.
CHECKPOINT_EVERY = 64

#: Page size of new stores: a step row (a 1.5 KB embedding at d = 384) fills 4 KB pages
#: badly (a quarter of each page unused); 16 KB pages waste a few percent.
PAGE_SIZE = 16384

_SQLITE_MAGIC = b"SQLite format 3\x00"

_TABLES: dict[str, str] = {
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
    "digests": """CREATE TABLE IF NOT EXISTS digests (
    ns TEXT NOT NULL,
    digest TEXT NOT NULL,
    end_pos INTEGER NOT NULL,
    PRIMARY KEY (ns, digest)
)""",
    # the source of each held message of ``pending`` (a JSON list, in the same order);
    # no row: the held messages belong to whichever source adds next
    "held_sources": "CREATE TABLE IF NOT EXISTS held_sources (ns TEXT PRIMARY KEY, sources TEXT NOT NULL)",
    "snapshots": """CREATE TABLE IF NOT EXISTS snapshots (
    ns TEXT PRIMARY KEY,
    steps INTEGER NOT NULL,
    config TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    checksum TEXT NOT NULL,
    payload BLOB NOT NULL
)""",
}
_REQUIRED = ("meta", "steps", "batches", "pending")
_COLUMNS = {
    "meta": ("key", "value"),
    "steps": ("id", "ns", "pos", "batch", *STEP_TEXT_COLUMNS, "cost", "embedding"),
    "batches": ("id", "ns", "end_pos"),
    "pending": ("ns", "messages"),
}

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True)
class StepRow:
    """One step as written to the store (all columns already validated)."""

    role: str
    text: str
    tool_action: str
    arguments_json: str
    tool_signature: str
    entities: tuple[str, ...]
    subgoal: str
    source: str
    cost: int


@dataclass(frozen=True)
class NamespaceData:
    """Everything stored for one namespace: its columnar view, step ids, arguments and
    the add-batch boundaries (end positions, increasing)."""

    view: MemoryView
    step_ids: NDArray[np.int64]
    arguments: tuple[str, ...]
    batch_ends: tuple[int, ...]


def _library_version() -> str:
    from osumem import __version__

    return __version__


def _guard(method: _F) -> _F:
    """Turn every ``sqlite3`` error of a store method into its typed store error."""

    @functools.wraps(method)
    def wrapper(self: MemoryStore, *args: Any, **kwargs: Any) -> Any:
        if self._conn is None:
            raise StoreError(f"{self._name}: the store is closed")
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc
        except UnicodeDecodeError as exc:
            raise self._undecodable(exc) from exc

    return wrapper  # type: ignore[return-value]


class MemoryStore:
    """A SQLite-backed step store. ``path=None`` keeps everything in memory.

    Args:
        path: the database file (created if missing) or ``None``.
        synchronous: SQLite ``synchronous`` pragma; ``FULL`` (default) makes every
            acknowledged transaction durable even across power loss.
        timeout: seconds to wait for a lock held by another connection before
            :class:`~osumem.errors.StoreBusyError`.
        read_only: open for reading only (also chosen automatically when the file or
            its folder cannot be written, e.g. a read-only mount).

    Raises:
        DataFileError: the path is a folder, its folder is missing, or a read-only
            open names a missing file.
        StoreError: one of its typed subclasses (busy, read-only, I/O, corrupt,
            foreign, newer schema) when the file cannot be opened as a store.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        synchronous: str = "FULL",
        timeout: float = 30.0,
        read_only: bool = False,
    ) -> None:
        self._conn: sqlite3.Connection | None = None
        self.path = None if path is None else Path(path)
        self._name = f"memory store {self.path if self.path is not None else ':memory:'}"
        self.timeout = float(timeout)
        self._depth = 0
        self._commits = 0
        self._has_digests = False
        self._has_snapshots = False
        self._has_held_sources = False
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise StoreError(f"synchronous: expected OFF|NORMAL|FULL|EXTRA, got {synchronous!r}")
        self.read_only = bool(read_only)
        self.created = False
        if self.path is None:
            if self.read_only:
                raise StoreError("read_only needs a store file")
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            self._conn = conn
            self._init_schema()
            return
        self._check_path()
        try:
            self._connect(synchronous.upper())
            self._init_schema()
        except sqlite3.Error as exc:
            err = self._translate(exc)
            self._abandon()
            raise err from exc
        except UnicodeDecodeError as exc:
            self._abandon()
            raise self._undecodable(exc) from exc
        except BaseException:
            self._abandon()
            raise

    # --- opening ---------------------------------------------------------------------

    def _check_path(self) -> None:
        assert self.path is not None
        if self.path.is_dir():
            raise DataFileError(f"{self._name}: is a directory")
        if not self.path.parent.exists():
            raise DataFileError(f"{self._name}: folder {self.path.parent} missing")
        exists = self.path.exists()
        if self.read_only and not exists:
            raise DataFileError(f"{self._name}: not found")
        if exists:
            try:
                with open(self.path, "rb") as fh:
                    head = fh.read(len(_SQLITE_MAGIC))
            except OSError as exc:
                raise StoreIOError(f"{self._name}: cannot read the file ({exc})") from None
            if head and head != _SQLITE_MAGIC[: len(head)]:
                raise ForeignStoreError(
                    f"{self._name}: not a readable SQLite database (no SQLite header)"
                )
        folder_ok = os.access(self.path.parent, os.W_OK)
        file_ok = not exists or os.access(self.path, os.W_OK)
        if not (folder_ok and file_ok):
            if not exists:
                raise StoreReadOnlyError(
                    f"{self._name}: cannot create a store in read-only folder {self.path.parent}"
                )
            self.read_only = True
        self.created = False
        if not exists:
            # exactly one of several processes opening a new store creates it: only that
            # one may remove the file again if its open fails
            try:
                os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                self.created = True
            except FileExistsError:
                pass
            except OSError as exc:
                raise StoreIOError(f"{self._name}: cannot create the file ({exc})") from None

    def _connect(self, synchronous: str) -> None:
        assert self.path is not None
        if not self.read_only:
            conn = sqlite3.connect(
                str(self.path), timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
            self._conn = conn
            if self.created:  # only a new, empty file takes a page size
                conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            return
        uri = self.path.resolve().as_uri() + "?mode=ro"
        conn = sqlite3.connect(
            uri, uri=True, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError as exc:
            # a WAL store on a read-only medium without its -shm file: read it as an
            # immutable file (what the last checkpoint holds)
            if (exc.sqlite_errorcode & 0xFF) not in (8, 14, 10):
                conn.close()
                raise
            conn.close()
            conn = sqlite3.connect(
                uri + "&immutable=1",
                uri=True,
                timeout=self.timeout,
                isolation_level=None,
                check_same_thread=False,
            )
        self._conn = conn

    def _abandon(self) -> None:
        """Close after a failed open; remove the file if this open created it."""
        if self._conn is not None:
            with suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
        if self.created and self.path is not None:
            remove_store_files(self.path)

    def _translate(self, exc: sqlite3.Error) -> StoreError:
        """The typed store error for an ``sqlite3`` error."""
        return translate_error(exc, self._name, self.timeout)

    def _undecodable(self, exc: UnicodeDecodeError) -> StoreCorruptError:
        return StoreCorruptError(
            f"{self._name}: corrupt: a text value is not valid UTF-8 ({exc.reason} at byte "
            f"{exc.start})"
        )

    def _tables(self) -> set[str]:
        assert self._conn is not None
        return {
            r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }

    def _init_schema(self) -> None:
        assert self._conn is not None
        tables = self._tables()
        if not tables:
            if self.read_only:
                raise ForeignStoreError(f"{self._name}: an empty file, not a memory store")
            with self.transaction():  # re-checked under the write lock: creators may race
                if not self._tables():
                    self._create()
            tables = self._tables()
        self._validate_schema(tables)
        if "digests" not in tables and not self.read_only:
            with self.transaction():
                self._conn.execute(_TABLES["digests"])
            tables.add("digests")
        self._has_digests = "digests" in tables
        if "snapshots" not in tables and not self.read_only:
            with self.transaction():
                self._conn.execute(_TABLES["snapshots"])
            tables.add("snapshots")
        self._has_snapshots = "snapshots" in tables
        if "held_sources" not in tables and not self.read_only:
            with self.transaction():
                self._conn.execute(_TABLES["held_sources"])
            tables.add("held_sources")
        self._has_held_sources = "held_sources" in tables

    def _create(self) -> None:
        assert self._conn is not None
        for statement in _TABLES.values():
            self._conn.execute(statement)
        self._conn.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            [
                ("format", STORE_FORMAT),
                ("schema_version", str(SCHEMA_VERSION)),
                ("library_version", _library_version()),
                ("model_id", ""),
                ("dim", "0"),
            ],
        )

    def _validate_schema(self, tables: set[str]) -> None:
        """Refuse a file that is not a sound store of this version (cheap checks only)."""
        if "meta" not in tables:
            if tables & set(_REQUIRED):
                raise StoreCorruptError(f"{self._name}: corrupt: table 'meta' is missing")
            raise ForeignStoreError(
                f"{self._name}: an SQLite file but not an osumem memory store "
                f"(tables: {sorted(tables)})"
            )
        meta = self._meta_raw()
        if meta.get("format") != STORE_FORMAT:
            raise ForeignStoreError(
                f"{self._name}: format {meta.get('format')!r}, expected {STORE_FORMAT!r}; "
                "not an osumem memory store"
            )
        version = meta.get("schema_version")
        if version != str(SCHEMA_VERSION):
            if version is None or not version.isdigit():
                raise StoreCorruptError(
                    f"{self._name}: corrupt: meta 'schema_version' is {version!r}"
                )
            raise NewerSchemaError(
                f"{self._name}: schema version {version} (written by osumem "
                f"{meta.get('library_version', '?')}); this osumem "
                f"({_library_version()}) reads version {SCHEMA_VERSION} only"
            )
        self._check_meta(meta)
        for table in _REQUIRED:
            if table not in tables:
                raise StoreCorruptError(f"{self._name}: corrupt: table {table!r} is missing")
            assert self._conn is not None
            cols = tuple(r[1] for r in self._conn.execute(f"PRAGMA table_info({table})"))
            if cols != _COLUMNS[table]:
                raise StoreCorruptError(
                    f"{self._name}: corrupt: table {table!r} has columns {list(cols)}, "
                    f"expected {list(_COLUMNS[table])}"
                )

    def _check_meta(self, meta: Mapping[str, str]) -> None:
        for key in ("model_id", "dim"):
            if key not in meta:
                raise StoreCorruptError(f"{self._name}: corrupt: meta row {key!r} is missing")
        dim = meta["dim"]
        if not (isinstance(dim, str) and dim.isdigit() and int(dim) < 1_000_000):
            raise StoreCorruptError(f"{self._name}: corrupt: meta 'dim' is {dim!r}")
        if not isinstance(meta["model_id"], str) or (int(dim) == 0) != (meta["model_id"] == ""):
            raise StoreCorruptError(
                f"{self._name}: corrupt: meta model_id {meta['model_id']!r} with dim {dim}"
            )

    def _meta_raw(self) -> dict[str, str]:
        assert self._conn is not None
        out: dict[str, str] = {}
        for key, value in self._conn.execute("SELECT key, value FROM meta"):
            if not isinstance(key, str) or not isinstance(value, str):
                raise StoreCorruptError(
                    f"{self._name}: corrupt: meta row {key!r} = {value!r} is not text"
                )
            out[key] = value
        return out

    # --- transactions --------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``), rolled back on any
        exception; nested calls become savepoints of the outer one."""
        if self._conn is None:
            raise StoreError(f"{self._name}: the store is closed")
        if self.read_only:
            raise StoreReadOnlyError(f"{self._name}: opened read-only, cannot write")
        conn = self._conn
        nested = self._depth > 0
        try:
            conn.execute(f"SAVEPOINT sp{self._depth}" if nested else "BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc
        self._depth += 1
        try:
            yield
        except BaseException:
            self._depth -= 1
            try:
                if nested:
                    conn.execute(f"ROLLBACK TO sp{self._depth}")
                    conn.execute(f"RELEASE sp{self._depth}")
                elif conn.in_transaction:
                    conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the original error is the one to report
            raise
        self._depth -= 1
        try:
            conn.execute(f"RELEASE sp{self._depth}" if nested else "COMMIT")
        except sqlite3.Error as exc:
            err = self._translate(exc)
            if not nested and conn.in_transaction:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise err from exc
        if not nested:
            self._commits += 1
            if self._commits % CHECKPOINT_EVERY == 0:
                self.checkpoint(truncate=False)

    @property
    def is_open(self) -> bool:
        """Whether the connection is open (``close`` not called yet)."""
        return self._conn is not None

    @property
    def in_transaction(self) -> bool:
        """Whether a :meth:`transaction` is open on this store."""
        return self._depth > 0

    def checkpoint(self, *, truncate: bool = False) -> None:
        """Copy the write-ahead log into the database file (``PASSIVE``, or ``TRUNCATE``
        which also empties the ``-wal`` file); skipped silently when readers block it."""
        if self._conn is None or self.read_only or self.path is None or self._depth:
            return
        mode = "TRUNCATE" if truncate else "PASSIVE"
        with suppress(sqlite3.Error):  # a busy checkpoint is retried at the next one
            self._conn.execute(f"PRAGMA wal_checkpoint({mode})")

    # --- meta -------------------------------------------------------------------------

    @_guard
    def data_version(self) -> int:
        """SQLite's ``data_version``: changes whenever another connection commits."""
        assert self._conn is not None
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    @_guard
    def meta(self) -> dict[str, str]:
        """The ``meta`` table as a dict."""
        return self._meta_raw()

    @property
    def encoder_id(self) -> str:
        """The encoder id recorded at the first add ("" while empty). The file keeps it
        in the meta row ``model_id``, its name since the first store format, so stores
        open in both directions between releases."""
        return self.meta().get("model_id", "")

    @property
    def model_id(self) -> str:
        """Deprecated: :attr:`encoder_id`."""
        warnings.warn(
            "MemoryStore.model_id is deprecated; use MemoryStore.encoder_id",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.encoder_id

    @property
    def dim(self) -> int:
        """The embedding dimension recorded at the first add (0 while empty)."""
        value = self.meta().get("dim", "0")
        if not value.isdigit():
            raise StoreCorruptError(f"{self._name}: corrupt: meta 'dim' is {value!r}")
        return int(value)

    # --- reading ---------------------------------------------------------------------

    @_guard
    def namespaces(self) -> list[str]:
        """Namespaces holding at least one step or held message, sorted."""
        assert self._conn is not None
        rows = self._conn.execute(
            "SELECT DISTINCT ns FROM steps UNION SELECT ns FROM pending ORDER BY 1"
        ).fetchall()
        return [r[0] for r in rows]

    @_guard
    def n_steps(self, namespace: str) -> int:
        """Number of steps stored in ``namespace`` (positions are 0..n-1, so this is one
        index lookup, not a count)."""
        assert self._conn is not None
        (n,) = self._conn.execute(
            "SELECT COALESCE(MAX(pos) + 1, 0) FROM steps WHERE ns = ?", (namespace,)
        ).fetchone()
        return int(n)

    @_guard
    def count_role(self, namespace: str, role: str, start: int = 0) -> int:
        """Number of steps with ``role`` in ``namespace`` at positions ``>= start`` (an
        index range scan over those positions only)."""
        assert self._conn is not None
        (n,) = self._conn.execute(
            "SELECT COUNT(*) FROM steps WHERE ns = ? AND pos >= ? AND role = ?",
            (namespace, start, role),
        ).fetchone()
        return int(n)

    @_guard
    def pending(self, namespace: str) -> list[dict[str, Any]]:
        """Messages held back for ``namespace`` (empty list when none)."""
        assert self._conn is not None
        row = self._conn.execute(
            "SELECT messages FROM pending WHERE ns = ?", (namespace,)
        ).fetchone()
        return [] if row is None else self._held_messages(row[0], namespace)

    def _held_messages(self, raw: Any, namespace: str) -> list[dict[str, Any]]:
        try:
            held = json.loads(raw)
        except (TypeError, ValueError):
            held = None
        if not isinstance(held, list) or not all(isinstance(m, dict) for m in held):
            raise StoreCorruptError(
                f"{self._name}: corrupt: held messages of namespace {namespace!r} are not "
                "a JSON list of messages (discard them with Memory.discard_held)"
            )
        return held

    @_guard
    def has_digest(self, namespace: str, digest: str) -> bool:
        """Whether a log with ``digest`` was added to ``namespace``."""
        if not self._has_digests:
            return False
        assert self._conn is not None
        row = self._conn.execute(
            "SELECT 1 FROM digests WHERE ns = ? AND digest = ?", (namespace, digest)
        ).fetchone()
        return row is not None

    @_guard
    def digests(self, namespace: str) -> list[tuple[str, int]]:
        """The log digests recorded for ``namespace`` as ``(digest, end position)``,
        ordered by end position then digest (what an export carries)."""
        if not self._has_digests:
            return []
        assert self._conn is not None
        rows = self._conn.execute(
            "SELECT digest, end_pos FROM digests WHERE ns = ? ORDER BY end_pos, digest",
            (namespace,),
        ).fetchall()
        return [(str(d), int(e)) for d, e in rows]

    @_guard
    def step_ids(self) -> list[int]:
        """Every stored step id, increasing."""
        assert self._conn is not None
        return [r[0] for r in self._conn.execute("SELECT id FROM steps ORDER BY id")]

    @_guard
    def load(self, namespace: str, start: int = 0) -> NamespaceData:
        """Read one namespace back as a columnar view (embeddings exactly as stored);
        with ``start``, only the steps at positions ``>= start`` (and the batch ends
        after ``start``). A damaged row raises :class:`StoreCorruptError`."""
        assert self._conn is not None
        rows = self._conn.execute(
            "SELECT id, pos, role, text, tool_action, arguments, tool_signature, entities, "
            "subgoal, source, cost, embedding FROM steps WHERE ns = ? AND pos >= ? ORDER BY pos",
            (namespace, start),
        ).fetchall()
        dim = self.dim
        n = len(rows)
        where = f"{self._name}: corrupt: namespace {namespace!r}"
        for k, r in enumerate(rows):
            if r[1] != start + k:
                raise StoreCorruptError(f"{where}: position {start + k} is missing")
            blob = r[11]
            if not isinstance(blob, bytes) or len(blob) != 4 * dim:
                size = len(blob) if isinstance(blob, bytes | str) else type(blob).__name__
                raise StoreCorruptError(
                    f"{where}: step id {r[0]} has a {size}-byte embedding, expected {4 * dim}"
                )
            for c, name in ((2, "role"), (3, "text"), (4, "tool_action"), (6, "tool_signature")):
                if not isinstance(r[c], str):
                    raise StoreCorruptError(f"{where}: step id {r[0]}: {name} is not text")
            if not isinstance(r[10], int) or r[10] <= 0:
                raise StoreCorruptError(f"{where}: step id {r[0]}: cost {r[10]!r}")
        emb = (
            np.frombuffer(b"".join(r[11] for r in rows), dtype="<f4")
            .reshape(n, dim)
            .astype(np.float32)
            if n
            else np.zeros((0, dim), dtype=np.float32)
        )
        if n and not np.isfinite(emb).all():
            bad = int(np.flatnonzero(~np.isfinite(emb).all(axis=1))[0])
            raise StoreCorruptError(f"{where}: step id {rows[bad][0]} has a non-finite embedding")
        entities = []
        decoded: dict[Any, frozenset[str]] = {}  # agent steps repeat few entity lists
        for r in rows:
            raw = r[7]
            got = decoded.get(raw) if isinstance(raw, str) else None
            if got is None:
                try:
                    ents = json.loads(raw)
                except (TypeError, ValueError):
                    ents = None
                if not isinstance(ents, list) or not all(isinstance(e, str) for e in ents):
                    raise StoreCorruptError(
                        f"{where}: step id {r[0]}: entities are not a JSON list"
                    )
                got = decoded[raw] = frozenset(ents)
            entities.append(got)
        cols = list(zip(*rows, strict=True)) if rows else [()] * 12

        def obj(values: Sequence[Any]) -> NDArray[Any]:
            arr = np.empty(n, dtype=object)
            arr[:] = list(values)
            return arr

        view = MemoryView(
            embeddings=emb,
            costs=np.asarray(cols[10], dtype=np.int64).reshape(n),
            tool_actions=obj(cols[4]),
            tool_signatures=obj(cols[6]),
            entities=tuple(entities),
            subgoals=obj(cols[8]),
            sources=obj(cols[9]),
            roles=obj(cols[2]),
            texts=obj(cols[3]),
        )
        ends = tuple(
            r[0]
            for r in self._conn.execute(
                "SELECT end_pos FROM batches WHERE ns = ? AND end_pos > ? ORDER BY end_pos",
                (namespace, start),
            )
        )
        return NamespaceData(
            view=view,
            step_ids=np.asarray(cols[0], dtype=np.int64).reshape(n),
            arguments=tuple(cols[5]),
            batch_ends=ends,
        )

    # --- writing ---------------------------------------------------------------------

    @_guard
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
    ) -> list[int]:
        """Append ``rows`` (with their L2-normalised ``embeddings``) to ``namespace`` in
        one transaction (or inside the caller's :meth:`transaction`), replace the
        namespace's held messages by ``pending`` (from ``pending_sources``, one per
        message) and record ``digest``.

        Returns the new step ids. Callers validate first; a failure here rolls back.
        """
        assert self._conn is not None
        conn = self._conn
        emb = np.ascontiguousarray(embeddings, dtype="<f4")
        if emb.shape[0] != len(rows):
            raise StoreError(f"append: {len(rows)} rows but {emb.shape[0]} embeddings")
        with self.transaction():
            meta = self._meta_raw()
            self._check_meta(meta)
            dim = int(meta["dim"])
            if len(rows):
                if not meta["model_id"]:
                    conn.executemany(
                        "UPDATE meta SET value = ? WHERE key = ?",
                        [(encoder_id, "model_id"), (str(emb.shape[1]), "dim")],
                    )
                    dim = emb.shape[1]
                elif meta["model_id"] != encoder_id or dim != emb.shape[1]:
                    raise IncompatibleStoreError(
                        f"{self._name}: made with encoder {meta['model_id']!r} "
                        f"(dim {dim}); got {encoder_id!r} (dim {emb.shape[1]})"
                    )
            start = self.n_steps(namespace)
            batch = 0
            if len(rows):
                cur = conn.execute(
                    "INSERT INTO batches (ns, end_pos) VALUES (?, ?)",
                    (namespace, start + len(rows)),
                )
                batch = int(cur.lastrowid or 0)
            ids: list[int] = []
            for i, r in enumerate(rows):
                cur = conn.execute(
                    "INSERT INTO steps (ns, pos, batch, role, text, tool_action, arguments, "
                    "tool_signature, entities, subgoal, source, cost, embedding) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        namespace,
                        start + i,
                        batch,
                        r.role,
                        r.text,
                        r.tool_action,
                        r.arguments_json,
                        r.tool_signature,
                        json.dumps(sorted(r.entities), ensure_ascii=False),
                        r.subgoal,
                        r.source,
                        int(r.cost),
                        emb[i].tobytes(),
                    ),
                )
                ids.append(int(cur.lastrowid or 0))
            if pending is not None:
                self._set_pending(namespace, pending, pending_sources)
            if digest is not None and self._has_digests:
                conn.execute(
                    "INSERT OR IGNORE INTO digests (ns, digest, end_pos) VALUES (?, ?, ?)",
                    (namespace, digest, start + len(rows)),
                )
        return ids

    def _set_pending(
        self,
        namespace: str,
        messages: Sequence[Mapping[str, Any]],
        sources: Sequence[str | None] | None = None,
    ) -> None:
        assert self._conn is not None
        if messages:
            self._conn.execute(
                "INSERT INTO pending (ns, messages) VALUES (?, ?) "
                "ON CONFLICT (ns) DO UPDATE SET messages = excluded.messages",
                (namespace, json.dumps(list(messages), ensure_ascii=False, sort_keys=True)),
            )
        else:
            self._conn.execute("DELETE FROM pending WHERE ns = ?", (namespace,))
        if not self._has_held_sources:
            return
        if messages and sources is not None and all(isinstance(x, str) for x in sources):
            self._conn.execute(
                "INSERT INTO held_sources (ns, sources) VALUES (?, ?) "
                "ON CONFLICT (ns) DO UPDATE SET sources = excluded.sources",
                (namespace, json.dumps(list(sources), ensure_ascii=False)),
            )
        else:
            self._conn.execute("DELETE FROM held_sources WHERE ns = ?", (namespace,))

    @_guard
    def pending_with_sources(self, namespace: str) -> tuple[list[dict[str, Any]], list[str | None]]:
        """The held messages of ``namespace`` and the source of each, read together (one
        statement: one snapshot even while other processes write). A source is ``None``
        for messages held before sources were recorded (they go with the next add of
        any source)."""
        assert self._conn is not None
        if self._has_held_sources:
            row = self._conn.execute(
                "SELECT p.messages, h.sources FROM pending p "
                "LEFT JOIN held_sources h ON h.ns = p.ns WHERE p.ns = ?",
                (namespace,),
            ).fetchone()
        else:
            row = self._conn.execute(
                "SELECT messages, NULL FROM pending WHERE ns = ?", (namespace,)
            ).fetchone()
        if row is None:
            return [], []
        held = self._held_messages(row[0], namespace)
        try:
            sources = json.loads(row[1]) if row[1] is not None else None
        except (TypeError, ValueError):
            sources = None
        if (
            not isinstance(sources, list)
            or len(sources) != len(held)
            or not all(isinstance(x, str) for x in sources)
        ):
            return held, [None] * len(held)  # unknown: as a store without sources
        return held, list(sources)

    @_guard
    def discard_pending(self, namespace: str) -> list[dict[str, Any]]:
        """Delete the held messages of ``namespace`` in one transaction and return them
        (as stored; a damaged entry comes back as ``{"unreadable": <raw text>}``)."""
        assert self._conn is not None
        with self.transaction():
            row = self._conn.execute(
                "SELECT messages FROM pending WHERE ns = ?", (namespace,)
            ).fetchone()
            self._conn.execute("DELETE FROM pending WHERE ns = ?", (namespace,))
            if self._has_held_sources:
                self._conn.execute("DELETE FROM held_sources WHERE ns = ?", (namespace,))
        if row is None:
            return []
        try:
            held = json.loads(row[0])
        except (TypeError, ValueError):
            return [{"unreadable": str(row[0])}]
        return held if isinstance(held, list) else [{"unreadable": str(row[0])}]

    @_guard
    def delete_namespace(self, namespace: str) -> int:
        """Delete every row of ``namespace`` (steps, add batches, held messages, log
        digests) in one transaction; return the number of steps deleted."""
        assert self._conn is not None
        with self.transaction():
            n = self.n_steps(namespace)
            tables = ("steps", "batches", "pending") + (("digests",) if self._has_digests else ())
            tables += ("snapshots",) if self._has_snapshots else ()
            tables += ("held_sources",) if self._has_held_sources else ()
            for table in tables:
                self._conn.execute(f"DELETE FROM {table} WHERE ns = ?", (namespace,))
        return n

    # --- snapshots (a cache of the retriever's structure) ---------------------------

    @_guard
    def snapshot(self, namespace: str) -> SnapshotRow | None:
        """The stored snapshot of ``namespace`` (unchecked), or ``None``."""
        assert self._conn is not None
        if not self._has_snapshots:
            return None
        row = self._conn.execute(
            "SELECT steps, config, fingerprint, checksum, payload FROM snapshots WHERE ns = ?",
            (namespace,),
        ).fetchone()
        if row is None:
            return None
        steps, config, fingerprint, checksum, payload = row
        if not (
            isinstance(steps, int)
            and all(isinstance(x, str) for x in (config, fingerprint, checksum))
            and isinstance(payload, bytes)
        ):
            return None
        return SnapshotRow(steps, config, fingerprint, checksum, payload)

    def save_snapshot(self, namespace: str, row: SnapshotRow) -> bool:
        """Store ``row`` as the snapshot of ``namespace`` (one transaction), without
        waiting for another writer's lock; ``False`` when it was not written (busy,
        read-only, an older store opened read-only, I/O error): a snapshot is a cache."""
        if self._conn is None or self.read_only or not self._has_snapshots:
            return False
        conn = self._conn
        outer = self._depth == 0
        try:
            if outer:
                conn.execute("PRAGMA busy_timeout = 0")
            with self.transaction():
                conn.execute(
                    "INSERT OR REPLACE INTO snapshots "
                    "(ns, steps, config, fingerprint, checksum, payload) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (namespace, row.steps, row.config, row.fingerprint, row.checksum, row.payload),
                )
        except (StoreError, sqlite3.Error):
            return False
        finally:
            if outer:
                with suppress(sqlite3.Error):
                    conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        return True

    # --- checks ----------------------------------------------------------------------

    def integrity_problems(self) -> list[str]:
        """Every problem found by SQLite's ``integrity_check`` and the store's own checks
        (tables, columns and meta; positions 0..n-1 per namespace and batch ends; blob
        sizes and finite vectors; JSON columns; held messages); empty when sound.

        Raises only :class:`~osumem.errors.StoreError` subclasses (a page SQLite cannot
        even read is reported as corrupt)."""
        if self._conn is None:
            raise StoreError(f"{self._name}: the store is closed")
        problems: list[str] = []
        try:
            collect_problems(self, problems)
        except sqlite3.Error as exc:
            err = self._translate(exc)
            if isinstance(err, StoreBusyError | StoreIOError) and "SQLite error" not in str(err):
                raise err from exc
            problems.append(f"SQLite cannot read the file ({exc})")
        except StoreError as exc:
            if isinstance(exc, StoreBusyError):
                raise
            problems.append(str(exc).replace(f"{self._name}: ", "").replace("corrupt: ", ""))
        except UnicodeDecodeError as exc:
            problems.append(f"a text value is not valid UTF-8 ({exc.reason} at byte {exc.start})")
        except (ValueError, TypeError, KeyError, OverflowError, MemoryError) as exc:
            problems.append(f"unreadable content ({type(exc).__name__}: {exc})")
        return problems

    def check(self) -> None:
        """Raise :class:`StoreCorruptError` (alias ``StoreIntegrityError``) listing every
        problem, if any; nothing but a :class:`~osumem.errors.StoreError` escapes."""
        problems = [" ".join(p.split()) for p in self.integrity_problems()]
        if len(problems) > 12:
            problems = [*problems[:12], f"and {len(problems) - 12} more"]
        if problems:
            raise StoreCorruptError(f"{self._name}: corrupt: " + "; ".join(problems))

    @_guard
    def content_hash(self) -> str:
        """SHA-256 over every table's rows in a fixed order: equal hashes mean equal
        stored content (used to show a rejected input left the store unchanged)."""
        assert self._conn is not None
        h = hashlib.sha256()
        tables = [("meta", "key"), ("steps", "id"), ("batches", "id"), ("pending", "ns")]
        if self._has_digests:
            tables.append(("digests", "ns, digest"))
        if self._has_held_sources:
            tables.append(("held_sources", "ns"))
        for table, order in tables:
            h.update(table.encode())
            for row in self._conn.execute(f"SELECT * FROM {table} ORDER BY {order}"):
                h.update(repr(row).encode())
        return h.hexdigest()

    def close(self) -> None:
        """Checkpoint the write-ahead log (a clean close leaves no ``-wal`` content) and
        close the connection (idempotent)."""
        if self._conn is None:
            return
        if self._depth == 0:
            self.checkpoint(truncate=True)
        with suppress(sqlite3.Error):
            self._conn.close()
        self._conn = None


@dataclass(frozen=True)
class SnapshotRow:
    """One row of the ``snapshots`` table: the steps the snapshot covers, the key of
    the retriever settings, the fingerprint of the steps, the payload's SHA-256 and the
    payload itself."""

    steps: int
    config: str
    fingerprint: str
    checksum: str
    payload: bytes


def remove_store_files(path: Path) -> None:
    """Remove a store file and its ``-wal``/``-shm`` companions (missing ones ignored)."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        with suppress(OSError):
            os.remove(f"{path}{suffix}")
