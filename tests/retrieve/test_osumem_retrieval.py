"""OSU-Mem retrieval (SPEC §5) on hand-checkable memories, its variants, and its
invariants (budget, causality) under hypothesis."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_view
from osumem.bench.synthetic import SyntheticConfig, generate_episode
from osumem.evaluate.reach import coarse_diagnostics
from osumem.retrieve import create
from osumem.retrieve.osumem import OSUMem, OSUMemConfig, OSUMemCoverage, OSUMemGF
from osumem.retrieve.registry import make_config, params_for, parse_overrides

E = np.eye(4)


def _routing_view():
    # step 0 = e0 (cos 1 to the query), step 1 = .3e0 + e1 (cos .29): both entity A.
    # steps 2..5 = .6e0 + e2 (cos .51): entities B (2, 3) and C (4, 5).
    emb = np.array([E[0], 0.3 * E[0] + E[1], *([0.6 * E[0] + E[2]] * 4)])
    ents = [{"A"}, {"A"}, {"B"}, {"B"}, {"C"}, {"C"}]
    return make_view(6, 4, embeddings=emb, entities=ents, costs=[10] * 6)


def test_coarse_routes_to_a_low_cosine_evidence_step():
    view = _routing_view()
    cfg = OSUMemConfig(views=("entity",), coarse_ratio=1.0, novelty=False)
    r = OSUMem(cfg).fit(view)
    # K = ceil(ρ·B / mean OSU cost) = ceil(1·20 / 20) = 1: only OSU A is kept
    d = coarse_diagnostics(r, E[0], 20, evidence=[0, 1])
    assert d.k == 1 and d.osus["key"].tolist() == ["A"]
    assert d.routing_recall == 1.0
    assert r.retrieve(E[0], 20).positions.tolist() == [0, 1]
    assert create("flat").fit(view).retrieve(E[0], 20).positions.tolist() == [0, 2]


def test_k_is_proportional_to_the_budget():
    r = OSUMem(OSUMemConfig(views=("entity",), coarse_ratio=2.0)).fit(_routing_view())
    assert [coarse_diagnostics(r, E[0], b, evidence=[0]).k for b in (10, 20, 30)] == [1, 2, 3]


def test_leftover_is_filled_from_the_flat_ranking():
    view = _routing_view()
    cfg = OSUMemConfig(views=("entity",), coarse_ratio=1.0, novelty=False)
    # B = 40: K = 2 (A, then B by canonical order) -> candidates 0, 2, 3, 1 by cosine
    assert OSUMem(cfg).fit(view).retrieve(E[0], 40).positions.tolist() == [0, 2, 3, 1]
    # B = 60, ρ = .5: K = ceil(30 / 20) = 2, the same 4 candidates (40 tokens); the
    # 20 tokens left go to the best flat steps not yet taken (4, 5)
    no_fill = OSUMem(cfg.replace(fill_from_flat=False, coarse_ratio=0.5)).fit(view)
    assert no_fill.retrieve(E[0], 60).positions.tolist() == [0, 2, 3, 1]
    filled = OSUMem(cfg.replace(coarse_ratio=0.5)).fit(view)
    assert filled.retrieve(E[0], 60).positions.tolist() == [0, 2, 3, 1, 4, 5]


def _novelty_view():
    emb = np.array([0.8 * E[0] + 0.6 * E[1], 0.8 * E[0] + 0.6 * E[1], E[1], E[3]])
    return make_view(4, 4, embeddings=emb, entities=[{"A"}, {"A"}, {"A"}, set()], costs=[100] * 4)


def test_novelty_penalty_is_budget_gated():
    q = (E[0] + E[1]) / np.sqrt(2)  # cos: .99, .99, .71
    view = _novelty_view()
    base = OSUMemConfig(views=("entity",), novelty_weight=1.0, coarse_ratio=4.0)
    # B = 200 >= 192: after step 0, step 1 scores .99 - 1·1 < step 2's .71 - 1·.6
    assert OSUMem(base).fit(view).retrieve(q, 200).positions.tolist() == [0, 2]
    assert OSUMem(base.replace(novelty=False)).fit(view).retrieve(q, 200).positions.tolist() == [
        0,
        1,
    ]
    gated = OSUMem(base.replace(novelty_min_budget=201)).fit(view)
    assert gated.retrieve(q, 200).positions.tolist() == [0, 1]


def test_gf_oracle_keeps_only_osus_with_evidence():
    assert OSUMemGF.is_oracle and not OSUMem.is_oracle
    view = _routing_view()
    cfg = OSUMemConfig(views=("entity",), coarse_ratio=1.0)
    r = OSUMemGF(cfg).fit(view)
    d = coarse_diagnostics(r, E[0], 40, evidence=[4])
    assert d.osus["key"].tolist() == ["C"]
    sel = r.retrieve(E[0], 20, evidence=np.array([4]))
    assert sel.positions.tolist() == [4, 5]


def test_coverage_beta_prefers_new_osus():
    view = _routing_view()
    flat = create("flat").fit(view).retrieve(E[0], 30).positions.tolist()
    zero = OSUMemCoverage(create("osumem_coverage").config.replace(beta=0.0))
    assert zero.fit(view).retrieve(E[0], 30).positions.tolist() == flat == [0, 2, 3]
    # β = .3: after 0 (A) and 2 (B), step 3 lost its bonus (B covered) while step 4
    # still has C's: .51 + .3 > .51
    beta = OSUMemCoverage(create("osumem_coverage").config.replace(beta=0.3))
    assert beta.fit(view).retrieve(E[0], 30).positions.tolist() == [0, 2, 4]


def test_registry_variants_and_sweep():
    assert make_config("osumem").max_memberships == 5
    assert make_config("osumem_disjoint").max_memberships == 1
    assert make_config("osumem_sim_only").views == ("similarity",)
    assert make_config("osumem_no_novelty").novelty is False
    assert make_config("osumem_coverage_disjoint").max_memberships == 1
    assert make_config("osumem_coverage").beta == pytest.approx(0.12)
    over = parse_overrides(["osumem.max_memberships=3"])
    assert make_config("osumem", params_for("osumem", over)).max_memberships == 3
    assert make_config("osumem_disjoint", params_for("osumem_disjoint", over)).max_memberships == 1
    cfg = make_config("osumem", {"views": "entity+tool", "novelty": "false", "gap": "5"})
    assert (cfg.views, cfg.novelty, cfg.gap) == (("entity", "tool"), False, 5)


def test_update_matches_fit():
    ep = generate_episode(SyntheticConfig(n_episodes=1), 1002, 0)
    q = ep.queries[0].vector
    for name in ("osumem", "osumem_disjoint", "osumem_coverage"):
        inc = create(name, seed=1).fit(ep.view.prefix(50))
        for t in range(60, ep.view.n + 1, 10):
            inc.update(ep.view.prefix(t))
        inc.update(ep.view)
        full = create(name, seed=1).fit(ep.view)
        for b in (64, 256):
            assert inc.retrieve(q, b).positions.tolist() == full.retrieve(q, b).positions.tolist()


EPISODE = generate_episode(SyntheticConfig(n_episodes=1), 1001, 1)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(
        ["osumem", "osumem_disjoint", "osumem_sim_only", "osumem_gf", "osumem_coverage"]
    ),
    st.integers(1, 700),
    st.integers(0, 400),
    st.integers(0, 10_000),
)
def test_budget_and_causality(name, budget, before, qseed):
    r = create(name, seed=0).fit(EPISODE.view)
    q = np.random.default_rng(qseed).standard_normal(EPISODE.view.dim)
    ev = np.array([3, 40, 100])
    sel = r.retrieve(q, budget, before=before, evidence=ev)
    assert sel.cost <= budget
    assert (sel.positions < min(before, EPISODE.view.n)).all()
    assert np.unique(sel.positions).size == sel.positions.size


def test_coverage_flat_top_with_beta_zero_is_flat_and_stays_in_the_head():
    """candidates="flat_top": with β = 0 and an unbounded head it selects what Flat
    selects; with a bounded head it never leaves the head of the flat ranking."""
    ep = generate_episode(SyntheticConfig(n_episodes=1), 4, 0)
    q = ep.queries[0].vector
    flat = create("flat").fit(ep.view).retrieve(q, 256)
    wide = create(
        "osumem_coverage", {"candidates": "flat_top", "beta": "0", "candidate_ratio": "1e9"}
    ).fit(ep.view)
    assert sorted(wide.retrieve(q, 256).positions.tolist()) == sorted(flat.positions.tolist())
    narrow = create("osumem_coverage", {"candidates": "flat_top", "candidate_ratio": "1"})
    sel = narrow.fit(ep.view).retrieve(q, 256)
    order = np.argsort(-(ep.view.embeddings @ (q / np.linalg.norm(q))), kind="stable")
    head = order[: int(np.searchsorted(np.cumsum(ep.view.costs[order]), 256, side="right"))]
    assert set(sel.positions.tolist()) <= set(head.tolist())
    assert sel.cost <= 256
