"""The SQLite store's delete moves the later steps down run by run (one statement
per run between two deleted positions); a run whose statement meets a taken position
moves past every position first. Either way the store holds what the conformance
suite expects: the kept steps in order, at positions 0..n-1, with their batches."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from test_store_conformance import row, vectors

from osumem.memory import open_store
from osumem.memory.backends.base import position_after_delete
from osumem.memory.backends.sqlite import sql

ENC_ID = "enc:d16"
SIZES = (7, 1, 30, 12, 50, 3, 97)  # 200 steps in 7 add batches


def _filled(store) -> list[int]:
    ids, k = [], 0
    for size in SIZES:
        ids += store.append(
            "ns", [row(k + i) for i in range(size)], vectors(size, seed=k), encoder_id=ENC_ID
        )
        k += size
    store.append("other", [row(500)], vectors(1), encoder_id=ENC_ID)
    return ids


def _check(store, ids: list[int], gone: list[int]) -> None:
    keep = [p for p in range(len(ids)) if p not in set(gone)]
    data = store.load("ns")
    assert data.step_ids.tolist() == [ids[p] for p in keep]
    assert data.view.texts.tolist() == [row(p).text for p in keep]
    ends, out = np.cumsum(SIZES).tolist(), []
    for end in ends:  # each batch end moves down; a batch left empty goes
        new = position_after_delete(end, sorted(gone))
        if not out or new > out[-1]:
            out.append(new)
    assert list(data.batch_ends) == [e for e in out if e > 0]
    assert store.n_steps("other") == 1
    assert store.integrity_problems() == []


@pytest.mark.parametrize(
    "gone",
    [[0], [5], [199], [3, 4, 5, 120], list(range(0, 200, 3)), [7, 150, 151]],
    ids=["first", "one", "last", "runs", "many", "a-whole-batch"],
)
def test_a_delete_moves_each_run_of_later_steps_down(tmp_path, gone):
    with open_store(tmp_path / "m.db") as store:
        ids = _filled(store)
        assert store.delete_steps("ns", gone[::-1]) == sorted(ids[p] for p in gone)
        _check(store, ids, gone)


def test_a_run_that_meets_a_taken_position_moves_past_every_position_first(tmp_path, monkeypatch):
    """Stands in for SQLite updating a run's steps out of position order: the first
    statement of each run fails as a unique-position conflict does (backed out)."""
    gone = [3, 40, 41, 120]
    with open_store(tmp_path / "m.db") as store:
        ids = _filled(store)
        conn, real = store.conn, store.conn.execute
        refused: list[tuple] = []

        def execute(statement, params=()):
            # a run's first statement: down, from below every position (the fallback
            # moves up, then down from past every position)
            if statement == sql.MOVE_RUN and params[0] > 0 and params[2] < len(ids):
                refused.append(params)
                raise sqlite3.IntegrityError("UNIQUE constraint failed: steps.ns, steps.pos")
            return real(statement, params)

        monkeypatch.setattr(conn, "execute", execute)
        store.delete_steps("ns", gone)
        monkeypatch.undo()
        assert [p[2:] for p in refused] == [(3, 40), (41, 120), (120, 200)]  # each run
        _check(store, ids, gone)
