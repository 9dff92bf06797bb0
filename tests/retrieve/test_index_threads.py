"""The step index and the centroid index queried on several threads at once (a
server's readers share one retriever): the work a query does before it searches
(taking a finished background build, inserting the steps added since, applying the
pool's changes) is done by one query; the others wait for it and then find the index
current. Each test holds the first query inside that work and lets a second one in:
without the locks the second does the same work again (the steps inserted twice, the
pool's changes applied twice)."""

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
        errors: list[BaseException] = []

        def run(call: Any) -> None:
            try:
                call()
            except BaseException as exc:  # reported below
                errors.append(exc)

        a = threading.Thread(target=run, args=(first,))
        a.start()
        assert self.entered.wait(10)
        b = threading.Thread(target=run, args=(second,))
        b.start()
        time.sleep(0.2)  # the second gets as far as it can
        self.release.set()
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
    assert index.hnsw._index.get_current_count() == 540


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
