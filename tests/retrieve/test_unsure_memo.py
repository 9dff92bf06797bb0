"""The unsure-index memo: an agent memory's index whose recall safeguard keeps falling
back is skipped (the exact scan at once, with a probe of the index now and then); a
retriever used directly never skips; clustered data never engages it."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hnswlib")

from conftest import unit_rows, with_gaussian_vectors
from osumem.bench.scale import generate
from osumem.retrieve import step_index
from osumem.retrieve.packing import top_order
from osumem.retrieve.registry import create
from osumem.retrieve.step_index import UnsureMemo
from osumem.types import MemoryView

N, DIM = 3000, 384


def _gaussian() -> tuple[MemoryView, np.ndarray]:
    rng = np.random.default_rng(1)
    view = with_gaussian_vectors(generate(N, DIM, 0, 40).view, rng)
    return view, unit_rows(rng.standard_normal((40, DIM)))


def test_memo_skips_after_a_run_of_fallbacks_probes_and_clears():
    memo = UnsureMemo()
    for _ in range(step_index.UNSURE_WINDOW - 1):
        assert not memo.skip()
        memo.record(True)
    assert not memo.skip()  # the window is not full yet
    memo.record(True)
    decisions = [memo.skip() for _ in range(2 * step_index.UNSURE_PROBE_EVERY)]
    probes = [i for i, d in enumerate(decisions) if not d]
    assert probes == [step_index.UNSURE_PROBE_EVERY - 1, 2 * step_index.UNSURE_PROBE_EVERY - 1]
    memo.record(True)  # a probe that fell back: still unsure
    assert memo.skip()
    memo.record(False)  # a probe the index answered: trusted again
    assert not memo.skip()
    mixed = UnsureMemo()
    for i in range(40):  # fewer than UNSURE_MIN of every window fell back
        assert not mixed.skip()
        mixed.record(i % 2 == 0)


def _counted(si):
    asked = []
    real = si.hnsw.query

    def counting(q, k, ef=None):
        asked.append(k)
        return real(q, k, ef)

    si.hnsw.query = counting
    return asked


@pytest.mark.parametrize("background", [True, False])
def test_step_index_skips_an_unsure_index_only_in_an_agent_memory(background):
    view, queries = _gaussian()
    r = create("flat", seed=0)
    r.ann_min_steps = 1000
    r.fit(view)
    si = r.step_index
    si.wait(view)
    si.background = background
    asked = _counted(si)
    for q in queries:
        found = si.top(view, q, 64)
        assert found.tolist() == top_order(view.embeddings @ q, 64).tolist()  # exact
    if background:
        assert si.unsure.skipped > len(queries) // 2
        assert len(asked) < len(queries)  # most queries never asked the index
    else:
        assert si.unsure.skipped == 0 and si.fallbacks == len(queries)
        assert len(asked) >= 2 * len(queries)  # the first beam and the raised one, each


def test_clustered_queries_never_engage_the_memo():
    data = generate(N, DIM, 0, 40)
    r = create("flat", seed=0)
    r.ann_min_steps = 1000
    r.fit(data.view)
    si = r.step_index
    si.wait(data.view)
    si.background = True
    asked = _counted(si)
    for q in data.queries:
        si.top(data.view, q, 64)
    assert si.unsure.skipped == 0 and len(asked) >= len(data.queries)


@pytest.mark.parametrize("method", ["osumem", "osumem_adaptive"])
def test_coarse_stage_skips_an_unsure_centroid_index_with_the_same_selections(method):
    """On unclustered vectors every safeguarded query falls back to the exact scans:
    skipping the indexes gives the same selections, without asking them."""
    view, queries = _gaussian()
    plain, memo = create(method, seed=0), create(method, seed=0)
    memo.step_index.background = True  # as the agent memory makes its retrievers
    for r in (plain, memo):
        r.ann_min_steps = 1000
        r.fit(view)
        r.step_index.wait(view)
    for q in queries:
        a, b = plain.retrieve(q, 256).positions, memo.retrieve(q, 256).positions
        assert a.tolist() == b.tolist()
        if memo._centroid_index is not None:
            memo._centroid_index.wait()  # built in the background: take it
    assert memo.step_index.unsure.skipped > 0
    ci = memo._centroid_index
    assert ci is not None and ci.background and ci.unsure.skipped > 0
