"""Boundary validation of the memory view and queries."""

import numpy as np
import pytest

from conftest import make_view
from osumem.errors import DimensionError, InvalidInputError, NonFiniteError
from osumem.types import MemoryView


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


def test_prefix_is_causal_view():
    v = make_view(10, 4)
    p = v.prefix(4)
    assert p.n == 4 and np.shares_memory(p.embeddings, v.embeddings)
    assert v.prefix(99) is v
