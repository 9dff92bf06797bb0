"""Boundary validation of the memory view and queries, and the array helpers."""

import numpy as np
import pytest

from conftest import make_view
from osumem.errors import DimensionError, InvalidInputError, NonFiniteError
from osumem.types import MemoryView, distinct, l2_normalise, row_norms


def test_rows_are_normalised_and_costs_int():
    v = make_view(5, 4)
    assert np.allclose(np.linalg.norm(v.embeddings, axis=1), 1.0, atol=1e-6)
    assert v.embeddings.dtype == np.float32 and v.costs.dtype == np.int64


def test_nan_embedding_names_the_row():
    emb = np.ones((4, 3))
    emb[2, 1] = np.nan
    with pytest.raises(NonFiniteError, match="row 2"):
        MemoryView.build(emb, [1, 1, 1, 1])


def test_cost_length_mismatch():
    with pytest.raises(DimensionError, match="costs"):
        MemoryView.build(np.ones((3, 2)), [1, 2])


def test_nonpositive_cost_names_the_step():
    with pytest.raises(InvalidInputError, match="step 1"):
        MemoryView.build(np.ones((3, 2)), [1, 0, 2])


def test_annotation_column_length_mismatch():
    with pytest.raises(DimensionError, match="subgoals"):
        MemoryView.build(np.ones((3, 2)), [1, 1, 1], subgoals=["a"])


def test_query_dimension_mismatch_and_nan():
    v = make_view(5, 4)
    with pytest.raises(DimensionError, match="dimension 3"):
        v.check_query(np.ones(3))
    with pytest.raises(NonFiniteError):
        v.check_query(np.array([1.0, np.nan, 0.0, 0.0]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_check_query_normalises_as_l2_normalise_bit_for_bit(dtype):
    """The query's fast path gives l2_normalise's bits for every scale, and its
    fallback keeps the zero vector zero and names a non-finite entry."""
    v = make_view(5, 16)
    rng = np.random.default_rng(0)
    for scale in 10.0 ** np.arange(-30, 19, 3):
        x = (rng.standard_normal(16) * scale).astype(dtype)
        got, want = v.check_query(x), l2_normalise(x)[0]
        assert got.dtype == want.dtype == np.float32
        assert got.tobytes() == want.tobytes()
    assert not v.check_query(np.zeros(16, dtype=dtype)).any()
    if dtype is not np.int64:
        with pytest.raises(NonFiniteError, match="query: row 0"):
            v.check_query(np.r_[np.inf, np.ones(15)].astype(dtype))


@pytest.mark.parametrize("shape", [(1, 256), (3, 384), (7, 1), (5, 33), (0, 8)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_norms_are_numpys_bit_for_bit(shape, dtype):
    rng = np.random.default_rng(1)
    for scale in (1e-20, 1.0, 3e15):
        x = (rng.standard_normal(shape) * scale).astype(dtype)
        want = np.linalg.norm(x, axis=1, keepdims=True)
        assert row_norms(x).dtype == want.dtype and row_norms(x).tobytes() == want.tobytes()


def test_prefix_is_causal_view():
    v = make_view(10, 4)
    p = v.prefix(4)
    assert p.n == 4 and np.shares_memory(p.embeddings, v.embeddings)
    assert v.prefix(99) is v


def test_prefix_of_a_list_prefix_column_shares_the_list():
    """A view over a growing list (the memory's entity column) gives a prefix over the
    same list, without copying it, with the same entries."""
    import dataclasses

    from osumem.types import EntityPrefix

    v = make_view(10, 4, entities=[{f"e{i}"} for i in range(10)])
    items = [frozenset(e) for e in v.entities] + [frozenset({"later"})]
    w = dataclasses.replace(v, entities=EntityPrefix(items, 10))
    p = w.prefix(4)
    assert isinstance(p.entities, EntityPrefix) and p.entities._items is items
    assert len(p.entities) == 4 and p.entities == tuple(v.entities[:4])
    assert p.prefix(2).entities == tuple(v.entities[:2])


def test_take_concat_extend_prefix_go_over_every_column() -> None:
    v = make_view(
        5,
        4,
        costs=[1, 2, 3, 4, 5],
        tool_actions=list("abcde"),
        tool_signatures=list("fghij"),
        entities=[{"x"}, set(), {"y", "z"}, {"x"}, set()],
        subgoals=list("klmno"),
        sources=list("ppqqr"),
        roles=["user", "tool", "tool", "assistant", "tool"],
        texts=list("stuvw"),
    )
    w = v.take([4, 0, 0])
    for c in v.column_names():
        col, got = getattr(v, c), getattr(w, c)
        assert len(got) == 3
        if c == "embeddings":
            np.testing.assert_array_equal(got, col[[4, 0, 0]])
        else:
            assert list(got) == [col[4], col[0], col[0]]
    both = v.take([0, 1]).extend(v.take([2, 3, 4]))
    for c in v.column_names():
        np.testing.assert_array_equal(np.asarray(getattr(both, c)), np.asarray(getattr(v, c)))
    assert MemoryView.concat([v.prefix(2), v.take([2, 3, 4])]).texts.tolist() == list("stuvw")
    assert all(len(getattr(v.prefix(3), c)) == 3 for c in v.column_names())


def test_take_and_concat_reject_bad_input() -> None:
    v = make_view(3, 4)
    with pytest.raises(InvalidInputError):
        v.take([3])
    with pytest.raises(DimensionError):
        MemoryView.concat([v, make_view(2, 5)])
    with pytest.raises(DimensionError):
        v.with_embeddings(np.ones((2, 4)))
    moved = v.with_embeddings(np.ones((3, 4)))
    assert np.allclose(np.linalg.norm(moved.embeddings, axis=1), 1.0)
    assert moved.costs is v.costs


@pytest.mark.parametrize(
    "values",
    [
        np.array([], dtype=np.int64),
        np.array([7], dtype=np.int32),
        np.array([3, 1, 3, 2, 1, 3], dtype=np.int64),
        np.array([[5, 5], [0, 9]], dtype=np.int64),
        np.random.default_rng(0).integers(0, 50, 500),
    ],
)
def test_distinct_is_what_np_unique_returns(values):
    got, want = distinct(values), np.unique(values)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()
