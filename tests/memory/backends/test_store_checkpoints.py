"""The SQLite store's periodic WAL checkpoints run on a thread of their own (no commit
waits for one), a delete's scrubbing checkpoint still runs before the delete returns,
and a close stops the thread and leaves no ``-wal`` content."""

from __future__ import annotations

import threading
from pathlib import Path

from osumem.embed import HashingEncoder
from osumem.memory import Memory
from osumem.memory.backends.sqlite.connection import CHECKPOINT_EVERY

ENC = HashingEncoder(16)
SECRET = "passport number X99-4471"


def _checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("osumem-checkpoint")]


def test_periodic_checkpoints_run_off_the_committing_thread(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Memory.open(path, encoder=ENC) as mem:
        conn = mem.store.conn  # type: ignore[attr-defined]
        seen: list[str] = []
        conn.raw.set_trace_callback(seen.append)
        for k in range(2 * CHECKPOINT_EVERY + 1):
            mem.add(f"turn {k} about order {k % 9}", namespace="a")
        conn.raw.set_trace_callback(None)
        assert not [s for s in seen if "wal_checkpoint" in s]  # none inside a commit
        checkpointer = conn._checkpointer
        assert checkpointer is not None and checkpointer.wait_idle(30)
        assert checkpointer.runs >= 1
        with Memory.open(path, encoder=ENC) as reader:  # every commit is readable
            assert reader.n_steps("a") == 2 * CHECKPOINT_EVERY + 1
    assert not _checkpoint_threads()
    wal = Path(f"{path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0


def test_a_delete_leaves_nothing_in_the_log_while_checkpoints_run_behind(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Memory.open(path, encoder=ENC) as mem:
        for k in range(CHECKPOINT_EVERY + 3):  # the checkpoint thread has started
            mem.add(f"turn {k}", namespace="a")
        mem.add(f"my {SECRET}", namespace="a")
        for k in range(5):
            mem.add(f"later turn {k}", namespace="a")
        assert mem.store.conn._checkpointer is not None  # type: ignore[attr-defined]
        (at,) = [s.position for s in mem.steps("a") if SECRET in s.text]
        mem.delete("a", [at])
        for name in ("m.db", "m.db-wal"):  # before the close: the delete scrubbed them
            file = tmp_path / name
            assert not file.exists() or SECRET.encode() not in file.read_bytes()


def test_a_store_dropped_without_a_close_takes_its_checkpoint_thread_along(
    tmp_path: Path,
) -> None:
    import gc
    import time

    from osumem.memory.backends.sqlite.connection import Connection, SQLiteSettings

    conn = Connection(tmp_path / "m.db", SQLiteSettings())
    conn.execute("CREATE TABLE t (x)")
    for k in range(CHECKPOINT_EVERY):
        with conn.transaction():
            conn.execute("INSERT INTO t VALUES (?)", (k,))
    assert conn._checkpointer is not None
    thread = conn._checkpointer._thread
    assert thread.is_alive()
    del conn  # never closed
    gc.collect()
    deadline = time.monotonic() + 10
    while thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not thread.is_alive()
