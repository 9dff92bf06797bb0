"""Opening a SQLite store file and talking to it: the path checks, the connection
(WAL, ``synchronous``), the read-only fallbacks, write transactions, checkpoints, and
every ``sqlite3`` error turned into its typed store error."""

from __future__ import annotations

import functools
import math
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from osumem.errors import (
    DataFileError,
    ForeignStoreError,
    StoreBusyError,
    StoreCorruptError,
    StoreError,
    StoreIOError,
    StoreReadOnlyError,
)
from osumem.frozen import Boolean, Constraints, FrozenConfig, Interval, Options

#: A passive WAL checkpoint runs after this many commits of one connection (SQLite's own
#: size-based auto-checkpoint runs as well), so a lost ``-wal`` file costs little. It runs
#: on the connection's checkpoint thread (:class:`Checkpointer`), not inside the commit.
CHECKPOINT_EVERY = 64

#: Page size of new stores: a step row (a 1.5 KB embedding at d = 384) fills 4 KB pages
#: badly (a quarter of each page unused); 16 KB pages waste a few percent.
PAGE_SIZE = 16384

_SQLITE_MAGIC = b"SQLite format 3\x00"

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True, kw_only=True)
class SQLiteSettings(FrozenConfig):
    """How a SQLite store file is opened.

    Attributes:
        synchronous: SQLite's ``synchronous`` pragma; ``FULL`` (default) makes every
            acknowledged transaction durable even across power loss.
        timeout: seconds to wait for a lock held by another connection before
            :class:`~osumem.errors.StoreBusyError`.
        read_only: open for reading only (also chosen when the file or its folder
            cannot be written).
    """

    synchronous: str = "FULL"
    timeout: float = 30.0
    read_only: bool = False

    config_name = "SQLite store"
    parameter_constraints: ClassVar[Constraints] = {
        "synchronous": Options(("OFF", "NORMAL", "FULL", "EXTRA")),
        "timeout": Interval(float, 0, math.inf, closed="left"),
        "read_only": Boolean(),
    }


#: SQLite's extended code for a write refused because the connection's read snapshot
#: is older than the last commit (no busy wait can help it).
SQLITE_BUSY_SNAPSHOT = 517


def translate_error(exc: sqlite3.Error, name: str, timeout: float) -> StoreError:
    """The typed store error for an ``sqlite3`` error (``name`` names the store)."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(exc)
    low = text.lower()
    if code == SQLITE_BUSY_SNAPSHOT:
        return StoreBusyError(
            f"{name}: busy: another writer committed while this connection still read an "
            f"older state of the file, so SQLite refused the write at once ({text}); "
            "retry"
        )
    if primary in (5, 6) or "database is locked" in low or "is busy" in low:
        return StoreBusyError(
            f"{name}: busy: another process held its lock for more than "
            f"{timeout:g} s ({text}); retry later"
        )
    if primary == 8 or "readonly" in low or "read-only" in low:
        return StoreReadOnlyError(f"{name}: read-only, cannot write ({text})")
    if primary in (10, 13, 14, 15, 22) or "disk i/o" in low:
        return StoreIOError(f"{name}: I/O error ({text})")
    if primary == 26 or "not a database" in low:
        return ForeignStoreError(f"{name}: not a readable SQLite database ({text})")
    if primary == 11 or "malformed" in low:
        return StoreCorruptError(f"{name}: corrupt: {text}")
    if "could not decode" in low:
        return StoreCorruptError(f"{name}: corrupt: a text value is not UTF-8 ({text})")
    if "no such table" in low or "no such column" in low:
        return StoreCorruptError(f"{name}: corrupt: schema damaged ({text})")
    if isinstance(exc, sqlite3.IntegrityError):
        return StoreCorruptError(f"{name}: corrupt: {text}")
    if isinstance(exc, sqlite3.ProgrammingError):
        return StoreError(f"{name}: {text}")
    return StoreIOError(f"{name}: SQLite error ({text})")


def remove_store_files(path: Path) -> None:
    """Remove a store file and its ``-wal``/``-shm`` companions (missing ones ignored)."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        with suppress(OSError):
            os.remove(f"{path}{suffix}")


class Checkpointer:
    """The periodic passive checkpoints of one store file, on a daemon thread with a
    connection of its own, so no commit waits for one (copying the log's pages into
    the file and syncing it took 5-8 ms of an agent's add at 100,000 steps, and 159 ms
    for the first one after a bulk ingest). A passive checkpoint takes no lock that a
    reader or writer waits for and is skipped where readers still need the pages;
    SQLite's size-based auto-checkpoint still runs inside a commit when the log grows
    past its limit anyway. ``synchronous``: the store's setting, which decides whether
    a checkpoint syncs the file before the log may be reused. ``owner``: the
    connection it serves, held weakly: a connection dropped without a close takes the
    thread (and its connection) with it within :data:`OWNER_CHECK_S` seconds."""

    #: How often an idle thread checks that its connection is still there.
    OWNER_CHECK_S = 1.0

    def __init__(self, path: Path, synchronous: str, owner: object | None = None) -> None:
        self.path = path
        self.synchronous = synchronous
        self._owner = weakref.ref(owner) if owner is not None else None
        self.runs = 0  # checkpoints run (for tests and diagnostics)
        self._wake = threading.Condition()
        self._asked = 0
        self._done = 0
        self._closed = False
        self._thread = threading.Thread(
            target=self._run, name=f"osumem-checkpoint {path.name}", daemon=True
        )
        self._thread.start()

    def request(self) -> None:
        """Ask for one passive checkpoint (returns at once; nothing once closed)."""
        with self._wake:
            if not self._closed:
                self._asked += 1
                self._wake.notify()

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until every checkpoint asked for so far has run (or the thread ended);
        whether that happened within ``timeout`` seconds."""
        with self._wake:
            return self._wake.wait_for(lambda: self._closed or self._done >= self._asked, timeout)

    def close(self) -> None:
        """Stop the thread (after the checkpoint under way, if any) and close its
        connection (idempotent)."""
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        self._thread.join()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(str(self.path), timeout=0, isolation_level=None)
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            while True:
                with self._wake:
                    while not self._wake.wait_for(
                        lambda: self._closed or self._asked > self._done, self.OWNER_CHECK_S
                    ):
                        if self._owner is not None and self._owner() is None:
                            return  # the connection was dropped without a close
                    if self._closed:
                        return
                    asked = self._asked
                with suppress(sqlite3.Error):  # busy: the next request checkpoints
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.runs += 1
                with self._wake:
                    self._done = asked
                    self._wake.notify_all()
        except sqlite3.Error:
            pass  # no checkpoint thread: SQLite's own auto-checkpoint still bounds the log
        finally:
            with self._wake:
                self._done = self._asked = max(self._done, self._asked)
                self._closed = True
                self._wake.notify_all()
            if conn is not None:
                with suppress(sqlite3.Error):
                    conn.close()


class Connection:
    """One connection to a store file (``path=None``: an in-memory database).

    Raises:
        DataFileError: the path is a folder, its folder is missing, or a read-only
            open names a missing file.
        StoreError: a typed subclass when the file cannot be opened.
    """

    def __init__(self, path: Path | None, settings: SQLiteSettings) -> None:
        self.path = path
        self.name = f"memory store {path if path is not None else ':memory:'}"
        self.timeout = float(settings.timeout)
        self.read_only = bool(settings.read_only)
        self.created = False
        self._depth = 0
        self._commits = 0
        #: outermost transactions begun, and rollbacks (of a transaction or savepoint)
        #: made, on this connection: with ``total_changes`` and ``data_version`` they
        #: tell whether the database moved since a moment (SQLiteStore's append tail)
        self.transactions = 0
        self.rollbacks = 0
        #: the thread that began the open outermost transaction (``None`` outside one):
        #: another thread sharing the connection (a server's readers) may read, but
        #: what it reads is not the writer's own read inside its transaction
        self._owner: int | None = None
        #: held by the thread whose write transaction is open, from its ``BEGIN`` to
        #: its ``COMMIT`` or ``ROLLBACK``: threads sharing the connection write in turn
        #: (another thread's ``BEGIN`` would fail inside the open transaction, or its
        #: writes would become part of it), a thread waiting for another as it would
        #: for another process's lock
        self._writer = threading.RLock()
        #: set by a write that deleted content: the commit then checkpoints the WAL
        #: into the file and truncates it, so no old page image stays in the -wal file
        self.scrub_on_commit = False
        self._raw: sqlite3.Connection | None = None
        self._synchronous = str(settings.synchronous)
        self._checkpointer: Checkpointer | None = None
        if path is None:
            if self.read_only:
                raise StoreError("read_only needs a store file")
            self._raw = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            self._raw.execute("PRAGMA secure_delete=ON")
            return
        self._check_path()
        try:
            self._connect(settings.synchronous)
        except sqlite3.Error as exc:
            err = self.translate(exc)
            self.abandon()
            raise err from exc
        except BaseException:
            self.abandon()
            raise

    @property
    def raw(self) -> sqlite3.Connection:
        """The ``sqlite3`` connection (a :class:`StoreError` once closed)."""
        if self._raw is None:
            raise StoreError(f"{self.name}: the store is closed")
        return self._raw

    @property
    def is_open(self) -> bool:
        return self._raw is not None

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        return self.raw.execute(sql, params)

    def executemany(self, sql: str, params: Any) -> sqlite3.Cursor:
        return self.raw.executemany(sql, params)

    # --- opening ---------------------------------------------------------------------

    def _check_path(self) -> None:
        path = self.path
        assert path is not None
        if path.is_dir():
            raise DataFileError(f"{self.name}: is a directory")
        if not path.parent.exists():
            raise DataFileError(f"{self.name}: folder {path.parent} missing")
        exists = path.exists()
        if self.read_only and not exists:
            raise DataFileError(f"{self.name}: not found")
        if exists:
            try:
                with open(path, "rb") as fh:
                    head = fh.read(len(_SQLITE_MAGIC))
            except OSError as exc:
                raise StoreIOError(f"{self.name}: cannot read the file ({exc})") from None
            if head and head != _SQLITE_MAGIC[: len(head)]:
                raise ForeignStoreError(
                    f"{self.name}: not a readable SQLite database (no SQLite header)"
                )
        folder_ok = os.access(path.parent, os.W_OK)
        file_ok = not exists or os.access(path, os.W_OK)
        if not (folder_ok and file_ok):
            if not exists:
                raise StoreReadOnlyError(
                    f"{self.name}: cannot create a store in read-only folder {path.parent}"
                )
            self.read_only = True
        if not exists:
            # exactly one of several processes opening a new store creates it: only that
            # one may remove the file again if its open fails
            try:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                self.created = True
            except FileExistsError:
                pass
            except OSError as exc:
                raise StoreIOError(f"{self.name}: cannot create the file ({exc})") from None

    def _connect(self, synchronous: str) -> None:
        path = self.path
        assert path is not None
        if not self.read_only:
            conn = sqlite3.connect(
                str(path), timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
            self._raw = conn
            if self.created:  # only a new, empty file takes a page size
                conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            # deleted content is overwritten with zeros, not left in free pages
            conn.execute("PRAGMA secure_delete=ON")
            return
        uri = path.resolve().as_uri() + "?mode=ro"
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
        self._raw = conn

    def abandon(self) -> None:
        """Close after a failed open; remove the file if this open created it."""
        if self._raw is not None:
            with suppress(sqlite3.Error):
                self._raw.close()
            self._raw = None
        self.discard()

    def discard(self) -> None:
        """Remove the file (and its companions) if this open created it."""
        if self.created and self.path is not None:
            remove_store_files(self.path)

    # --- errors ----------------------------------------------------------------------

    def translate(self, exc: sqlite3.Error) -> StoreError:
        """The typed store error for an ``sqlite3`` error."""
        return translate_error(exc, self.name, self.timeout)

    def undecodable(self, exc: UnicodeDecodeError) -> StoreCorruptError:
        return StoreCorruptError(
            f"{self.name}: corrupt: a text value is not valid UTF-8 ({exc.reason} at byte "
            f"{exc.start})"
        )

    # --- transactions ------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, joined: bool = False) -> Iterator[None]:
        """One write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``), rolled back on any
        exception; nested calls become savepoints of the outer one, except a
        ``joined`` one: its block is part of the open transaction's own unit of
        rollback (an error raised in it leaves the enclosing block too), so it opens
        nothing (no savepoint, whose statement journal costs a temporary file).

        A transaction of another thread sharing the connection is not an outer one:
        this one waits for it to end (at most the connection's ``timeout``, then
        :class:`~osumem.errors.StoreBusyError`) and begins its own."""
        conn = self.raw
        if self.read_only:
            raise StoreReadOnlyError(f"{self.name}: opened read-only, cannot write")
        nested = self.in_own_transaction
        if nested and joined:
            yield
            return
        if nested:
            yield from self._savepoint(conn)
            return
        self._take_writer(self.timeout)
        try:
            yield from self._outermost(conn)
        finally:
            self._writer.release()

    def _take_writer(self, timeout: float) -> None:
        """Hold the connection's writer lock (waiting at most ``timeout`` seconds for
        another thread's transaction to end)."""
        wait = -1.0 if timeout >= threading.TIMEOUT_MAX else timeout
        if not self._writer.acquire(timeout=wait):
            raise StoreBusyError(
                f"{self.name}: busy: another thread of this process held a write "
                f"transaction for more than {timeout:g} s; retry later"
            )

    def _savepoint(self, conn: sqlite3.Connection) -> Iterator[None]:
        """A savepoint inside this thread's open transaction."""
        try:
            conn.execute(f"SAVEPOINT sp{self._depth}")
        except sqlite3.Error as exc:
            raise self.translate(exc) from exc
        self._depth += 1
        try:
            yield
        except BaseException:
            self._depth -= 1
            self.rollbacks += 1
            try:
                conn.execute(f"ROLLBACK TO sp{self._depth}")
                conn.execute(f"RELEASE sp{self._depth}")
            except sqlite3.Error:
                pass  # the original error is the one to report
            raise
        self._depth -= 1
        try:
            conn.execute(f"RELEASE sp{self._depth}")
        except sqlite3.Error as exc:
            self.rollbacks += 1
            raise self.translate(exc) from exc

    def _outermost(self, conn: sqlite3.Connection) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` (the writer lock held by the caller)."""
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self.translate(exc) from exc
        self._depth += 1
        self.transactions += 1
        self._owner = threading.get_ident()
        try:
            yield
        except BaseException:
            self._depth -= 1
            self.rollbacks += 1
            self.scrub_on_commit = False
            self._owner = None
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the original error is the one to report
            raise
        self._depth -= 1
        self._owner = None
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            err = self.translate(exc)
            self.rollbacks += 1
            if conn.in_transaction:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise err from exc
        self._commits += 1
        if self.scrub_on_commit:
            self.scrub_on_commit = False
            self.checkpoint(truncate=True)
        elif self._commits % CHECKPOINT_EVERY == 0:
            self._checkpoint_behind()

    @property
    def in_transaction(self) -> bool:
        """Whether the calling thread is inside its own transaction (as a Postgres
        store, whose threads each have their own connection, answers)."""
        return self.in_own_transaction

    @property
    def in_own_transaction(self) -> bool:
        """Whether the calling thread began the open transaction."""
        return self._depth > 0 and self._owner == threading.get_ident()

    @property
    def in_any_transaction(self) -> bool:
        """Whether any thread's transaction is open on the connection (a read of
        another thread then sees its writes before they are committed)."""
        return self._depth > 0

    @contextmanager
    def without_waiting(self) -> Iterator[None]:
        """Inside, a lock held by another writer fails at once instead of waiting
        (``busy_timeout`` 0; only outside a transaction): another process's lock, and
        another thread's transaction on this connection
        (:class:`~osumem.errors.StoreBusyError`)."""
        if self.in_own_transaction:
            yield
            return
        self._take_writer(0.0)
        try:
            self.raw.execute("PRAGMA busy_timeout = 0")
            try:
                yield
            finally:
                if self._raw is not None:
                    with suppress(sqlite3.Error):
                        self._raw.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        finally:
            self._writer.release()

    def checkpoint(self, *, truncate: bool = False) -> None:
        """Copy the write-ahead log into the database file (``PASSIVE``, or ``TRUNCATE``
        which also empties the ``-wal`` file); skipped silently when readers block it."""
        if self._raw is None or self.read_only or self.path is None or self._depth:
            return
        if self._checkpointer is not None:  # one checkpoint at a time: a second is busy
            self._checkpointer.wait_idle()
        mode = "TRUNCATE" if truncate else "PASSIVE"
        with suppress(sqlite3.Error):  # a busy checkpoint is retried at the next one
            self._raw.execute(f"PRAGMA wal_checkpoint({mode})")

    def _checkpoint_behind(self) -> None:
        """A passive checkpoint on the checkpoint thread (started at the first)."""
        if self._raw is None or self.read_only or self.path is None:
            return
        if self._checkpointer is None:
            self._checkpointer = Checkpointer(self.path, self._synchronous, owner=self)
        self._checkpointer.request()

    def close(self) -> None:
        """Checkpoint (a clean close leaves no ``-wal`` content) and close (idempotent)."""
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None
        if self._raw is None:
            return
        if self._depth == 0:
            self.checkpoint(truncate=True)
        with suppress(sqlite3.Error):
            self._raw.close()
        self._raw = None


def guarded(method: _F) -> _F:
    """Turn every ``sqlite3`` error of a store method into its typed store error (the
    store keeps its :class:`Connection` as ``conn``)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        conn: Connection = self.conn
        if not conn.is_open:
            raise StoreError(f"{conn.name}: the store is closed")
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise conn.translate(exc) from exc
        except UnicodeDecodeError as exc:
            raise conn.undecodable(exc) from exc

    return wrapper  # type: ignore[return-value]
