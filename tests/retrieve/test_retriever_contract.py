"""One contract every registered retriever must pass (budget, causality, determinism,
empty memory, bad input), run over the whole registry."""

import importlib

import numpy as np
import pytest

from conftest import make_view
from osumem.bench.synthetic import SyntheticConfig, generate_episode
from osumem.errors import BudgetError, DimensionError, NonFiniteError, UnknownMethodError
from osumem.retrieve import available, create
from osumem.retrieve.registry import get_spec


def _missing_dependency(name: str) -> str | None:
    """Why method ``name`` cannot be imported here: the optional package it needs
    (the test is then skipped, with that reason in the report); a failure of the
    method's own module is an error, never a silent drop."""
    module = get_spec(name).target.split(":")[0]
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and not exc.name.startswith("osumem"):
            return f"method {name!r} needs {exc.name!r}, which is not installed"
        raise
    return None


METHODS = available()


@pytest.fixture(autouse=True)
def _method_importable(request):
    """A test of one method is skipped, saying why, when the method's optional
    dependency is not installed; it errors when the method's module is broken."""
    callspec = getattr(request.node, "callspec", None)
    name = callspec.params.get("name") if callspec is not None else None
    if name is not None and (reason := _missing_dependency(name)) is not None:
        pytest.skip(reason)


def test_every_registered_method_is_contract_tested():
    assert set(METHODS) == set(available()) and len(METHODS) >= 19
    for name in METHODS:
        _missing_dependency(name)  # raises when the method's own module is broken


EPISODE = generate_episode(SyntheticConfig(n_episodes=1), 5, 0)


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("budget", [1, 16, 64, 256, 10_000])
def test_budget_and_causality(name, budget):
    r = create(name, seed=1)
    view = EPISODE.view
    t = view.n - 40
    r.fit(view.prefix(t))
    q = EPISODE.queries[0]
    ev = np.asarray([e for e in q.evidence if e < t] or [0])
    sel = r.retrieve(q.vector, budget, evidence=ev)
    assert sel.cost <= budget
    assert sel.positions.size == np.unique(sel.positions).size
    assert (sel.positions < t).all()
    assert int(view.costs[sel.positions].sum()) == sel.cost
    # `before` restricts further
    sel2 = r.retrieve(q.vector, budget, before=t // 2, evidence=ev)
    assert (sel2.positions < t // 2).all() and sel2.cost <= budget


@pytest.mark.parametrize("name", METHODS)
def test_deterministic(name):
    q = EPISODE.queries[0]
    a = (
        create(name, seed=3)
        .fit(EPISODE.view)
        .retrieve(q.vector, 256, evidence=np.asarray(q.evidence))
    )
    b = (
        create(name, seed=3)
        .fit(EPISODE.view)
        .retrieve(q.vector, 256, evidence=np.asarray(q.evidence))
    )
    assert a.positions.tolist() == b.positions.tolist()


@pytest.mark.parametrize("name", METHODS)
def test_empty_and_tiny_memory(name):
    empty = make_view(0, 8)
    r = create(name).fit(empty)
    assert len(r.retrieve(np.ones(8), 100)) == 0
    one = make_view(1, 8)
    sel = create(name).fit(one).retrieve(np.ones(8), 100, evidence=np.array([0]))
    assert sel.cost <= 100


@pytest.mark.parametrize("name", METHODS)
def test_bad_inputs(name):
    r = create(name).fit(make_view(12, 8))
    with pytest.raises(BudgetError):
        r.retrieve(np.ones(8), 0)
    with pytest.raises(DimensionError):
        r.retrieve(np.ones(5), 64)
    with pytest.raises(NonFiniteError):
        r.retrieve(np.full(8, np.nan), 64)
    with pytest.raises(NonFiniteError):  # checked even when nothing is visible
        r.retrieve(np.full(8, np.nan), 64, before=0)


def test_unknown_method():
    with pytest.raises(UnknownMethodError, match="unknown method 'nope'"):
        create("nope")
