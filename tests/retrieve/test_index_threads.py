"""The step index and the centroid index queried on several threads at once (a
server's readers share one retriever): the work a query does before it searches
(taking a finished background build, inserting the steps added since, applying the
pool's changes) is done by one query; the others wait for it and then find the index
current. Each test holds the first query inside that work and lets a second one in:
without the locks the second does the same work again (the steps inserted twice, the
pool's changes applied twice). hnswlib's search beam belongs to the index: each
search must run with the beam it set, and no resize may move the index under it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

pytest.importorskip("hnswlib")

from osumem.bench.scale import generate
from osumem.osu.views import KnnIndex
from osumem.retrieve.centroids import CentroidIndex
from osumem.retrieve.registry import create
from osumem.retrieve.step_index import StepIndex


class Held:
    """Patch ``owner.name`` so that its first call waits until released (the calls are
    counted)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
        real = getattr(owner, name)
        self.calls = 0
        self.entered, self.release = threading.Event(), threading.Event()

        def held(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls == 1:
                self.entered.set()
                self.release.wait(10)
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, held)

    def race(self, first: Any, second: Any) -> None:
        """Run ``first`` until it is held, then ``second`` beside it; release both."""
        beside(self.entered, first, second, then=self._release_soon)

    def _release_soon(self) -> None:
        time.sleep(0.2)  # the second gets as far as it can
        self.release.set()


def beside(entered: threading.Event, first: Any, second: Any, then: Any = None) -> None:
    """Run ``first`` on a thread until ``entered`` is set, then ``second`` on another
    (and ``then()`` here); both must end without an error."""
    errors: list[BaseException] = []

    def run(call: Any) -> None:
        try:
            call()
        except BaseException as exc:  # reported below
            errors.append(exc)

    a = threading.Thread(target=run, args=(first,))
    a.start()
    assert entered.wait(10)
    b = threading.Thread(target=run, args=(second,))
    b.start()
    if then is not None:
        then()
    a.join(10)
    b.join(10)
    assert errors == []


def test_two_queries_insert_the_new_steps_once(monkeypatch):
    data = generate(540, 32, 0, 4)
    view, q = data.view, data.queries
    index = StepIndex(seed=0, ann_min_steps=100)
    index.background = True
    index.wait(view.prefix(500))  # built over 500 steps; 40 more to insert at a query
    held = Held(monkeypatch, KnnIndex, "add")
    held.race(lambda: index.top(view, q[0], 10), lambda: index.top(view, q[1], 10))
    assert held.calls == 1
    assert index.hnsw is not None and index.hnsw.size == 540
    assert index.hnsw.knn._index.get_current_count() == 540


def test_two_queries_apply_the_pools_changes_once(monkeypatch):
    data = generate(400, 32, 0, 4)
    retriever = create("osumem", seed=0).fit(data.view.prefix(360))
    pool = retriever.fitted_pool
    index = CentroidIndex(pool, 0)
    index.sync()  # built over the pool as it is
    retriever.update(data.view)  # 40 more steps: units made and changed
    assert (pool.epoch, pool.change_log_position) != (index.epoch, index.position)
    held = Held(monkeypatch, pool, "changes_since")
    held.race(lambda: index.query(data.queries[0], 5), lambda: index.query(data.queries[1], 5))
    assert held.calls == 1
    assert (index.epoch, index.position) == (pool.epoch, pool.change_log_position)


class BeamWatch:
    """Wraps an hnswlib index: records, for each search, the beam in force when it
    began and when it ended, and whether the index was resized during a search. The
    first search waits (at most half a second) for another thread to set a beam or
    resize the index while it runs."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.ef: int | None = None
        self.searches: list[tuple[int | None, int | None]] = []
        self.resized_during_search = False
        self.entered, self.changed = threading.Event(), threading.Event()
        self._searching = 0

    def set_ef(self, ef: int) -> None:
        self.ef = ef
        self.real.set_ef(ef)
        self.changed.set()

    def resize_index(self, size: int) -> None:
        self.resized_during_search |= self._searching > 0
        self.real.resize_index(size)
        self.changed.set()

    def knn_query(self, data: Any, k: int = 1, num_threads: int = -1) -> Any:
        began = self.ef
        self._searching += 1
        try:
            if not self.entered.is_set():
                self.changed.clear()
                self.entered.set()
                self.changed.wait(0.5)  # another thread's beam or resize, meanwhile?
            self.searches.append((began, self.ef))
            return self.real.knn_query(data, k=k, num_threads=num_threads)
        finally:
            self._searching -= 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_a_query_searches_with_its_own_beam_while_another_sets_one():
    data = generate(600, 32, 0, 4)
    knn = KnnIndex(32, capacity=600)
    knn.add(data.view.embeddings)
    watch = BeamWatch(knn._index)
    knn._index = watch
    q = data.queries
    alone = [knn.query(q[i], 10, ef=ef).tolist() for i, ef in ((0, 200), (1, 40))]
    watch.searches.clear()
    watch.entered.clear()
    found: dict[int, list[int]] = {}
    beside(
        watch.entered,
        lambda: found.__setitem__(0, knn.query(q[0], 10, ef=200).tolist()),
        lambda: found.__setitem__(1, knn.query(q[1], 10, ef=40).tolist()),
    )
    assert sorted(watch.searches) == [(40, 40), (200, 200)]
    assert [found[0], found[1]] == alone


def test_the_index_is_not_resized_under_a_search():
    data = generate(1100, 32, 0, 4)
    knn = KnnIndex(32, capacity=1024)
    knn.add(data.view.embeddings[:1000])
    watch = BeamWatch(knn._index)
    knn._index = watch
    beside(
        watch.entered,
        lambda: knn.query(data.queries[0], 10),
        lambda: knn.add(data.view.embeddings[1000:]),  # past the capacity: a resize
    )
    assert knn.capacity >= 1100 and knn.size == 1100
    assert not watch.resized_during_search


def test_a_centroid_query_searches_with_its_own_beam_while_another_sets_one():
    data = generate(400, 32, 0, 4)
    retriever = create("osumem", seed=0).fit(data.view)
    index = CentroidIndex(retriever.fitted_pool, 0)
    index.sync()
    watch = BeamWatch(index._index)
    index._index = watch
    q = data.queries
    beside(watch.entered, lambda: index.query(q[0], 5, ef=300), lambda: index.query(q[1], 5, ef=40))
    assert sorted(watch.searches) == [(40, 40), (300, 300)]


def test_a_centroid_query_of_an_index_rebuilt_meanwhile_answers_none():
    """The labels of one build mean nothing in another: a query that searched the
    index it read before another thread installed a rebuild answers ``None`` (its
    caller scores every centroid) instead of the slots those labels name now."""
    data = generate(400, 32, 0, 4)
    retriever = create("osumem", seed=0).fit(data.view)
    index = CentroidIndex(retriever.fitted_pool, 0)
    index.sync()
    assert index.query(data.queries[0], 5) is not None
    searched = index._index
    index._rebuild()  # another thread's rebuild, installed after the search began
    assert index._index is not searched
    index._index = searched
    assert index.query(data.queries[0], 5) is None
