"""A SQLite store shared by threads: a server's reader threads read the store's change
counter while its store thread writes (``MemoryService._follow``). A read from another
thread must not stand for the writer's own read inside its transaction: the writer
would miss a commit another process made just before its transaction began, and reuse
the next position its last add left (a ``UNIQUE`` failure on the batch end, or, without
that constraint, steps written over another writer's positions)."""

from __future__ import annotations

import threading
from typing import Any

from osumem.memory import Memory
from osumem.memory.backends.sqlite import sql

ENC = "hashing:d32"


def test_a_change_counter_read_in_another_thread_is_not_the_writers(tmp_path):
    path = tmp_path / "m.db"
    with Memory.open(path, encoder=ENC) as a, Memory.open(path, encoder=ENC) as b:
        a.add("first step of a")  # a's store remembers where its append left off
        conn = a.store.conn
        real_execute = conn.execute
        real_transaction = conn.transaction
        read, go = threading.Event(), threading.Event()
        reader = threading.current_thread()

        class Held:
            def __init__(self, row: Any) -> None:
                self.row = row

            def fetchone(self) -> Any:
                return self.row

        def execute(statement: str, *args: Any) -> Any:
            result = real_execute(statement, *args)
            if statement == sql.DATA_VERSION and threading.current_thread() is reader_thread:
                row = result.fetchone()
                read.set()  # read before the other writer commits ...
                go.wait(10)  # ... and kept until the writer's transaction has begun
                return Held(row)
            return result

        def transaction(**kwargs: Any) -> Any:
            cm = real_transaction(**kwargs)

            class Entered:
                def __enter__(self) -> Any:
                    out = cm.__enter__()
                    if threading.current_thread() is reader and not go.is_set():
                        go.set()
                        reader_thread.join(10)
                    return out

                def __exit__(self, *exc: Any) -> Any:
                    return cm.__exit__(*exc)

            return Entered()

        conn.execute = execute  # type: ignore[method-assign]
        conn.transaction = transaction  # type: ignore[method-assign]
        reader_thread = threading.Thread(target=a.store.data_version)
        reader_thread.start()
        assert read.wait(10)
        b.add("a step of b")  # commits while the reader holds its counter
        a.add("second step of a")
        conn.execute = real_execute  # type: ignore[method-assign]
        conn.transaction = real_transaction  # type: ignore[method-assign]
        b.refresh()
        texts = [str(t) for t in b.view().texts]
    assert sorted(texts) == sorted(
        ["user: first step of a", "user: a step of b", "user: second step of a"]
    )


def test_a_write_refused_for_an_older_snapshot_says_so(tmp_path):
    """SQLite refuses a write at once (no busy wait) on a connection whose open read is
    older than another connection's commit; the error says that, not that a lock was
    held for the whole timeout."""
    import sqlite3

    from osumem.errors import StoreBusyError
    from osumem.memory.backends.sqlite.connection import translate_error

    path = str(tmp_path / "x.db")
    a = sqlite3.connect(path, isolation_level=None)
    b = sqlite3.connect(path, isolation_level=None)
    try:
        a.execute("PRAGMA journal_mode=WAL")
        a.execute("CREATE TABLE t (x)")
        a.execute("INSERT INTO t VALUES (1), (2)")
        reading = a.execute("SELECT x FROM t")
        reading.fetchone()  # a's read stays open on the state before b's commit
        b.execute("INSERT INTO t VALUES (3)")
        try:
            a.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            err = translate_error(exc, "store", 30)
        else:
            raise AssertionError("SQLite let the stale connection write")
    finally:
        a.close()
        b.close()
    assert isinstance(err, StoreBusyError)
    assert "older state of the file" in str(err) and "30 s" not in str(err)
