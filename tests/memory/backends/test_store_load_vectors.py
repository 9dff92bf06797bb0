"""Reading a namespace from SQLite holds its vectors once: the rows come from the
cursor a chunk at a time, each embedding blob written into a matrix with spare rows
and dropped, and the namespace buffer takes that matrix over instead of copying it.
The rows decoded are those of a whole read, and a damaged row is named as before."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from osumem.embed import HashingEncoder
from osumem.errors import StoreCorruptError
from osumem.memory import Memory
from osumem.memory.backends.codec import decode_steps, read_step_rows
from osumem.memory.backends.sqlite import sql
from osumem.memory.backends.sqlite import store as sqlite_store
from osumem.memory.buffer import NamespaceBuffer
from osumem.memory.rows import HEADROOM_DIVISOR, matrix_with_room, namespace_data, take_room

DIM = 16


def _store(path, n: int = 50) -> None:
    with Memory.open(path, encoder=HashingEncoder(DIM)) as mem:
        for k in range(0, n, 5):
            mem.add_messages(
                [
                    {"role": "user", "content": f"move R{j:05d} for P{j % 7}"}
                    for j in range(k, k + 5)
                ],
                namespace="ns",
                metadata={"k": k} if k % 2 else None,
            )


def _whole(path, start: int = 0):
    """The namespace decoded from one fetch of all its rows (the read before chunks)."""
    conn = sqlite3.connect(path)
    rows = conn.execute(sql.SELECT_STEPS, ("ns", start, 2**31 - 1)).fetchall()
    ends = [r[0] for r in conn.execute(sql.SELECT_BATCH_ENDS, ("ns", start, 2**31 - 1))]
    conn.close()
    return decode_steps(rows, ends, start=start, dim=DIM, where="w")


def _same(a, b) -> None:
    assert a.step_ids.tolist() == b.step_ids.tolist()
    np.testing.assert_array_equal(a.view.embeddings, b.view.embeddings)
    for name in ("costs", "roles", "texts", "tool_actions", "tool_signatures", "subgoals"):
        assert list(getattr(a.view, name)) == list(getattr(b.view, name)), name
    assert a.view.entities == b.view.entities
    assert tuple(a.batch_ends) == tuple(b.batch_ends)
    assert list(a.metadata) == list(b.metadata) and list(a.arguments) == list(b.arguments)
    np.testing.assert_array_equal(a.times, b.times)
    np.testing.assert_array_equal(a.updated, b.updated)


@pytest.mark.parametrize("chunk", [1, 7, 50, 4096])
@pytest.mark.parametrize("start", [0, 13])
def test_a_chunked_read_decodes_what_a_whole_read_does(tmp_path, monkeypatch, chunk, start):
    path = tmp_path / "m.db"
    _store(path)
    monkeypatch.setattr(sqlite_store, "READ_CHUNK", chunk)
    with Memory.open(path, encoder=HashingEncoder(DIM)) as mem:
        got = mem.store.load("ns", start=start)
    _same(got, _whole(path, start))
    room = take_room(got.view.embeddings)  # the first rows of a matrix with spare rows
    n = 50 - start
    assert room is not None and room.shape[0] == max(64, n + n // HEADROOM_DIVISOR)


def test_more_rows_than_counted_grow_the_matrix(tmp_path):
    """Another writer's add between the count and the read: the matrix grows."""
    path = tmp_path / "m.db"
    _store(path)
    conn = sqlite3.connect(path)
    rows = conn.execute(sql.SELECT_STEPS, ("ns", 0, 2**31 - 1)).fetchall()
    conn.close()
    got = read_step_rows(iter([rows[:3], rows[3:40], rows[40:]]), 2, DIM)
    assert got is not None
    kept, vectors = got
    assert [r[11] for r in kept] == [None] * 50
    assert [r[:11] + r[12:] for r in kept] == [r[:11] + r[12:] for r in rows]
    expected = np.frombuffer(b"".join(r[11] for r in rows), "<f4").reshape(50, DIM)
    np.testing.assert_array_equal(vectors, expected)


def _damage(path, pos: int, column: str, value) -> int:
    conn = sqlite3.connect(path)
    (step_id,) = conn.execute("SELECT id FROM steps WHERE ns = 'ns' AND pos = ?", (pos,)).fetchone()
    conn.execute(f"UPDATE steps SET {column} = ? WHERE id = ?", (value, step_id))
    conn.commit()
    conn.close()
    return step_id


@pytest.mark.parametrize(
    "value, message",
    [
        (b"\x00" * 3, "has a 3-byte embedding, expected 64"),
        ("abcd", "has a 4-byte embedding, expected 64"),
        (np.full(DIM, np.inf, "<f4").tobytes(), "has a non-finite embedding"),
        (np.full(DIM, np.nan, "<f4").tobytes(), "has a non-finite embedding"),
    ],
)
def test_a_damaged_vector_is_named(tmp_path, monkeypatch, value, message):
    path = tmp_path / "m.db"
    _store(path)
    monkeypatch.setattr(sqlite_store, "READ_CHUNK", 8)
    bad = _damage(path, 30, "embedding", value)
    with (
        Memory.open(path, encoder=HashingEncoder(DIM)) as mem,
        pytest.raises(StoreCorruptError, match=f"step id {bad} {message}"),
    ):
        mem.store.load("ns")


def test_the_first_damaged_row_is_named_when_a_later_vector_is_damaged(tmp_path, monkeypatch):
    """A blob of the wrong size sends the read back to a whole decode, which names the
    first damaged row whatever its column (here a text before the blob)."""
    path = tmp_path / "m.db"
    _store(path)
    monkeypatch.setattr(sqlite_store, "READ_CHUNK", 8)
    _damage(path, 40, "embedding", b"\x00" * 3)
    first = _damage(path, 12, "text", b"bytes")
    with (
        Memory.open(path, encoder=HashingEncoder(DIM)) as mem,
        pytest.raises(StoreCorruptError, match=f"step id {first}: text is not text"),
    ):
        mem.store.load("ns")


def test_entity_lists_read_as_json_always_read_them(tmp_path):
    """Entity texts that are one JSON list with nothing around it take the direct scan;
    others (spaces around, a number inside, text after) are read as before."""
    path = tmp_path / "m.db"
    _store(path)
    _damage(path, 3, "entities", ' ["A", "B"] ')
    with Memory.open(path, encoder=HashingEncoder(DIM)) as mem:
        assert mem.store.load("ns").view.entities[3] == frozenset({"A", "B"})
    for raw in ('["A", 1]', '["A"] x', '{"A": 1}', "[", ""):
        bad = _damage(path, 3, "entities", raw)
        with (
            Memory.open(path, encoder=HashingEncoder(DIM)) as mem,
            pytest.raises(StoreCorruptError, match=f"step id {bad}: entities are not a JSON list"),
        ):
            mem.store.load("ns")


def test_a_loaded_namespace_holds_its_vectors_once(tmp_path):
    """The buffer of a namespace read from the store takes over the matrix its vectors
    were read into (no copy), and writes its next adds into that matrix's spare rows."""
    path = tmp_path / "m.db"
    _store(path)
    with Memory.open(path, encoder=HashingEncoder(DIM)) as mem:
        loaded = mem.store.load("ns")
        buf = NamespaceBuffer(loaded)
        assert np.shares_memory(buf.data().view.embeddings, loaded.view.embeddings)
        again = NamespaceBuffer(loaded)  # taken once: a second buffer copies
        assert not np.shares_memory(again.data().view.embeddings, loaded.view.embeddings)
        mem.add_messages([{"role": "user", "content": "one more about R00001"}], namespace="ns")
        live = mem._views.buffer("ns")
        assert live.n == 51
        _same(live.data(), _whole(path))


def test_a_buffer_never_takes_over_a_matrix_it_was_not_given_to_take(tmp_path):
    """Vectors that are the first rows of a caller's own matrix are copied: the buffer's
    later rows never land in the caller's."""
    big = np.ones((200, DIM), dtype=np.float32)
    data = namespace_data(
        embeddings=big[:10],
        costs=[1] * 10,
        roles=["user"] * 10,
        texts=[f"t{k}" for k in range(10)],
        tool_actions=[""] * 10,
        tool_signatures=[""] * 10,
        entities=[frozenset()] * 10,
        subgoals=["s"] * 10,
        sources=["s"] * 10,
        step_ids=list(range(10)),
        arguments=["{}"] * 10,
        batch_ends=[10],
    )
    buf = NamespaceBuffer(data)
    assert not np.shares_memory(buf.data().view.embeddings, big)
    more = namespace_data(
        embeddings=np.zeros((5, DIM), dtype=np.float32),
        costs=[1] * 5,
        roles=["user"] * 5,
        texts=["x"] * 5,
        tool_actions=[""] * 5,
        tool_signatures=[""] * 5,
        entities=[frozenset()] * 5,
        subgoals=["s"] * 5,
        sources=["s"] * 5,
        step_ids=list(range(10, 15)),
        arguments=["{}"] * 5,
        batch_ends=[15],
    )
    buf.extend(more)
    assert (big == 1).all()
    # a matrix made to be taken, but whose rows do not start it, is not taken either
    room = matrix_with_room(10, DIM)
    assert take_room(room[1:5]) is None and take_room(room[:5]) is room
