"""The synthetic generator: deterministic, and it matches its parameters."""

import numpy as np
import pytest

from osumem.bench.synthetic import SyntheticConfig, construction_stats, generate, generate_episode
from osumem.errors import ConfigError

SMALL = SyntheticConfig(n_episodes=20)


def test_same_seed_same_episodes_bit_for_bit():
    a = generate_episode(SMALL, 7, 3)
    b = generate_episode(SMALL, 7, 3)
    assert np.array_equal(a.view.embeddings, b.view.embeddings)
    assert np.array_equal(a.view.costs, b.view.costs)
    assert [q.evidence for q in a.queries] == [q.evidence for q in b.queries]
    c = generate_episode(SMALL, 8, 3)
    assert not np.array_equal(a.view.costs, c.view.costs)


def test_cost_distribution_matches_parameters():
    costs = np.concatenate([ep.view.costs for ep in generate(SMALL, 1)])
    assert costs.min() >= 5
    # N(15, 3^2): sample of ~4,500 steps; standard error of the mean ~0.05
    assert abs(costs.mean() - 15) < 0.3
    assert abs(costs.std() - 3) < 0.3


def test_episode_lengths_and_causal_evidence():
    for ep in generate(SMALL, 2):
        assert 150 <= ep.view.n <= 296
        for q in ep.queries:
            assert len(q.evidence) >= 2
            assert max(q.evidence) < q.t
            # all evidence of a query shares its entity and subgoal (by construction)
            assert len({ep.view.subgoals[i] for i in q.evidence}) == 1
            ents = [ep.view.entities[i] for i in q.evidence]
            assert frozenset.intersection(*ents)


def test_noiseless_embeddings_are_exactly_the_weighted_factors():
    """Without noise each step embedding is exactly (up to normalisation) the weighted
    sum of its factors' basis vectors: event .55 / entity .20 / tool .15 / subgoal .10
    for event steps, entity .35 / tool .35 / subgoal .30 for background steps, and
    event .70 / entity .15 / tool .10 / subgoal .05 for queries."""
    cfg = SMALL.replace(noise_scale=0.0)
    for i in range(3):
        ep = generate_episode(cfg, 3, i)
        basis, event = ep.meta["basis"], np.asarray(ep.meta["event_of_step"])
        v = ep.view

        def idx(kind: str, label: str, basis: dict = basis) -> int:
            return basis[kind][int(label[-2:])]  # labels end in the pool index

        for p in range(v.n):
            want = np.zeros(cfg.dim)
            ent = idx("entity", next(iter(v.entities[p])))
            tool = idx("tool", v.tool_actions[p])
            sg = idx("subgoal", v.subgoals[p])
            if event[p] >= 0:
                for w, b in zip(
                    cfg.event_weights, (basis["event"][event[p]], ent, tool, sg), strict=True
                ):
                    want[b] += w
            else:
                for w, b in zip(cfg.background_weights, (ent, tool, sg), strict=True):
                    want[b] += w
            assert np.allclose(v.embeddings[p], want / np.linalg.norm(want), atol=1e-6)
        for q in ep.queries:
            e = event[q.evidence[0]]
            anchor = q.evidence[0]
            tools = [v.tool_actions[p] for p in q.evidence]
            main_tool = min(set(tools), key=lambda t: (-tools.count(t), t))
            want = np.zeros(cfg.dim)
            parts = (
                basis["event"][e],
                idx("entity", next(iter(v.entities[anchor]))),
                idx("tool", main_tool),
                idx("subgoal", v.subgoals[anchor]),
            )
            for w, b in zip(cfg.query_weights, parts, strict=True):
                want[b] += w
            got = q.vector / np.linalg.norm(q.vector)
            assert np.allclose(got, want / np.linalg.norm(want), atol=1e-6)


def test_construction_stats_are_counted():
    eps = list(generate(SMALL, 0))
    st = construction_stats(eps)
    assert st["episodes"] == 20
    assert st["queries"] == sum(len(e.queries) for e in eps)
    assert 2.0 <= st["mean_evidence"] <= 3.0
    assert 0.0 <= st["share_identical_signature"] <= st["share_same_action"] <= 1.0


def test_bad_config_is_reported_at_once():
    with pytest.raises(ConfigError, match=r"n_episodes.*random_tool_rate"):
        SyntheticConfig(n_episodes=0, random_tool_rate=2.0)
    with pytest.raises(ConfigError, match="unknown"):
        SMALL.replace(bogus=1)
