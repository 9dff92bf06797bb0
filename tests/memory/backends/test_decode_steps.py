"""The stores' shared row decoding (``codec.decode_steps``) checks a namespace's rows
column by column; a damaged column sends it through the rows one by one, so the error
names the first damaged row, as a row-by-row check does, whichever columns are
damaged and in whatever order."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from osumem.errors import StoreCorruptError
from osumem.memory.backends.codec import decode_steps

DIM = 4


def _rows(n: int, start: int = 0) -> list[list[Any]]:
    rng = np.random.default_rng(0)
    rows = []
    for k in range(n):
        pos = start + k
        emb = rng.normal(size=DIM).astype("<f4").tobytes()
        entities = json.dumps(sorted({f"E{pos % 3}", f"R{pos % 5}"}))
        meta = None if pos % 4 == 0 else json.dumps({"k": pos % 2})
        time = None if pos % 3 == 0 else 1.5 + pos
        rows.append(
            [100 + pos, pos, "user", f"text {pos}", "", "{}", "", entities, "sg", "src",
             1 + pos % 7, emb, meta, time, None]
        )  # fmt: skip
    return rows


#: Damage to one column of one row: column index → a bad value; the message the
#: decoder gives for it (formatted with the row's step id).
DAMAGE: dict[str, tuple[int, Any, str]] = {
    "role": (2, None, "step id {id}: role is not text"),
    "text": (3, b"bytes", "step id {id}: text is not text"),
    "tool_action": (4, 7, "step id {id}: tool_action is not text"),
    "tool_signature": (6, 1.5, "step id {id}: tool_signature is not text"),
    "entities": (7, "nope", "step id {id}: entities are not a JSON list"),
    "entity list of numbers": (7, "[1, 2]", "step id {id}: entities are not a JSON list"),
    "cost": (10, 0, "step id {id}: cost 0"),
    "cost text": (10, "3", "step id {id}: cost '3'"),
    "blob": (11, b"\x00" * 3, "step id {id} has a 3-byte embedding, expected 16"),
    "blob text": (11, "abcd", "step id {id} has a 4-byte embedding, expected 16"),
    "non-finite": (11, np.full(DIM, np.nan, "<f4").tobytes(), "step id {id} has a non-finite"),
    "metadata": (12, "[1]", "step id {id}: metadata is not a JSON object"),
    "metadata not JSON": (12, "{", "step id {id}: metadata is not a JSON object"),
    "time": (13, "noon", "step id {id}: time is not a number"),
    "updated": (14, b"x", "step id {id}: updated is not a number"),
}


def _decode(rows: list[list[Any]], start: int = 0):
    return decode_steps([tuple(r) for r in rows], [len(rows)], start=start, dim=DIM, where="w")


def test_clean_rows_decode_to_their_columns():
    rows = _rows(40, start=5)
    data = _decode(rows, start=5)
    v = data.view
    assert v.n == 40
    assert data.step_ids.tolist() == [r[0] for r in rows]
    np.testing.assert_array_equal(
        v.embeddings, np.frombuffer(b"".join(r[11] for r in rows), "<f4").reshape(40, DIM)
    )
    assert v.embeddings.dtype == np.float32 and v.embeddings.flags.writeable
    assert v.entities == tuple(frozenset(json.loads(r[7])) for r in rows)
    assert data.metadata == tuple("{}" if r[12] is None else r[12] for r in rows)
    assert v.costs.tolist() == [r[10] for r in rows]
    assert list(v.texts) == [r[3] for r in rows]
    np.testing.assert_array_equal(data.times, [np.nan if r[13] is None else r[13] for r in rows])
    assert np.isnan(data.updated).all()


def test_no_rows():
    data = decode_steps([], [], start=3, dim=DIM, where="w")
    assert data.view.n == 0 and data.view.embeddings.shape == (0, DIM)


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_one_damaged_row_is_named(name):
    col, bad, message = DAMAGE[name]
    rows = _rows(30)
    rows[17][col] = bad
    with pytest.raises(StoreCorruptError) as info:
        _decode(rows)
    assert str(info.value).startswith("w: " + message.format(id=rows[17][0]))


@pytest.mark.parametrize("first", sorted(DAMAGE))
@pytest.mark.parametrize("second", ["text", "metadata", "entities", "blob", "time"])
def test_the_first_damaged_row_is_named_whatever_the_columns(first, second):
    """Two damaged rows: the earlier one is named when both damages belong to the same
    pass over the rows (the row checks, the embedding values, metadata and times, the
    entities: the order the row-by-row decoder used); otherwise the earlier pass's."""
    passes = {2: 0, 3: 0, 4: 0, 6: 0, 10: 0, 11: 0, 12: 2, 13: 2, 14: 2, 7: 3}
    rows = _rows(30)
    c1, bad1, msg1 = DAMAGE[first]
    c2, bad2, msg2 = DAMAGE[second]
    rows[21][c1] = bad1
    rows[9][c2] = bad2
    p1 = 1 if first == "non-finite" else passes[c1]
    p2 = passes[c2]
    expected = msg2.format(id=rows[9][0]) if p2 <= p1 else msg1.format(id=rows[21][0])
    with pytest.raises(StoreCorruptError) as info:
        _decode(rows)
    assert str(info.value).startswith("w: " + expected)


def test_a_missing_position_is_named():
    rows = _rows(10)
    del rows[4]
    with pytest.raises(StoreCorruptError, match=r"^w: position 4 is missing$"):
        _decode(rows)


def test_subclasses_pass_as_the_row_by_row_check_let_them():
    """``bool`` is an ``int`` to ``isinstance``: a cost or time of ``True`` passed the
    row-by-row checks and still does (the column check only sends such rows through
    them)."""
    rows = _rows(6)
    rows[2][10] = True
    rows[3][13] = False
    data = _decode(rows)
    assert data.view.costs[2] == 1 and data.times[3] == 0.0
