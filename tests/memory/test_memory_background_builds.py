"""No query waits for an index build: the step and centroid indexes of a memory
build (and catch up with bulks of new steps) on background threads while queries
answer exactly; a bulk add builds the memory's structure at add time;
``Memory.wait_ready`` makes answers independent of timing; the exact path's
selections are unchanged."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytest.importorskip("hnswlib")

from conftest import returns_soon
from osumem.bench.scale import generate, step_of
from osumem.memory import Memory
from osumem.memory.retrievers import (
    PREPARE_BEHIND,
    PREPARE_INCREMENT,
    PREPARE_MIN_STEPS,
    RetrieverCache,
)
from osumem.retrieve import centroids
from osumem.retrieve.distinct import DistinctKnn
from osumem.retrieve.packing import top_order
from osumem.retrieve.registry import create
from osumem.retrieve.step_index import CATCHUP_STEPS, StepIndex
from osumem.types import Step

N = 1500


@pytest.fixture(scope="module")
def data():
    return generate(N, 32, 0, 10)


class _Gate:
    """Makes every insertion into the step index wait until :meth:`open` (a build that
    takes as long as the test wants)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.event = threading.Event()
        self.threads: set[str] = set()
        real = DistinctKnn.add

        def add(index: DistinctKnn, vectors: np.ndarray) -> None:
            self.threads.add(threading.current_thread().name)
            assert self.event.wait(30), "the gate was never opened"
            real(index, vectors)

        monkeypatch.setattr(DistinctKnn, "add", add)

    def open(self) -> None:
        self.event.set()


def _in_thread(call):
    return returns_soon(call, "the call waited for the index build")


def test_background_step_index_answers_exactly_while_it_builds(data, monkeypatch):
    view, q = data.view, data.queries[0]
    index = StepIndex(seed=0, ann_min_steps=1000)
    index.background = True
    gate = _Gate(monkeypatch)
    found = _in_thread(lambda: index.top(view, q, 20))
    assert found.tolist() == top_order(view.embeddings @ q, 20).tolist()
    assert index.building and index.hnsw is None
    assert gate.threads == {"osumem-step-index"}  # inserted off the query's thread
    gate.open()
    index.wait()
    assert not index.building and index.hnsw is not None and index.hnsw.size == N


def test_without_background_the_index_builds_in_the_query(data):
    view, q = data.view, data.queries[0]
    index = StepIndex(seed=0, ann_min_steps=1000)
    index.top(view, q, 20)
    assert index.hnsw is not None and index.hnsw.size == N and not index.building


def test_background_catch_up_of_a_bulk_of_new_steps(data, monkeypatch):
    view, q = data.view, data.queries[1]
    start = N - CATCHUP_STEPS - 100
    index = StepIndex(seed=0, ann_min_steps=1000)
    index.background = True
    index.top(view.prefix(start), q, 10)
    index.wait()
    assert index.hnsw is not None and index.hnsw.size == start
    # a few new steps are inserted in the query itself
    few = view.prefix(start + 5)
    index.top(few, q, 10)
    assert index.hnsw.size == start + 5 and not index.building
    # a bulk goes to a background thread; the query meanwhile scans exactly
    gate = _Gate(monkeypatch)
    found = _in_thread(lambda: index.top(view, q, 10))
    assert found.tolist() == top_order(view.embeddings @ q, 10).tolist()
    assert index.building
    gate.open()
    index.wait()
    assert index.hnsw is not None and index.hnsw.size == N


def test_centroid_index_builds_in_the_background(data, monkeypatch):
    r = create("osumem", seed=0).fit(data.view)
    pool = r.fitted_pool
    gate = threading.Event()
    real = centroids.CentroidIndex._new_index

    def slow(self, slots, cents):
        assert gate.wait(30)
        return real(self, slots, cents)

    monkeypatch.setattr(centroids.CentroidIndex, "_new_index", slow)
    index = centroids.CentroidIndex(pool, 0, background=True)
    assert _in_thread(lambda: index.query(data.queries[0], 5)) is None  # caller scans
    gate.set()
    index.wait()
    found = index.query(data.queries[0], 5)
    assert found is not None and found.shape == (5,)


def _steps(data, lo: int, hi: int) -> list[Step]:
    return [step_of(data, p) for p in range(lo, hi)]


def test_a_bulk_add_builds_the_structure_at_add_time(data):
    mem = Memory.open(None, encoder="hashing", seed=0)
    mem.add_steps(_steps(data, 0, PREPARE_MIN_STEPS - 1))
    assert "default" not in mem._retrievers._fitted  # a small add builds nothing yet
    mem.add_steps(_steps(data, PREPARE_MIN_STEPS - 1, N))
    retriever, fitted = mem._retrievers._fitted["default"]
    assert fitted == N and retriever.fitted_pool.n_steps == N
    mem.close()


def test_a_run_of_single_adds_catches_up_in_bounded_increments(data, monkeypatch):
    """Single adds back to back (no retrieve): the add that leaves
    ``PREPARE_MIN_STEPS`` steps out builds the structure; after it, once
    ``PREPARE_BEHIND`` steps are not in it, an add replays the add batches ending
    within ``PREPARE_INCREMENT`` steps, so no add replays more than that, the structure
    stays within ``PREPARE_BEHIND`` steps of the store, and the retrieve after the run
    has little left to replay. The answers are those of a retriever that took every
    add in place (no refresh falls due here, so nothing depends on timing)."""
    spans: list[tuple[int, int]] = []
    real = RetrieverCache._replay

    def replay(self, namespace, data_, upto, retriever=None, fitted=0, *args, **kwargs):
        out = real(self, namespace, data_, upto, retriever, fitted, *args, **kwargs)
        spans.append((fitted, out[1]))
        return out

    monkeypatch.setattr(RetrieverCache, "_replay", replay)
    params = {"similarity_refresh": 10**6, "similarity_refresh_ratio": 0.0}
    mem = Memory.open(None, encoder="hashing", seed=0, params=params)
    n = PREPARE_MIN_STEPS + 100
    for p in range(n):
        mem.add_steps([step_of(data, p)])
        _, fitted = mem._retrievers._fitted.get("default", (None, 0))
        assert p + 1 - fitted < (PREPARE_BEHIND if fitted else PREPARE_MIN_STEPS)
    assert spans[0] == (0, PREPARE_MIN_STEPS)  # the first build, at the add that made it due
    assert len(spans) > 1
    assert all(0 < b - a <= PREPARE_INCREMENT for a, b in spans[1:])
    _answers_like_single_adds_in_place(mem, params, n, (3, 300, n - 1))
    mem.close()


@pytest.mark.parametrize("method", ["osumem", "osumem_adaptive"])
def test_background_memory_answers_like_a_built_retriever_after_wait_ready(data, method):
    """Above its ANN size, a memory whose indexes were built in the background
    answers, once :meth:`Memory.wait_ready` returns, what a retriever that built
    them in place answers."""
    mem = Memory.open(None, encoder="hashing", method=method, seed=0, ann_min_steps=1000)
    mem.add_steps(_steps(data, 0, N))
    texts = data.query_texts
    first = [mem.retrieve(t).positions for t in texts]  # exact or ANN, by timing
    assert all(len(p) for p in first)
    mem.wait_ready()
    got = [mem.retrieve(t).positions for t in texts]
    own = mem.retriever()
    assert own is not None and own.step_index.background
    ref = create(method, seed=0)
    ref.ann_min_steps = 1000
    ref.fit(own.fitted_view)
    for t, g in zip(texts, got, strict=True):
        q = mem.encoder.encode([t])[0]
        assert list(g) == ref.retrieve(q, mem.config.budget, text=t).positions.tolist()
    mem.close()


@pytest.mark.parametrize("method", ["osumem", "osumem_adaptive", "flat"])
def test_exact_path_selections_unchanged(data, method):
    """Below the memory's ANN size, a memory selects exactly what the retriever's
    exact scan selects (the evaluated code)."""
    mem = Memory.open(None, encoder="hashing", method=method, seed=0)
    assert mem.config.ann_min_steps > N
    mem.add_steps(_steps(data, 0, N))
    own = mem.retriever()
    assert own is not None and not own.step_index.uses_ann(own.fitted_view, N)
    ref = create(method, seed=0)
    ref.ann_min_steps = 10**9
    ref.fit(own.fitted_view)
    for t in data.query_texts:
        q = mem.encoder.encode([t])[0]
        expect = ref.retrieve(q, mem.config.budget, text=t).positions.tolist()
        assert mem.retrieve(t).positions == expect
    mem.close()


def test_a_memory_add_does_not_wait_for_a_similarity_refresh(data, held_detection):
    """The memory's pool refreshes its similarity view in the background: the add that
    makes one due and the retrieves after it do not wait for the detection; after
    ``wait_ready`` the answers are those of a retriever that refreshed in place."""
    params = {"similarity_refresh": 12, "similarity_refresh_ratio": 0.1, "similarity_scope": "all"}
    mem = Memory.open(None, encoder="hashing", seed=0, params=params)
    inline = create("osumem", params, seed=0)
    inline.ann_min_steps = mem.config.ann_min_steps
    bounds = [40, 45, 50, 53, 56, 60]
    lo = 0
    for hi in bounds:  # the add at 45 makes a refresh due; 53 the next
        _in_thread(lambda lo=lo, hi=hi: mem.add_steps(_steps(data, lo, hi)))
        _in_thread(lambda: mem.retrieve("a question", 64))
        view = mem.view()
        inline.fit(view) if lo == 0 else inline.update(view)
        lo = hi
    retriever = mem.retriever()
    assert retriever.fitted_pool.refresh_pending
    held_detection.set()
    mem.wait_ready()
    assert not retriever.fitted_pool.refresh_pending
    q = mem.view().embeddings[7]
    for budget in (32, 128, 512):
        got = [s.position for s in mem.retrieve(q, budget).steps]
        assert got == inline.retrieve(q, budget).positions.tolist()
    mem.close()


def test_a_tight_loop_of_small_adds_never_waits_for_a_refresh(data, held_detection):
    """Single-step adds back to back: the adds that bring the structure up to date
    (in increments, once ``PREPARE_BEHIND`` steps are not in it) reach the point where
    a refresh they made due must be applied. They stop there instead of waiting (the
    refresh is still being computed); ``wait_ready`` takes the rest, and the memory
    then answers what a retriever that refreshed in place at the same adds answers."""
    params = {"similarity_refresh": 12, "similarity_refresh_ratio": 0.1, "similarity_scope": "all"}
    n = PREPARE_MIN_STEPS + 10  # fewer than PREPARE_MIN_STEPS steps left out (see below)
    mem = Memory.open(None, encoder="hashing", seed=0, params=params)

    def adds() -> None:
        for p in range(n):
            mem.add_steps([step_of(data, p)])

    _in_thread(adds)
    retriever, fitted = mem._retrievers._fitted["default"]
    assert 0 < fitted < n  # stopped at the first refresh's application point
    assert retriever.fitted_pool.refresh_pending
    held_detection.set()
    mem.wait_ready()
    retriever, fitted = mem._retrievers._fitted["default"]
    assert fitted == n and not retriever.fitted_pool.refresh_pending
    _answers_like_single_adds_in_place(mem, params, n, (3, 200, n - 1))
    mem.close()


def test_adds_that_outrun_the_refreshes_wait_for_them(data, held_detection):
    """Once ``PREPARE_MIN_STEPS`` steps are out of the built structure (its replay
    stopped at a refresh still being computed while the adds went on), an add waits
    for the refresh instead of leaving an ever longer replay, and a similarity view
    ever further behind, to the next retrieve."""
    params = {"similarity_refresh": 12, "similarity_refresh_ratio": 0.1, "similarity_scope": "all"}
    mem = Memory.open(None, encoder="hashing", seed=0, params=params)
    n = PREPARE_MIN_STEPS + 10
    _in_thread(lambda: [mem.add_steps([step_of(data, p)]) for p in range(n)])
    _, fitted = mem._retrievers._fitted["default"]
    assert n - fitted < PREPARE_MIN_STEPS
    done = threading.Event()

    def adds() -> None:
        for p in range(n, fitted + PREPARE_MIN_STEPS + 1):
            mem.add_steps([step_of(data, p)])
        done.set()

    threading.Thread(target=adds, daemon=True).start()
    assert not done.wait(1.0), "no add waited for the held refresh"
    held_detection.set()
    assert done.wait(30)
    _, now = mem._retrievers._fitted["default"]
    assert now > fitted
    mem.close()


def _answers_like_single_adds_in_place(mem, params, n, positions) -> None:
    """``mem`` (``n`` steps added one per add) answers, for the embeddings of the steps
    at ``positions`` as queries, what a retriever that took the same adds and refreshed
    in place answers."""
    from osumem.osu.construct import grown_prefix

    view = mem.view()
    inline = create("osumem", params, seed=0)
    inline.ann_min_steps = mem.config.ann_min_steps
    inline.fit(grown_prefix(view, 1))
    for t in range(2, n + 1):
        inline.update(grown_prefix(view, t))
    for p in positions:
        q = view.embeddings[p]
        for budget in (32, 256):
            got = [s.position for s in mem.retrieve(q, budget).steps]
            assert got == inline.retrieve(q, budget).positions.tolist()


def test_a_bounded_replay_stops_at_whole_batches():
    from osumem.memory.retrievers import _batch_end_within

    ends = (3, 10, 11, 700, 720)
    assert _batch_end_within(ends, 3, 8, 720) == 11  # the last end within 8 steps
    assert _batch_end_within(ends, 11, 512, 720) == 700  # one batch longer than the bound
    assert _batch_end_within(ends, 0, 2, 720) == 3
    assert _batch_end_within(ends, 700, 512, 720) == 720
    assert _batch_end_within(ends, 720, 512, 720) == 720  # nothing left


def test_a_bulk_add_builds_even_while_a_refresh_is_pending(data, held_detection):
    """An add of PREPARE_MIN_STEPS steps or more builds the structure before it returns,
    also when earlier small adds left a refresh being computed whose application point
    the bulk passes: it waits for that refresh, as a bulk ingest pays its build (only
    runs of small adds leave the rest to the next query)."""
    params = {"similarity_refresh": 12, "similarity_refresh_ratio": 0.1, "similarity_scope": "all"}
    mem = Memory.open(None, encoder="hashing", seed=0, params=params)
    n = 20  # a refresh falls due at 12 and is applied at 24 at the earliest
    for p in range(n):
        mem.add_steps([step_of(data, p)])
    _in_thread(lambda: mem.retrieve("a question", 64))  # built; the refresh due is held
    assert mem.retriever().fitted_pool.refresh_pending
    done = threading.Event()

    def bulk() -> None:
        mem.add_steps(_steps(data, n, n + PREPARE_MIN_STEPS))
        done.set()

    threading.Thread(target=bulk, daemon=True).start()
    assert not done.wait(0.5)  # it waits for the held refresh
    held_detection.set()
    assert done.wait(30)
    _, fitted = mem._retrievers._fitted["default"]
    assert fitted == n + PREPARE_MIN_STEPS
    mem.close()


def test_a_large_memory_never_waits_for_a_refresh(data, held_detection, monkeypatch):
    """From ``DEFER_MIN_STEPS`` steps on, neither an add nor a retrieve waits for a
    similarity refresh between its application point and the next refresh's due
    point: the memory answers from its structure without the refresh, and a later
    retrieve takes the refresh once it is built. After ``wait_ready`` the memory
    answers what a retriever that refreshed in place at the same adds answers."""
    from osumem.osu import construct

    monkeypatch.setattr(construct, "DEFER_MIN_STEPS", 16)
    monkeypatch.setattr(construct, "REFRESH_LAG_MIN", 4)
    params = {"similarity_refresh": 12, "similarity_refresh_ratio": 0.1, "similarity_scope": "all"}
    mem = Memory.open(None, encoder="hashing", seed=0, params=params)
    n = 23  # a refresh due at 12 is applied from 16; the next is due at 24

    def rounds() -> None:  # an agent's loop: add a step, ask
        for p in range(n):
            mem.add_steps([step_of(data, p)])
            mem.retrieve("a question", 64)

    _in_thread(rounds)
    retriever, fitted = mem._retrievers._fitted["default"]
    pool = retriever.fitted_pool
    job = pool.similarity.job
    assert fitted == n and job is not None and n >= job.apply_at  # went past it
    upto = pool.similarity.upto
    held_detection.set()
    # an owner whose retrieves run on several threads (the server) does not let them
    # take it: the structure changes only while the owner says so
    mem.take_background_work = False
    deadline = time.monotonic() + 30
    while not job.caught_up:
        assert time.monotonic() < deadline, "the refresh was not built"
        time.sleep(0.01)
    _in_thread(lambda: mem.retrieve("a question", 64))
    assert pool.similarity.upto == upto and pool.similarity.job is job
    mem.take_background_work = True
    while pool.similarity.upto == upto:  # a retrieve takes it once built
        assert time.monotonic() < deadline, "no retrieve took the built refresh"
        _in_thread(lambda: mem.retrieve("a question", 64))
        time.sleep(0.01)
    mem.wait_ready()
    _answers_like_single_adds_in_place(mem, params, n, (3, 12, n - 1))
    mem.close()


def test_a_filtered_query_s_retriever_waits_for_its_refreshes(data):
    """The retriever built for a filtered query is never synced again, so it does not
    defer its refreshes (its answers stay those of the fixed application points); the
    memory's own retriever does."""
    from dataclasses import replace

    mem = Memory.open(None, encoder="hashing", seed=0)
    for p in range(40):
        mem.add_steps([replace(step_of(data, p), role="user" if p % 5 == 0 else "assistant")])
    mem.retrieve("a question", 64, filter={"role": "assistant"})
    assert mem.retriever().fitted_pool.defer_refresh
    kept = [hit[1] for hit in mem._filtered._kept.values()]
    assert kept and not any(r.fitted_pool.defer_refresh for r in kept)
    mem.close()
