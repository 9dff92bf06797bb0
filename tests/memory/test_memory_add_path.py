"""An add does no redundant store work: one duplicate check, one read of the held
messages, no rewrite of held messages when none were held or are; and what it read
before its write transaction is read again when another writer committed meanwhile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from osumem.memory import Memory

CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_reservation", "arguments": '{"reservation_id": "R1"}'},
        }
    ],
}
ANSWER = {"role": "tool", "tool_call_id": "c1", "content": "R1: flight HAT001, aisle"}


def _statements(mem: Memory, fn: Any) -> list[str]:
    seen: list[str] = []
    raw = mem.store.conn.raw  # type: ignore[attr-defined]
    raw.set_trace_callback(seen.append)
    try:
        fn()
    finally:
        raw.set_trace_callback(None)
    return seen


def test_a_plain_add_reads_once_and_leaves_held_messages_alone(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "m.db", encoder="hashing") as mem:
        mem.add("first turn", namespace="a")
        mem.retrieve("turn", 64, namespace="a")  # loaded, as in an agent loop
        sql = _statements(mem, lambda: mem.add("book the aisle seat", namespace="a"))
        assert sum("FROM digests" in s for s in sql) == 1
        assert sum("FROM pending" in s and s.startswith("SELECT") for s in sql) == 1
        assert not [s for s in sql if s.startswith("DELETE")]
        assert [s.split()[0] for s in sql if s.startswith(("BEGIN", "COMMIT"))] == [
            "BEGIN",
            "COMMIT",
        ]
        # the add's own transaction is the append's unit of rollback: no savepoint
        # (in SQLite its statement journal is a temporary file written at every add)
        assert not [s for s in sql if s.startswith(("SAVEPOINT", "RELEASE"))]
        assert mem.n_steps("a") == 2
        # the recorded encoder is read once, not at every add; the new position and id
        # are where the last append left them (nobody wrote since): one count of the
        # steps, before the transaction, none inside, no read of the next id; one
        # data_version inside the transaction
        assert not [s for s in sql if "FROM meta" in s]
        assert sum("MAX(pos)" in s for s in sql) == 1
        # (SQLite traces the pragma a SELECT reads as a nested "-- PRAGMA" line)
        top = [s for s in sql if not s.startswith("--")]
        assert sum("data_version" in s for s in top) == 2  # in the add's read, inside the tx
        assert sum(s.startswith("SELECT") for s in top) == 1  # the add's one read


def test_two_memories_on_one_store_object_see_each_others_adds(tmp_path: Path) -> None:
    """The cached view takes an add's rows only when they follow its own last step;
    a write through another memory on the same store (no change of SQLite's
    data_version) makes it reload."""
    with Memory.open(tmp_path / "m.db", encoder="hashing") as mem:
        other = Memory(mem.store, mem.encoder, mem.config)
        mem.add("first turn", namespace="a")
        mem.retrieve("turn", 64, namespace="a")
        other.add("the other memory's turn", namespace="a")
        mem.add("a third turn", namespace="a")
        texts = [s.text for s in mem.steps("a")]
        assert texts == ["user: first turn", "user: the other memory's turn", "user: a third turn"]
        assert mem.view("a").n == 3
        got = mem.retrieve("the other memory", 256, namespace="a")
        assert "user: the other memory's turn" in [s.text for s in got.steps]


def test_held_messages_are_still_written_and_cleared(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "m.db", encoder="hashing") as mem:
        mem.add_messages([{"role": "user", "content": "find R1"}, CALL], namespace="a")
        assert len(mem.held("a")) == 1  # the open call is held
        mem.add_messages([ANSWER], namespace="a")
        assert mem.held("a") == []
        steps = mem.steps("a")
        assert len(steps) == 2 and "HAT001" in steps[1].text
    with Memory.open(tmp_path / "m.db") as again:
        assert again.held("a") == [] and again.n_steps("a") == 2


def test_another_writer_between_the_reads_and_the_write_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    log = [{"role": "user", "content": "book the aisle seat on HAT001"}]
    with (
        Memory.open(path, encoder="hashing") as mine,
        Memory.open(path, encoder="hashing") as other,
    ):
        mine.add("hello", namespace="a")
        plan = mine._planner.plan
        calls = []

        def plan_then_other_writes(*args: Any, **kwargs: Any) -> Any:
            out = plan(*args, **kwargs)
            if not calls:  # after this add read the store, before its transaction
                calls.append(1)
                other.add_messages(log, namespace="a")
                other.add_messages([{"role": "user", "content": "a later turn"}], namespace="a")
            return out

        mine._planner.plan = plan_then_other_writes  # type: ignore[method-assign]
        assert mine.add_messages(log, namespace="a") == []  # the other's copy is seen
        assert mine.n_steps("a") == 3
        ids = mine.add("one more", namespace="a")
        assert len(ids) == 1
        reopened = [s.text for s in other.steps("a")]
        assert reopened == [s.text for s in mine.steps("a")]
        assert reopened.count("user: book the aisle seat on HAT001") == 1


def test_an_add_inside_a_callers_transaction_is_still_one_savepoint(tmp_path: Path) -> None:
    """Inside ``mem.transaction()`` the add's own block is the savepoint that keeps a
    failed add from leaving rows behind in the caller's transaction; the append inside
    it opens none of its own."""
    with Memory.open(tmp_path / "m.db", encoder="hashing") as mem:
        mem.add("first turn", namespace="a")

        def two_adds() -> None:
            with mem.transaction():
                mem.add("book the aisle seat", namespace="a")
                mem.add("and a window seat for the way back", namespace="a")

        sql = _statements(mem, two_adds)
        assert sum(s.startswith("SAVEPOINT") for s in sql) == 2  # one per add
        assert mem.n_steps("a") == 3


def test_an_add_only_loop_reads_nothing_after_its_commit(tmp_path: Path) -> None:
    """With no retrieve yet (the namespace's steps not loaded: an ingest, a logger), the
    add takes the step count it needs afterwards (whether a bulk add should build the
    structure now) from its own append, not from a read after the commit."""
    with Memory.open(tmp_path / "m.db", encoder="hashing") as mem:
        for k in range(3):
            mem.add(f"turn {k}", namespace="a")
        sql = _statements(mem, lambda: mem.add("book the aisle seat", namespace="a"))
        top = [s for s in sql if not s.startswith("--")]
        assert top[-1] == "COMMIT"
        assert sum(s.startswith("SELECT") for s in top) == 1  # the add's one read
        assert mem.n_steps("a") == 4
