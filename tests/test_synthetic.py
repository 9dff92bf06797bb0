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


def test_event_weights_recovered_by_regression():
    """Project evidence embeddings (before normalisation the signal is linear): the
    query-to-evidence cosine must exceed query-to-background on average."""
    cfg = SMALL.replace(noise_scale=0.0)  # no noise: factors exactly recoverable
    ep = generate_episode(cfg, 3, 0)
    q = ep.queries[0]
    v = ep.view
    ev = np.asarray(q.evidence)
    # noiseless event step: .55 e_event + .20 e_ent + .15 e_tool + .10 e_sg, normalised;
    # the largest coordinate is the event's (unless bases collide)
    h = v.embeddings[ev[0]]
    top = np.sort(h)[::-1]
    norm = np.sqrt(0.55**2 + 0.20**2 + 0.15**2 + 0.10**2)
    assert top[0] == pytest.approx(0.55 / norm, abs=0.2)
    qn = q.vector / np.linalg.norm(q.vector)
    assert float(h @ qn) > 0.7


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
