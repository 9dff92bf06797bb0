"""The ANN paths of large memories: recall against the exact path on clustered and
unclustered vectors (the recall safeguard), and the large-memory path of
``osumem_adaptive`` selecting exactly what the exact path selects when its ranking
is exact."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hnswlib")

from conftest import unit_rows, with_gaussian_vectors
from osumem.bench.scale import generate, repeated_view, shared_steps
from osumem.retrieve import centroids, step_index
from osumem.retrieve.centroids import CentroidIndex
from osumem.retrieve.packing import top_order
from osumem.retrieve.registry import create
from osumem.types import MemoryView

N = 4000
ANN_FROM = 1000
DIM = 384


@pytest.fixture(scope="module")
def clustered() -> tuple[MemoryView, np.ndarray]:
    data = generate(N, DIM, 0, 30)
    return data.view, data.queries


@pytest.fixture(scope="module")
def unclustered(clustered: tuple[MemoryView, np.ndarray]) -> tuple[MemoryView, np.ndarray]:
    """The clustered memory's steps and annotations with random Gaussian vectors."""
    view, _ = clustered
    rng = np.random.default_rng(1)
    return with_gaussian_vectors(view, rng), unit_rows(rng.standard_normal((30, DIM)))


@pytest.fixture(scope="module")
def repeated() -> tuple[MemoryView, np.ndarray]:
    """400 generated steps ten times over, each copy its own subgoals and entities (a
    memory holding the same steps many times: OSUs with equal centroids)."""
    data = generate(N // 10, DIM, 0, 30)
    return repeated_view(data.view, 10), data.queries


def _fitted(method: str, view: MemoryView, ann: bool):
    r = create(method, seed=0)
    r.ann_min_steps = ANN_FROM if ann else 10**9
    return r.fit(view)


def _recall(view: MemoryView, queries: np.ndarray) -> tuple[float, int]:
    r = _fitted("flat", view, ann=True)
    assert r.step_index.uses_ann(view, view.n)
    hits = 0
    for q in queries:
        found = r.step_index.top(view, q, 64)
        hits += len(set(found.tolist()) & set(top_order(view.embeddings @ q, 64).tolist()))
    return hits / (64 * len(queries)), r.step_index.fallbacks


@pytest.mark.parametrize("kind", ["clustered", "unclustered", "repeated"])
def test_step_index_recall_at_64(kind, request):
    view, queries = request.getfixturevalue(kind)
    recall, fallbacks = _recall(view, queries)
    assert recall >= 0.95
    if kind == "clustered":
        # the index answers clustered queries itself (the safeguard rarely scans)
        assert fallbacks < len(queries) // 2


def test_unclustered_recall_needs_the_safeguard(unclustered, monkeypatch):
    """Without the safeguard the index misses much of the top 64 of random vectors
    (what the safeguard is for)."""
    monkeypatch.setattr(step_index, "clear_share", lambda *a: 1.0)
    recall, _ = _recall(*unclustered)
    assert recall < 0.95


@pytest.mark.parametrize("method", ["flat", "osumem", "osumem_adaptive"])
@pytest.mark.parametrize("kind", ["clustered", "unclustered", "repeated"])
def test_ann_selection_overlaps_exact(kind, method, request):
    """The share of the exact path's selection the ANN path selects too, counting
    equal copies of a step as that step (the exact path breaks their ties by position,
    an index by where its search went)."""
    view, queries = request.getfixturevalue(kind)
    exact, ann = _fitted(method, view, ann=False), _fitted(method, view, ann=True)
    overlap = []
    for q in queries:
        a, b = exact.retrieve(q, 256).positions, ann.retrieve(q, 256).positions
        overlap.append(shared_steps(view.embeddings, a, b) / max(a.size, 1))
    assert float(np.mean(overlap)) >= 0.95


@pytest.mark.parametrize("budget", [64, 1024])
def test_the_coarse_stage_searches_its_centroids_with_twice_the_beam_it_asks_for(
    clustered, budget, monkeypatch
):
    """The coarse stage's first centroid search runs with a beam of
    ``CENTROID_BEAM_PER_K`` times the centroids it asks for (K plus the margin), with
    no floor; only the recall safeguard's second search is wider."""
    view, queries = clustered
    r = _fitted("osumem", view, ann=True)
    searches: list[tuple[int, int | None, int]] = []
    real = CentroidIndex.query

    def watched(self, q, k, ef=None):
        found = real(self, q, k, ef)
        searches.append((k, ef, self._beam_of[1]))
        return found

    monkeypatch.setattr(CentroidIndex, "query", watched)
    for q in queries:
        r.retrieve(q, budget)
    first = [(k, beam) for k, ef, beam in searches if ef is None]
    assert len(first) == len(queries)
    assert all(beam == centroids.CENTROID_BEAM_PER_K * k for k, beam in first)
    assert min(beam for _, beam in first) < 40  # the former floor


@pytest.mark.parametrize("budget", [64, 256, 1024])
def test_adaptive_large_memory_path_equals_exact_path_on_an_exact_ranking(
    clustered, budget, monkeypatch
):
    """With the step index's ranking made exact (an exact ``source``), the
    large-memory path of osumem_adaptive selects what the exact path selects: the
    path changes how the ranking is read, not the method."""
    view, queries = clustered
    exact = _fitted("osumem_adaptive", view, ann=False)
    ann = _fitted("osumem_adaptive", view, ann=True)
    ann.step_index.source = lambda q, k, n: top_order(view.embeddings[:n] @ q, k)
    # the coarse stage's centroid index made exact too (a full scan)
    monkeypatch.setattr(CentroidIndex, "query", lambda self, q, k: None)
    assert ann._ann_path(view.n) and not exact._ann_path(view.n)
    binds = 0
    for q in queries:
        a = exact.retrieve(q, budget).positions
        b = ann.retrieve(q, budget).positions
        assert sorted(a.tolist()) == sorted(b.tolist())
        binds += int(exact.binding(q, view.n).binds)
    assert binds > 0  # both branches (bound and unbound queries) are exercised


@pytest.mark.parametrize("beam", [2, step_index.RAISED_EF_PER_K])
def test_top_wide_answers_as_one_query_of_its_beam_and_serves_later_heads(clustered, beam):
    """``top_wide`` is one index query: its first ``k`` are what a query for ``k``
    with its beam answers (beam 2: ``top``'s first query; the raised beam: ``top``'s
    second), and later heads of the same query up to the beam's width are its prefix
    (no further index query)."""
    view, queries = clustered
    si = _fitted("flat", view, ann=True).step_index
    si.wait(view)
    index = si.hnsw
    assert index is not None
    k = 32
    wide = beam * k
    answered = 0
    asked: list[int] = []
    real_query = index.query

    def counting(q: np.ndarray, k: int, ef: int | None = None) -> np.ndarray:
        asked.append(k)
        return real_query(q, k, ef)

    for q in queries:
        fallbacks = si.fallbacks
        head = si.top_wide(view, q, k, beam)
        assert head.shape[0] == k
        if si.fallbacks == fallbacks:
            alone = index.query(q, k) if beam == 2 else index.query(q, k, ef=wide)
            assert head.tolist() == alone.tolist()
            answered += 1
        else:
            assert head.tolist() == top_order(view.embeddings @ q, k).tolist()
        full = si.top_wide(view, q, wide, beam)  # cached: the same answer
        before = len(asked)
        index.query = counting
        try:
            grown = si.top(view, q, wide - 1)
        finally:
            del index.query
        assert len(asked) == before
        assert grown.tolist() == full[: wide - 1].tolist()
        assert full[:k].tolist() == head.tolist()
    assert answered > len(queries) // 2


@pytest.mark.parametrize("beam", [2, step_index.RAISED_EF_PER_K])
@pytest.mark.parametrize("kind", ["clustered", "unclustered"])
def test_top_wide_recall_at_64(kind, beam, request):
    """The recall safeguard holds for ``top_wide`` too (unclustered vectors scan)."""
    view, queries = request.getfixturevalue(kind)
    si = _fitted("flat", view, ann=True).step_index
    hits = 0
    for q in queries:
        found = si.top_wide(view, q, 64, beam)
        hits += len(set(found.tolist()) & set(top_order(view.embeddings @ q, 64).tolist()))
    assert hits / (64 * len(queries)) >= 0.95


def test_the_centroid_index_holds_each_distinct_centroid_once(repeated):
    """OSUs with equal centroids share one entry of the centroid index (a label that
    stands for all of them); every live OSU is in exactly one such group."""
    view, queries = repeated
    r = _fitted("osumem", view, ann=True)
    r.retrieve(queries[0], 256)
    index = r._centroid_index
    assert index is not None
    groups = index.groups()
    pool = r.fitted_pool
    slots, cents = pool.live_arrays()
    rows = pool.slot_arrays()[0]
    members = [s for group in groups.values() for s in group]
    assert sorted(members) == sorted(slots.tolist())
    keys = {g: {cents[rows[s]].tobytes() for s in group} for g, group in groups.items()}
    assert all(len(k) == 1 for k in keys.values())
    assert len({next(iter(k)) for k in keys.values()}) == len(groups)
    assert len(groups) < len(slots) // 2  # the copies' OSUs share entries
    assert set(index._index.get_ids_list()) - set(index._free) == set(groups)
