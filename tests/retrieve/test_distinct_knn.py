"""The step index's HNSW over distinct rows (:class:`DistinctKnn`): equal rows are one
point of the graph, a query answers every row of the points it finds (by position,
cut to k), and a matrix without equal rows gets the graph and the answers of a plain
index over its rows, however the rows were added."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("hnswlib")

from conftest import unit_rows
from osumem.osu.views import KnnIndex
from osumem.retrieve import distinct
from osumem.retrieve.distinct import DistinctKnn
from osumem.retrieve.packing import top_order

DIM = 24
EF_CONSTRUCTION = 64


def _graph(index) -> dict:
    return index.__getstate__()[0]


def _same_graph(a, b) -> None:
    ga, gb = _graph(a), _graph(b)
    assert ga["cur_element_count"] == gb["cur_element_count"]
    for name in ("data_level0", "link_lists", "label_lookup_external"):
        np.testing.assert_array_equal(ga[name], gb[name], err_msg=name)


def _added(rows: np.ndarray, piece: int) -> DistinctKnn:
    index = DistinctKnn(DIM, 0, ef_construction=EF_CONSTRUCTION)
    for lo in range(0, rows.shape[0], piece):
        index.add(rows[lo : lo + piece])
    return index


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return unit_rows(np.random.default_rng(3).standard_normal((1500, DIM)))


@pytest.fixture(scope="module")
def repeated(rows: np.ndarray) -> np.ndarray:
    """300 rows five times over (shuffled), then 200 seen once: 1,700 rows, 500 distinct."""
    rng = np.random.default_rng(4)
    idx = np.concatenate([rng.permutation(np.tile(np.arange(300), 5)), np.arange(300, 500)])
    return rows[idx]


def test_distinct_rows_give_the_plain_index_graph_and_answers(rows):
    plain = KnnIndex(DIM, 0, ef_construction=EF_CONSTRUCTION, capacity=rows.shape[0])
    plain.add(rows)
    index = DistinctKnn(DIM, 0, ef_construction=EF_CONSTRUCTION, capacity=rows.shape[0])
    index.add(rows)
    _same_graph(plain._index, index.knn._index)
    assert index.size == index.n_groups == rows.shape[0]
    for q in rows[:25] + 0.05:
        for k in (1, 40, 200):
            np.testing.assert_array_equal(index.query(q, k), plain.query(q, k))


def test_equal_rows_are_one_point(repeated):
    index = _added(repeated, 1700)
    assert index.size == 1700 and index.n_groups == 500
    groups = index.groups()
    positions = sorted(p for members in groups.values() for p in members)
    assert positions == list(range(1700))  # every row in exactly one group
    seen = set()
    for members in groups.values():
        assert list(members) == sorted(members)
        key = repeated[members[0]].tobytes()
        assert all(repeated[p].tobytes() == key for p in members)
        assert key not in seen  # one group per distinct row
        seen.add(key)
    # groups numbered by their first row
    firsts = [groups[g][0] for g in range(index.n_groups)]
    assert firsts == sorted(firsts)


def test_a_query_answers_every_copy_best_first_by_position(repeated):
    index = _added(repeated, 1700)
    for q in repeated[::97] + 0.02:
        for k in (1, 7, 64, 1700):
            found = index.query(q, k, ef=600)  # a beam over the whole graph: exact
            np.testing.assert_array_equal(found, top_order(repeated @ q, k))


@pytest.mark.parametrize("piece", [1, 7, 64, 1000])
def test_adds_in_pieces_give_the_groups_and_graph_of_one_add(repeated, piece, monkeypatch):
    whole = _added(repeated, 1700)
    # a small dict of recent keys: merged into the sorted keys many times over
    monkeypatch.setattr(distinct, "RECENT_MAX", 40)
    monkeypatch.setattr(distinct, "RECENT_BATCH_MAX", 16)
    monkeypatch.setattr(distinct, "KEY_CHUNK", 300)  # one add digested in pieces
    pieces = _added(repeated, piece)
    assert pieces.groups() == whole.groups()
    _same_graph(whole.knn._index, pieces.knn._index)
    q = repeated[5] + 0.03
    np.testing.assert_array_equal(pieces.query(q, 50), whole.query(q, 50))


def test_capacity_counts_rows_the_graph_can_still_take(repeated):
    index = DistinctKnn(DIM, 0, ef_construction=EF_CONSTRUCTION, capacity=1024)
    index.add(repeated)
    # 1,700 rows held in 500 points: room for 524 more distinct rows before a resize
    assert index.capacity == 1700 + 1024 - 500


def test_row_keys_equal_exactly_for_equal_rows(rows):
    keys = distinct.row_keys(np.vstack([rows[:3], rows[:1], -rows[:1]]))
    assert keys[0] == keys[3] and len(set(keys)) == 4 and all(len(k) == 16 for k in keys)


def test_queries_on_other_threads_while_rows_are_added(repeated):
    """A query on another thread while rows open and join groups answers rows that
    exist (a label's rows are recorded before the label enters the graph)."""
    index = _added(repeated[:600], 600)
    stop = threading.Event()
    answers: list[np.ndarray] = []
    errors: list[BaseException] = []

    def read(q: np.ndarray) -> None:
        try:
            while not stop.is_set():
                answers.append(index.query(q, 30))
        except BaseException as exc:  # reported below
            errors.append(exc)

    readers = [threading.Thread(target=read, args=(repeated[i] + 0.02,)) for i in (0, 9)]
    for t in readers:
        t.start()
    for lo in range(600, 1700, 5):
        index.add(repeated[lo : lo + 5])
    stop.set()
    for t in readers:
        t.join(10)
    assert errors == [] and answers
    for found in answers:
        assert found.size == 30 and found.min() >= 0 and found.max() < 1700
        assert np.unique(found).size == 30
    assert sorted(p for m in index.groups().values() for p in m) == list(range(1700))
