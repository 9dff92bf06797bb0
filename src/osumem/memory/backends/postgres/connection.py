"""Talking to a Postgres store: the location (a ``postgresql://`` URL and its
``schema``), the connection pool, write transactions with their locks, the change
counter's own-commit bookkeeping, and every psycopg error turned into its typed store
error.

Locks (READ COMMITTED, Postgres's default isolation): a write transaction that names
its namespace takes the store's advisory lock in shared mode and then the row of
``versions`` for that namespace (an upsert that also counts the write); a transaction
that names none (a whole-file ingest, an import) takes the advisory lock exclusively.
Writers of different namespaces run side by side; writers of one namespace, and every
writer against a whole-store transaction, wait for each other. Every statement inside
reads what was committed before it started, and everything it reads of its namespace
was committed before the row lock was granted, so positions and held messages are read
and written under the lock.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from osumem.errors import (
    MissingExtraError,
    StoreAuthError,
    StoreBusyError,
    StoreConnectionError,
    StoreCorruptError,
    StoreError,
    StoreIOError,
    StoreLocationError,
    StoreReadOnlyError,
)
from osumem.frozen import Boolean, Constraints, FrozenConfig, Interval

try:  # the postgres extra
    import psycopg
    from psycopg.pq import TransactionStatus
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError:  # pragma: no cover - reported by require_driver
    psycopg = None  # type: ignore[assignment]

_F = TypeVar("_F", bound=Callable[..., Any])

#: The schema a store lives in when its URL names none.
DEFAULT_SCHEMA = "osumem"
#: URL schemes of this backend.
SCHEMES = ("postgresql", "postgres")
#: The search beam of pgvector's HNSW queries (``hnsw.ef_search``); a query asking for
#: more steps goes on scanning the index (``hnsw.iterative_scan = strict_order``), so
#: results come in exact order of the distances the index found.
HNSW_EF_SEARCH = 64
#: The URL options osumem reads (the rest go to libpq).
OWN_OPTIONS = ("schema", "ann")
#: Where large namespaces' nearest steps may come from (``ann=``).
ANN_PLACES = ("database", "process")
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def require_driver() -> None:
    """Raise :class:`~osumem.errors.MissingExtraError` without psycopg 3 and its pool."""
    if psycopg is None:
        raise MissingExtraError(
            "a postgresql:// store needs psycopg 3 and psycopg-pool: pip install 'osumem[postgres]'"
        )


@dataclass(frozen=True, kw_only=True)
class PostgresSettings(FrozenConfig):
    """How a Postgres store is opened.

    Attributes:
        timeout: seconds a write waits for another writer's lock (``lock_timeout``)
            and a call waits for a free pooled connection, before
            :class:`~osumem.errors.StoreBusyError`.
        connect_timeout: seconds to wait for the server to answer a new connection.
        pool_size: most connections the store keeps open (one per thread that uses it
            at once; a :class:`~osumem.memory.Memory` uses one).
        read_only: open for reading only (every write raises
            :class:`~osumem.errors.StoreReadOnlyError`; the connections are read-only).
    """

    timeout: float = 30.0
    connect_timeout: float = 10.0
    pool_size: int = 8
    read_only: bool = False

    config_name = "Postgres store"
    parameter_constraints: ClassVar[Constraints] = {
        "timeout": Interval(float, 0, math.inf, closed="left"),
        "connect_timeout": Interval(float, 0, math.inf, closed="neither"),
        "pool_size": Interval(int, 1, 64),
        "read_only": Boolean(),
    }


@dataclass(frozen=True)
class Location:
    """A parsed ``postgresql://`` store location: what libpq is given (``conninfo``,
    without the ``schema`` option, which osumem reads), the schema and a printable
    name (the password masked)."""

    url: str
    conninfo: str
    schema: str
    shown: str
    database: str = field(default="")
    #: Where large namespaces find their nearest steps: ``"database"`` (pgvector's HNSW
    #: index) or ``"process"`` (an HNSW index built in the memory's process).
    ann: str = "database"


def parse_location(url: str) -> Location:
    """Split a store URL into its libpq part and osumem's own options: ``schema=NAME``
    (default :data:`DEFAULT_SCHEMA`) and ``ann=database|process`` (see
    :attr:`Location.ann`); a URL libpq cannot read raises
    :class:`~osumem.errors.StoreLocationError`."""
    require_driver()
    parts = urlsplit(url)
    if parts.scheme.lower() not in SCHEMES:
        raise StoreLocationError(f"store {url!r}: not a postgresql:// URL")
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    schema = schemas[-1] if schemas else DEFAULT_SCHEMA
    shown_parts = parts
    if parts.password is not None:
        host = parts.netloc.rpartition("@")[2]
        shown_parts = parts._replace(netloc=f"{parts.username or ''}:***@{host}")
    shown = urlunsplit(shown_parts)
    if not _SCHEMA_NAME.match(schema):
        raise StoreLocationError(
            f"memory store {shown}: schema {schema!r}: expected a name of letters, digits "
            "and '_' (at most 63, not starting with a digit)"
        )
    anns = [v for k, v in query if k == "ann"]
    ann = anns[-1] if anns else "database"
    if ann not in ANN_PLACES:
        raise StoreLocationError(
            f"memory store {shown}: ann {ann!r}: expected one of {', '.join(ANN_PLACES)}"
        )
    rest = urlencode([(k, v) for k, v in query if k not in OWN_OPTIONS])
    conninfo = urlunsplit(parts._replace(query=rest))
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        detail = " ".join(str(exc).split())
        raise StoreLocationError(f"memory store {shown}: not a valid URL ({detail})") from None
    port = str(params.get("port") or "")
    if port and not all(p.isdigit() and 0 < int(p) < 65536 for p in port.split(",")):
        raise StoreLocationError(f"memory store {shown}: port {port!r} is not a port number")
    return Location(url, conninfo, schema, shown, str(params.get("dbname") or ""), ann)


def store_lock_key(schema: str) -> int:
    """The advisory lock key of the store in ``schema`` (a 63-bit hash of its name):
    held shared by namespace writers, exclusively by whole-store writers."""
    digest = hashlib.sha256(f"osumem:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def translate(exc: BaseException, name: str, timeout: float) -> StoreError:
    """The typed store error for a psycopg (or pool) error; ``name`` names the store."""
    if isinstance(exc, StoreError):
        return exc
    text = " ".join(str(exc).split())
    low = text.lower()
    state = getattr(exc, "sqlstate", None) or ""
    if psycopg is not None and isinstance(exc, PoolTimeout):
        return StoreBusyError(
            f"{name}: busy: no free connection to the server within {timeout:g} s; retry later"
        )
    if state in ("55P03", "40P01", "40001", "57014") or "lock timeout" in low:
        return StoreBusyError(
            f"{name}: busy: another writer held its lock for more than {timeout:g} s "
            f"({text}); retry later"
        )
    if state in ("25006", "42501"):
        return StoreReadOnlyError(f"{name}: cannot write ({text})")
    if (
        state.startswith("28")
        or "password authentication failed" in low
        or ("no password supplied" in low)
    ):
        return StoreAuthError(f"{name}: the server refused the login ({text})")
    if state == "3D000" or ("database" in low and "does not exist" in low):
        return StoreConnectionError(
            f"{name}: {text} (create it first: CREATE DATABASE, or point the URL at another)"
        )
    if state in ("42P01", "42703", "42883", "42704"):
        return StoreCorruptError(f"{name}: corrupt: schema damaged ({text})")
    if state.startswith("23") or state.startswith("22"):
        return StoreCorruptError(f"{name}: corrupt: {text}")
    if state.startswith("53") or state.startswith("58"):
        return StoreIOError(f"{name}: the server cannot store this ({text})")
    if psycopg is not None and isinstance(exc, psycopg.OperationalError):
        return StoreConnectionError(f"{name}: cannot reach the server ({text})")
    return StoreIOError(f"{name}: Postgres error ({text})")


@dataclass
class _Frame:
    """One level of an open transaction: the namespaces it locked and counted."""

    namespaces: set[str] = field(default_factory=set)


@dataclass
class _Txn:
    """The open write transaction of one thread (its pinned connection)."""

    conn: Any = None
    frames: list[_Frame] = field(default_factory=list)

    @property
    def depth(self) -> int:
        return len(self.frames)

    def counted(self) -> int:
        return sum(len(f.namespaces) for f in self.frames)


class Connection:
    """The connections of one Postgres store: a pool (one connection per thread at a
    time; a thread's write transaction keeps its connection until it ends), the
    store's lock keys and its own-commit count.

    ``on_connect(conn)`` runs on every new pooled connection (type adapters)."""

    def __init__(self, location: Location, settings: PostgresSettings) -> None:
        self.location = location
        self.name = f"memory store {location.shown}"
        self.schema = location.schema
        self.timeout = float(settings.timeout)
        self.connect_timeout = float(settings.connect_timeout)
        self.read_only = bool(settings.read_only)
        self.pool_size = int(settings.pool_size)
        self.created = False
        self.created_schema = False
        self._pool: Any = None
        self._local = threading.local()
        self._own = 0  # namespace versions this store's committed writes counted
        self._own_lock = threading.Lock()
        self._on_connect: Callable[[Any], None] | None = None
        self._closed = False

    # --- connections --------------------------------------------------------------------

    def connect(self, *, autocommit: bool = True) -> Any:
        """A new connection outside the pool (opening checks, creation, discard)."""
        try:
            conn = psycopg.connect(
                self.location.conninfo,
                autocommit=autocommit,
                connect_timeout=max(1, math.ceil(self.connect_timeout)),
            )
        except psycopg.Error as exc:
            raise self.translate(exc) from None
        try:
            self._session(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _session(self, conn: Any) -> None:
        """Settings of every connection: the store's schema first on the search path
        (the tables are named without it), lock waits bounded, read-only if asked."""
        path = conn.execute("SELECT current_setting('search_path')").fetchone()[0]
        conn.execute(
            "SELECT set_config('search_path', %s, false), "
            "set_config('lock_timeout', %s, false), "
            "set_config('default_transaction_read_only', %s, false), "
            "set_config('hnsw.ef_search', %s, false), "
            "set_config('hnsw.iterative_scan', 'strict_order', false)",
            (
                f'"{self.schema}", {path}',
                f"{max(1, int(self.timeout * 1000))}ms",
                "on" if self.read_only else "off",
                str(HNSW_EF_SEARCH),
            ),
        )

    def open_pool(self, on_connect: Callable[[Any], None]) -> None:
        """Start the pool (after the schema exists: ``on_connect`` reads its types)."""
        self._on_connect = on_connect

        def configure(conn: Any) -> None:
            self._session(conn)
            on_connect(conn)

        self._pool = ConnectionPool(
            self.location.conninfo,
            min_size=1,
            max_size=self.pool_size,
            kwargs={
                "autocommit": True,
                "connect_timeout": max(1, math.ceil(self.connect_timeout)),
            },
            configure=configure,
            open=False,
            name=self.name,
            timeout=max(self.timeout, 0.001),
        )
        try:
            self._pool.open(wait=True, timeout=max(self.connect_timeout, 1.0))
        except (psycopg.Error, PoolTimeout) as exc:
            self._pool.close()
            self._pool = None
            raise self.translate(exc) from None

    @property
    def is_open(self) -> bool:
        return self._pool is not None and not self._closed

    def _check_open(self) -> None:
        if not self.is_open:
            raise StoreError(f"{self.name}: the store is closed")

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        """A connection to read with: the thread's open transaction's, else a pooled
        one in autocommit (each statement sees what was committed before it)."""
        self._check_open()
        txn = self._txn()
        if txn.conn is not None:
            yield txn.conn
            return
        with self._pool.connection() as conn:
            yield conn

    @contextmanager
    def snapshot(self) -> Iterator[Any]:
        """A connection whose statements all read one snapshot (a read-only
        ``REPEATABLE READ`` transaction; inside a write transaction, that one)."""
        self._check_open()
        txn = self._txn()
        if txn.conn is not None:
            yield txn.conn
            return
        with self._pool.connection() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield conn
            finally:
                if conn.info.transaction_status != TransactionStatus.IDLE:
                    conn.execute("ROLLBACK")

    def fetchall(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        with self.cursor() as conn:
            return list(conn.execute(sql, params).fetchall())

    def fetchone(self, sql: str, params: Any = ()) -> tuple[Any, ...] | None:
        with self.cursor() as conn:
            row = conn.execute(sql, params).fetchone()
            return None if row is None else tuple(row)

    # --- transactions ---------------------------------------------------------------------

    def _txn(self) -> _Txn:
        txn = getattr(self._local, "txn", None)
        if txn is None:
            txn = self._local.txn = _Txn()
        return txn

    @property
    def in_transaction(self) -> bool:
        return self._txn().depth > 0

    def lock_key(self) -> int:
        """The store's advisory lock key (:func:`store_lock_key`)."""
        return store_lock_key(self.schema)

    @contextmanager
    def transaction(self, namespace: str | None = None, *, joined: bool = False) -> Iterator[None]:
        """One write transaction (``BEGIN`` … ``COMMIT``; nested: a savepoint), rolled
        back on any exception, holding the locks of the module doc. A nested
        ``joined`` block is part of the open transaction's own unit of rollback (an
        error raised in it leaves the enclosing block too): it only takes the
        namespace's lock, with no savepoint (a round trip each way)."""
        self._check_open()
        if self.read_only:
            raise StoreReadOnlyError(f"{self.name}: opened read-only, cannot write")
        txn = self._txn()
        try:
            if txn.depth and joined:
                if namespace is not None:
                    self.lock_namespace(namespace)
                yield
            elif txn.depth == 0:
                yield from self._outer(txn, namespace)
            else:
                yield from self._nested(txn, namespace)
        except (psycopg.Error, PoolTimeout) as exc:
            raise self.translate(exc) from None

    def _outer(self, txn: _Txn, namespace: str | None) -> Iterator[None]:
        frame = _Frame()
        with self._pool.connection() as conn:
            txn.conn, txn.frames = conn, [frame]
            try:
                with conn.transaction():
                    self._lock_store(conn, exclusive=namespace is None)
                    if namespace is not None:
                        self.lock_namespace(namespace)
                    yield
                with self._own_lock:  # committed: these versions are this store's own
                    self._own += len(frame.namespaces)
            finally:
                txn.conn, txn.frames = None, []

    def _nested(self, txn: _Txn, namespace: str | None) -> Iterator[None]:
        frame = _Frame()
        txn.frames.append(frame)
        try:
            with txn.conn.transaction():  # a savepoint
                if namespace is not None:
                    self.lock_namespace(namespace)
                yield
        except BaseException:
            txn.frames.pop()  # rolled back: its row locks and counts went with it
            raise
        txn.frames.pop()
        txn.frames[-1].namespaces |= frame.namespaces

    def _lock_store(self, conn: Any, *, exclusive: bool) -> None:
        fn = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        try:
            conn.execute(f"SELECT {fn}(%s)", (self.lock_key(),))
        except psycopg.Error as exc:
            raise self.translate(exc) from None

    def lock_namespace(self, namespace: str) -> None:
        """Lock ``namespace``'s row for the rest of the transaction and count one
        write of it (once per transaction)."""
        txn = self._txn()
        if txn.depth == 0:
            raise StoreError(f"{self.name}: lock_namespace outside a transaction")
        if any(namespace in f.namespaces for f in txn.frames):
            return
        try:
            txn.conn.execute(
                "INSERT INTO versions (ns, version) VALUES (%s, 1) "
                "ON CONFLICT (ns) DO UPDATE SET version = versions.version + 1",
                (namespace,),
            )
        except psycopg.Error as exc:
            raise self.translate(exc) from None
        txn.frames[-1].namespaces.add(namespace)

    def own_versions(self) -> int:
        """Namespace versions counted by this store's writes: committed ones, plus the
        open transaction's when called inside it (it reads its own rows)."""
        with self._own_lock:
            own = self._own
        txn = self._txn()
        return own + (txn.counted() if txn.depth else 0)

    # --- errors and closing ---------------------------------------------------------------

    def translate(self, exc: BaseException) -> StoreError:
        return translate(exc, self.name, self.timeout)

    def close(self) -> None:
        """Close every pooled connection (idempotent)."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            with suppress(Exception):
                pool.close(timeout=5.0)


def guarded(method: _F) -> _F:
    """Turn every psycopg error of a store method into its typed store error (the store
    keeps its :class:`Connection` as ``conn``)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        conn: Connection = self.conn
        if not conn.is_open:
            raise StoreError(f"{conn.name}: the store is closed")
        try:
            return method(self, *args, **kwargs)
        except StoreError:
            raise
        except Exception as exc:
            if psycopg is not None and isinstance(exc, psycopg.Error | PoolTimeout):
                raise conn.translate(exc) from None
            raise

    return wrapper  # type: ignore[return-value]


__all__ = [
    "DEFAULT_SCHEMA",
    "SCHEMES",
    "Connection",
    "Location",
    "PostgresSettings",
    "guarded",
    "parse_location",
    "require_driver",
    "store_lock_key",
    "translate",
]
