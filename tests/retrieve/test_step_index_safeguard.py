"""The step index's recall safeguard in its tiers (kept, widened, scanned) and the
approximate packing's exact finish over the cheap steps, with stand-in indexes whose
answers are known."""

from __future__ import annotations

import numpy as np
import pytest

from osumem.bench.scale import generate
from osumem.retrieve import step_index
from osumem.retrieve.packing import flat_pack, top_order
from osumem.retrieve.step_index import StepIndex

N = 3000


@pytest.fixture(scope="module")
def data():
    return generate(N, 32, 0, 20)


class _Index:
    """A stand-in HNSW index: the default beam answers the ``k`` worst steps (a beam
    stuck far from the query); a wider beam answers ``wide(q, k)``."""

    def __init__(self, view, wide) -> None:
        self.view = view
        self.size = view.n
        self.capacity = view.n
        self.wide = wide
        self.calls: list[int | None] = []

    def query(self, q, k, ef=None):
        self.calls.append(ef)
        if ef is None:
            return top_order(-(self.view.embeddings @ q), k)
        return self.wide(q, k)


def _exact(view, q, k):
    return top_order(view.embeddings @ q, k)


def test_a_stuck_first_beam_is_widened_and_kept_when_the_widened_answer_is_clear(data):
    view = data.view
    index = StepIndex(seed=0, ann_min_steps=1)
    index.hnsw = _Index(view, lambda q, k: _exact(view, q, k))
    for q in data.queries[:5]:
        got = index.top(view, q, 32)
        assert got.tolist() == _exact(view, q, 32).tolist()
    assert index.raised == 5 and index.fallbacks == 0
    assert index.hnsw.calls == [None, step_index.RAISED_EF_PER_K * 32] * 5


def test_an_answer_still_unsure_when_widened_is_scanned_exactly(data):
    view = data.view
    index = StepIndex(seed=0, ann_min_steps=1)
    # the widened beam as lost as the first one
    index.hnsw = _Index(view, lambda q, k: top_order(-(view.embeddings @ q), k))
    for q in data.queries[:5]:
        assert index.top(view, q, 32).tolist() == _exact(view, q, 32).tolist()
    assert index.fallbacks == 5 and index.raised == 0


def test_the_clear_answer_is_kept_without_a_second_query(data):
    view = data.view
    index = StepIndex(seed=0, ann_min_steps=1)

    class Exact(_Index):
        def query(self, q, k, ef=None):
            self.calls.append(ef)
            return _exact(view, q, k)

    index.hnsw = Exact(view, None)
    q = data.queries[0]
    assert index.top(view, q, 32).tolist() == _exact(view, q, 32).tolist()
    assert index.hnsw.calls == [None] and index.raised == index.fallbacks == 0


def _packs(data, monkeypatch, cheap_scan: int) -> list[int]:
    """Every approximate pack over an exact ranking checked against the exact first
    fit; returns the largest head each pack asked for."""
    monkeypatch.setattr(step_index, "CHEAP_SCAN_STEPS", cheap_scan)
    view = data.view
    index = StepIndex(seed=0, ann_min_steps=1)
    asked: list[int] = []

    def source(q, k, n):
        asked.append(k)
        return top_order(view.embeddings[:n] @ q, k)

    index.source = source
    rng = np.random.default_rng(0)
    largest = []
    for q in data.queries:
        for budget in (37, 256, 700):
            for n_ex in (0, 40):
                exclude = np.sort(rng.choice(N, size=n_ex, replace=False)).astype(np.int64)
                asked.clear()
                got = index.pack(view, q, N, budget, exclude if n_ex else None)
                want = flat_pack(view.embeddings @ q, view.costs, budget, exclude)
                assert got.tolist() == want.tolist()
                largest.append(max(asked))
    return largest


def test_ann_pack_on_an_exact_ranking_is_the_exact_first_fit(data, monkeypatch):
    """With an exact ranking the approximate packing selects what the exact first
    fit selects, whether first fit ends over larger heads or over the cheap steps;
    the cheap finish spares the larger heads."""
    default = step_index.CHEAP_SCAN_STEPS
    grown = _packs(data, monkeypatch, 0)
    cheap = _packs(data, monkeypatch, default)
    assert sum(cheap) < sum(grown)


def test_the_cheap_finish_packs_the_cheap_steps_left_by_exact_cosine(data):
    """The cheap finish packs, first fit by exact cosine (ties by position), the steps
    costing at most the budget other than the head already packed and the excluded
    ones; a budget below every cost packs nothing."""
    view = data.view
    rng = np.random.default_rng(1)
    low = int(view.costs.min())
    for q in data.queries[:5]:
        for budget in (low, low + 3, 3 * low):
            seen = rng.choice(N, size=30, replace=False).astype(np.int64)
            skip = np.sort(rng.choice(N, size=40, replace=False)).astype(np.int64)
            got = StepIndex._cheap_pack(view, q, budget, seen, skip)
            left_out = np.zeros(N, dtype=bool)
            left_out[seen] = left_out[skip] = True
            cheap = np.flatnonzero((view.costs <= budget) & ~left_out)
            scores = view.embeddings[cheap] @ q
            ranked = cheap[np.argsort(-scores, kind="stable")]
            want, room = [], budget
            for p in ranked.tolist():
                if view.costs[p] <= room:
                    want.append(p)
                    room -= int(view.costs[p])
            assert got.tolist() == want
            assert got.size and not np.isin(got, np.concatenate([seen, skip])).any()
    assert StepIndex._cheap_pack(view, data.queries[0], low - 1, None, None).size == 0
