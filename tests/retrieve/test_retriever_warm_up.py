"""``Retriever.warm_up``: what a server runs after every write so that its reader
threads' queries find nothing left to build."""

import numpy as np
import pytest

from osumem.bench.scale import generate
from osumem.retrieve import create
from osumem.retrieve.base import Retriever


def _lazy_state(r):
    """What an OSU-Mem query builds lazily, as whether each piece is up to date with the
    pool and view: the live units' total cost, the step cost statistics, and the
    centroid index (``None`` while the exact coarse scan answers)."""
    pool = r.fitted_pool
    now = (pool.epoch, pool.change_log_position)
    ci = r._centroid_index
    return (
        pool.slots._live_cost is not None,
        r.step_index._cost_view is r.fitted_view,
        None if ci is None else (ci._index is not None and (ci.epoch, ci.position) == now),
    )


def _cached(r):
    """The lazily built objects themselves (a query that rebuilt one rebinds it)."""
    ci = r._centroid_index
    return [r.step_index._cost_cache, ci, None if ci is None else ci._index]


def _grown(ann: bool):
    view = generate(700, 32, 0).view
    r = create("osumem", seed=0)
    if ann:
        r.ann_min_steps = 200
    r.fit(view.prefix(500))
    q = view.embeddings[3]
    r.retrieve(q, 256)  # the structures a query builds, then steps added after them
    r.update(view.prefix(530))
    return r, view


@pytest.mark.parametrize("ann", [False, True])
def test_osumem_warm_up_builds_what_a_probe_query_builds(ann):
    warmed, view = _grown(ann)
    probed, _ = _grown(ann)
    warmed.warm_up()
    probe = np.zeros(view.dim, dtype=np.float32)
    probe[0] = 1.0
    probed.retrieve(probe, 1)  # what the server did before warm_up existed
    assert _lazy_state(warmed) == _lazy_state(probed)
    assert _lazy_state(warmed) == (True, True, True if ann else None)
    before = _cached(warmed)
    for p in range(0, 530, 53):
        warmed.retrieve(view.embeddings[p], 256)
    after = _cached(warmed)
    assert all(a is b for a, b in zip(after, before, strict=True))  # they built nothing


def test_warm_up_of_other_methods_asks_a_query(monkeypatch):
    view = generate(200, 32, 0).view
    asked = []
    real = Retriever.retrieve

    def spy(self, query, budget, **kw):
        asked.append(budget)
        return real(self, query, budget, **kw)

    monkeypatch.setattr(Retriever, "retrieve", spy)
    for method in ("osumem_adaptive", "flat"):
        asked.clear()
        create(method, seed=0).fit(view).warm_up()
        assert asked == [1]
    asked.clear()
    fresh = create("osumem", seed=0).fit(view)
    fresh.warm_up()
    assert asked == []  # OSU-Mem builds its lazy state without a query
    assert _lazy_state(fresh) == (True, True, None)


@pytest.mark.parametrize("ann", [False, True])
def test_osumem_warm_up_runs_no_coarse_query(ann, monkeypatch):
    """The exact coarse scan builds nothing a later query reuses, and the centroid
    index is caught up without a query (a probe's outcome would count in its unsure
    memo): the state above comes without either."""
    r, _ = _grown(ann)
    scans = []
    real = type(r)._coarse_positions
    monkeypatch.setattr(
        type(r), "_coarse_positions", lambda self, q, b: scans.append(b) or real(self, q, b)
    )
    r.warm_up()
    assert scans == []
    assert _lazy_state(r) == (True, True, True if ann else None)
