"""Adaptive OSU-Mem: the binding test chooses expansion or plain Flat.

The registry-wide contract (budget, causality, ``before``, determinism, empty memory,
bad input) runs over ``osumem_adaptive`` in test_retriever_contract.py.
"""

import numpy as np
import pytest

from conftest import make_view
from osumem.errors import ConfigError
from osumem.retrieve import create
from osumem.retrieve.adaptive import AdaptiveConfig

DIM = 16


def _unit(i: int) -> np.ndarray:
    v = np.zeros(DIM)
    v[i] = 1.0
    return v


def _layout(orphan_top: bool):
    """40 steps of cost 10; the query is e0.

    Entity "acct" (5 steps at 2, 9, 15, 22, 30) is the query's topic: step 2 has cosine
    .95, step 22 (the sibling) .55. Step 5, the *decoy*, has cosine .8 but belongs to
    entity "d" whose three other members point along e5, so its OSU centroid is far
    from the query. Every other step has a weak e0 component (cosine <= .3) and sits in
    one of several 4-step entity groups. Flat at B = 20 takes {2, decoy}; expansion
    takes {2, 22}. With ``orphan_top`` the three best steps carry no annotation.
    """
    rng = np.random.default_rng(7)
    n = 40
    emb = np.zeros((n, DIM))
    ents: list[set[str]] = [set() for _ in range(n)]
    acct = {2: 0.95, 9: 0.5, 15: 0.45, 22: 0.55, 30: 0.4}
    for pos, c in acct.items():
        emb[pos] = c * _unit(0) + np.sqrt(1 - c**2) * _unit(1 + pos % 3)
        ents[pos] = {"acct"}
    emb[5] = 0.8 * _unit(0) + 0.6 * _unit(5)
    for pos in (5, 11, 18, 26):
        ents[pos] = {"d"}
    for pos in (11, 18, 26):
        emb[pos] = _unit(5)
    others = [p for p in range(n) if not ents[p]]
    for k, pos in enumerate(others):
        direction = rng.standard_normal(DIM)
        direction[0] = 0.0
        direction /= np.linalg.norm(direction)
        c = 0.1 + 0.2 * rng.random()
        emb[pos] = c * _unit(0) + np.sqrt(1 - c**2) * direction
        ents[pos] = {f"g{k // 4}"}
    if orphan_top:
        for pos in (2, 5, 22):
            ents[pos] = set()
    view = make_view(n, DIM, embeddings=emb, entities=[frozenset(e) for e in ents])
    return view, _unit(0).astype(np.float32)


def _flat(view, q, budget):
    return create("flat").fit(view).retrieve(q, budget).positions


def test_binding_test_chooses_expansion_when_the_head_shares_osus():
    view, q = _layout(orphan_top=False)
    r = create("osumem_adaptive").fit(view)
    decision = r.binding(q, view.n)
    assert decision.binds
    assert decision.covered.all()  # every head step sits in a binding OSU
    flat = _flat(view, q, 20)
    assert sorted(flat.tolist()) == [2, 5]  # the decoy displaces the sibling
    # keep only the single best flat step, so expansion decides the second
    r = create("osumem_adaptive", {"keep_head": "1"}).fit(view)
    sel = r.retrieve(q, 20).positions
    assert sorted(sel.tolist()) == [2, 22]  # the query's OSU sibling instead
    # a larger budget still holds the whole acct OSU first, then Flat's order
    big = r.retrieve(q, 60).positions.tolist()
    assert {2, 9, 15, 22, 30} <= set(big)


def test_binding_test_chooses_flat_when_the_head_is_unbound():
    view, q = _layout(orphan_top=True)
    r = create("osumem_adaptive").fit(view)
    decision = r.binding(q, view.n)
    assert not decision.binds
    assert not decision.covered[:3].any()
    for budget in (10, 20, 60, 200, 1000):
        np.testing.assert_array_equal(r.retrieve(q, budget).positions, _flat(view, q, budget))


def test_gate_none_always_expands_and_shared_gate_needs_two_head_steps_in_one_osu():
    view, q = _layout(orphan_top=True)
    always = create("osumem_adaptive", {"gate": "none"}).fit(view)
    assert always.binding(q, view.n).binds
    shared = create("osumem_adaptive", {"gate": "shared", "seed_steps": "2"}).fit(view)
    assert not shared.binding(q, view.n).binds  # steps 2 and 5 share no OSU


def test_orphans_flat_would_take_are_protected():
    view, q = _layout(orphan_top=False)
    ents = list(view.entities)
    ents[5] = frozenset()  # the decoy is now in no OSU
    view2 = make_view(view.n, DIM, embeddings=view.embeddings, entities=ents)
    params = {"gate": "none", "keep_head": "1"}
    on = create("osumem_adaptive", {**params, "protect_orphans": "true"}).fit(view2)
    off = create("osumem_adaptive", {**params, "protect_orphans": "false"}).fit(view2)
    assert 5 in on.retrieve(q, 20).positions.tolist()
    assert 5 not in off.retrieve(q, 20).positions.tolist()
    # Flat at B = 20 takes {2, decoy}: half of its selection is orphans. The protection
    # needs orphan_share of it (default .25); at .75 the decoy competes and loses.
    few = create("osumem_adaptive", {**params, "orphan_share": "0.75"}).fit(view2)
    assert 5 not in few.retrieve(q, 20).positions.tolist()
    v1 = create("osumem_adaptive_v1", params).fit(view2)
    assert 5 in v1.retrieve(q, 20).positions.tolist()


@pytest.mark.parametrize(
    "bad",
    [
        {"seed_steps": 1},
        {"min_shared": 1},
        {"binding_views": ("colour",)},
        {"expand_share": 1.5},
        {"gate": "sometimes"},
        {"min_head_coverage": -0.1},
        {"expand_from": "nowhere"},
        {"head_ratio": -1.0},
        {"orphan_share": 1.5},
    ],
)
def test_bad_config_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="osumem_adaptive"):
        AdaptiveConfig(**bad)
