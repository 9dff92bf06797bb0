"""The agent memory's ANN threshold (``MemoryConfig.ann_min_steps``): below it the
memory scans exactly (no HNSW index is built, answers equal the exact retriever's);
at or above it the HNSW indexes answer, and a reopened memory still answers like a
never-closed one."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from osumem.errors import InvalidInputError
from osumem.memory import Memory
from osumem.memory.api import MEMORY_ANN_MIN_STEPS, MemoryConfig
from osumem.osu.views import hnsw_available
from osumem.retrieve.registry import create
from osumem.retrieve.step_index import ANN_MIN_STEPS
from osumem.types import Step

DIM = 16
# the snapshot tests' settings (similarity refreshes every few adds)
PARAMS = {"similarity_refresh": 12, "similarity_refresh_ratio": 0.1, "similarity_scope": "all"}


def _fill(mems: list[Memory], n: int, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((n, DIM)).astype(np.float32)
    for start in range(0, n, 25):
        steps = [
            Step(
                role="assistant",
                text=f"step {i}",
                cost=int(rng.integers(5, 40)),
                entities=frozenset({f"e{i % 7}"}),
            )
            for i in range(start, min(start + 25, n))
        ]
        for m in mems:
            m.add_steps(steps, embeddings=emb[start : start + len(steps)])
    return emb


def _answers(mem: Memory) -> list[list[int]]:
    # the indexes build in the background; answers compared across memories wait
    mem.retriever()
    mem.wait_ready()
    rng = np.random.default_rng(11)
    qs = [rng.standard_normal(DIM) for _ in range(4)]
    return [[s.position for s in mem.retrieve(q, b).steps] for q in qs for b in (24, 256, 1024)]


def test_default_threshold_is_the_retriever_one():
    assert MemoryConfig().ann_min_steps == MEMORY_ANN_MIN_STEPS == ANN_MIN_STEPS


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "100"])
def test_bad_threshold_is_a_typed_error(bad):
    with pytest.raises(InvalidInputError, match="ann_min_steps"):
        MemoryConfig(ann_min_steps=bad)


def test_below_the_threshold_the_memory_scans_exactly():
    mem = Memory.open(None, ann_min_steps=10_000)
    emb = _fill([mem], 300)
    got = _answers(mem)
    retriever = mem.retriever()
    assert retriever is not None and retriever.ann_min_steps == 10_000
    assert retriever.step_index.hnsw is None  # no HNSW index was built
    # the same answers as a retriever that never uses an index
    exact = create("osumem", None, seed=0)
    exact.ann_min_steps = 10**9
    exact.fit(mem.view())
    rng = np.random.default_rng(11)
    qs = [rng.standard_normal(DIM) for _ in range(4)]
    want = [exact.retrieve(q, b).positions.tolist() for q in qs for b in (24, 256, 1024)]
    assert got == want
    assert emb.shape[0] == mem.n_steps()
    mem.close()


@pytest.mark.skipif(not hnsw_available(), reason="needs hnswlib (the scale extra)")
def test_above_the_threshold_a_reopened_memory_answers_like_the_live_one(tmp_path):
    path = tmp_path / "m.db"
    control = Memory.open(None, params=PARAMS, ann_min_steps=100)  # never closed
    mem = Memory.open(path, params=PARAMS, ann_min_steps=100)
    _fill([mem, control], 300)
    live = _answers(control)
    assert _answers(mem) == live
    assert control.retriever().step_index.hnsw is not None  # the index answered
    mem.close()
    with Memory.open(path, params=PARAMS, ann_min_steps=100) as again:
        assert again.store.snapshot("default").steps == 300  # restored, not replayed
        assert _answers(again) == live
        assert again.retriever().step_index.hnsw is not None
    # the same after a full replay
    with sqlite3.connect(path) as con:
        con.execute("DELETE FROM snapshots")
    with Memory.open(path, params=PARAMS, ann_min_steps=100) as again:
        assert _answers(again) == live
    control.close()


def test_reopen_from_snapshot_with_default_settings(tmp_path):
    # regression: the restored pool's centroids were all set to one norm value
    path = tmp_path / "m.db"
    control = Memory.open(None)
    mem = Memory.open(path)
    _fill([mem, control], 300)
    live = _answers(control)
    mem.close()
    with Memory.open(path) as again:
        assert _answers(again) == live
    control.close()
