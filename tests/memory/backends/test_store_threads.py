"""A SQLite store shared by threads (a server's store thread and its reader threads on
one connection).

- The change counter: readers read it while the store thread writes. A read from
  another thread must not stand for the writer's own read inside its transaction: the
  writer would miss a commit another process made just before its transaction began,
  and reuse the next position its last add left (a ``UNIQUE`` failure on the batch
  end, or, without that constraint, steps written over another writer's positions).
- Transactions: threads write in turn; one thread's statements never land in another
  thread's open transaction."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from osumem.errors import StoreBusyError
from osumem.memory import Memory, open_store
from osumem.memory.backends.sqlite import sql
from osumem.memory.rows import SnapshotRow, StepRow

ENC = "hashing:d32"
ROW = StepRow(
    role="user",
    text="user: hello",
    tool_action="",
    arguments_json="{}",
    tool_signature="",
    entities=(),
    subgoal="",
    source="",
    cost=2,
)


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


def test_snapshot_saves_of_reader_threads_never_wedge_the_connection(tmp_path):
    """A server's readers store the snapshots encoded for their namespaces, several at
    once on the one connection. Each save is its own transaction: one begun while
    another thread's is open is skipped (a snapshot is a cache), and no thread's
    ``BEGIN`` or ``COMMIT`` lands in another's (which left the connection inside a
    transaction nobody would end: every later add failed)."""
    with Memory.open(tmp_path / "m.db", encoder=ENC) as mem:
        names = ["a", "b", "c", "d"]
        for ns in names:
            mem.add(f"hello {ns}", namespace=ns)
        store = mem.store
        raised: list[BaseException] = []
        start = threading.Barrier(len(names))

        def saves(ns: str) -> None:
            start.wait(10)
            try:
                for _ in range(150):
                    store.save_snapshot(ns, SnapshotRow(1, "cfg", "fp", "ck", b"x" * 20_000))
            except BaseException as exc:  # reported below
                raised.append(exc)

        threads = [threading.Thread(target=saves, args=(ns,)) for ns in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert raised == []
        assert not store.in_transaction and not store.conn.raw.in_transaction
        assert mem.add("after the saves", namespace="a")  # not wedged
        assert {ns: mem.n_steps(ns) for ns in names} == {"a": 2, "b": 1, "c": 1, "d": 1}


def test_a_thread_waits_for_another_threads_transaction_then_says_so(tmp_path):
    """A write waits for another thread's open transaction on the same connection as
    for another process's lock: at most the store's timeout, then a busy error that
    names the other thread."""
    store = open_store(tmp_path / "m.db", timeout=0.2)
    try:
        opened, done = threading.Event(), threading.Event()

        def holder() -> None:
            with store.transaction():
                opened.set()
                done.wait(10)

        thread = threading.Thread(target=holder)
        thread.start()
        assert opened.wait(10)
        try:
            with pytest.raises(StoreBusyError, match="another thread of this process"):
                store.discard_pending("ns")
        finally:
            done.set()
            thread.join(10)
        assert store.discard_pending("ns") == []  # free again
    finally:
        store.close()


def test_an_encoder_seen_inside_another_threads_transaction_is_not_kept(tmp_path):
    """The threads share the connection, so a read of one sees another thread's
    uncommitted first add (its encoder id and dimension). The store keeps the pair it
    reads only when no transaction is open: rolled back, the store has none again."""
    store = open_store(tmp_path / "m.db")
    try:
        opened, release = threading.Event(), threading.Event()

        def first_add() -> None:
            try:
                with store.transaction():
                    store.append("ns", [ROW], np.full((1, 4), 0.5, np.float32), encoder_id="e")
                    opened.set()
                    release.wait(10)
                    raise RuntimeError("rolled back")
            except RuntimeError:
                pass

        thread = threading.Thread(target=first_add)
        thread.start()
        assert opened.wait(10)
        seen = (store.encoder_id, store.dim)  # read inside the other's transaction
        release.set()
        thread.join(10)
        assert seen == ("e", 4)
        assert (store.encoder_id, store.dim) == ("", 0)
    finally:
        store.close()
