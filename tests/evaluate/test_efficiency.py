"""Generic storage measurement and the efficiency table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from numpy.typing import NDArray

from osumem.bench.synthetic import SyntheticConfig, generate
from osumem.evaluate.efficiency import efficiency_table, measure, object_nbytes, structure_nbytes
from osumem.evaluate.runner import MethodRun
from osumem.retrieve.base import Retriever
from osumem.retrieve.flat import FlatVector
from osumem.types import IntArray, MemoryView


class _Toy(Retriever):
    """Learns an owned float64 array, a slice of the view's embeddings and a sparse matrix."""

    def _build(self, view: MemoryView) -> None:
        self.owned_ = np.zeros((10, 4))  # 10·4·8 = 320 bytes
        self.slice_ = view.embeddings[:3]  # shares memory with the view: 0 bytes
        self.sparse_ = sp.csr_matrix(np.eye(5, dtype=np.float64))  # 5·8 + 5·4 + 6·4 = 84
        self.again_ = self.owned_  # counted once
        self.not_learned = np.zeros(1000)  # no trailing underscore: not state

    def _select(self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None):
        return np.empty(0, dtype=np.int64)


def _view() -> MemoryView:
    return MemoryView.build(np.random.default_rng(0).standard_normal((6, 4)), [5] * 6)


def test_structure_nbytes_by_hand() -> None:
    toy = _Toy().fit(_view())
    idx_bytes = toy.sparse_.indices.nbytes + toy.sparse_.indptr.nbytes
    assert structure_nbytes(toy) == 320 + 5 * 8 + idx_bytes


def test_flat_owns_nothing_beyond_the_view() -> None:
    assert structure_nbytes(FlatVector().fit(_view())) == 0


def test_object_nbytes_containers() -> None:
    arr = np.zeros(100, dtype=np.float32)  # 400 bytes
    size = object_nbytes({"a": arr, "b": [arr]})
    assert size >= 400
    assert size < 400 + 1000  # the array is counted once


def test_measure_and_table_ratios() -> None:
    eps = list(generate(SyntheticConfig(n_episodes=2), 1000))
    runs = [MethodRun("flat", "flat"), MethodRun("no_memory", "no_memory")]
    df = measure(eps, runs, budget=256)
    n_queries = sum(len(ep.queries) for ep in eps)
    assert len(df) == 2 * n_queries
    flat = df[df["method"] == "flat"]
    # Flat's storage is the embeddings (n·64·4 bytes) plus the int64 costs (n·8)
    n = np.array([ep.view.n for ep in eps for _ in ep.queries])
    assert np.array_equal(flat["storage_bytes"].to_numpy(), n * (64 * 4 + 8))
    table = efficiency_table(df, reference="flat")
    row = table.set_index("method").loc["flat"]
    assert row["retrieve_ms_ratio"] == pytest.approx(1.0)
    assert row["storage_kb_ratio"] == pytest.approx(1.0)
    assert (table["amortised_ms"] >= table["retrieve_ms"]).all()


def test_table_ratio_is_nan_without_reference() -> None:
    df = pd.DataFrame(
        {
            "method": ["a", "a"],
            "episode": ["e", "e"],
            "dim": ["64", "64"],
            "latency_s": [0.001, 0.003],
            "build_share_s": [0.001, 0.001],
            "build_s": [0.002, 0.002],
            "structure_bytes": [0, 0],
            "storage_bytes": [1000, 1000],
        }
    )
    t = efficiency_table(df, reference="flat")
    assert t.loc[0, "retrieve_ms"] == pytest.approx(2.0)  # median of 1 and 3 ms
    assert t.loc[0, "amortised_ms"] == pytest.approx(3.0)
    assert t.loc[0, "storage_kb"] == pytest.approx(1.0)
    assert np.isnan(t.loc[0, "retrieve_ms_ratio"])
