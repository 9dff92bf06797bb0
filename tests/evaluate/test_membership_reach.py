"""Evidence-OSU membership and reachability statistics on a hand-checkable episode."""

import numpy as np
import pytest

from conftest import make_view
from osumem.bench.synthetic import SyntheticConfig, generate_episode
from osumem.evaluate.membership import evidence_membership
from osumem.evaluate.reach import reachability
from osumem.types import Episode, Query


def _episode():
    # evidence steps 1 and 2: step 1 in entity A (with 0) and tool T (with 2); step 2
    # only in tool T. Disjoint keeps A for step 1, T drops to 1 member: step 2 evicted.
    view = make_view(
        4, 4, entities=[{"A"}, {"A"}, set(), set()], tool_signatures=["", "T", "T", ""]
    )
    q = Query(qid="q", vector=np.ones(4, dtype=np.float32), t=4, evidence=(1, 2))
    return Episode(episode_id="e", view=view, queries=(q,))


def test_evidence_membership_overlap_vs_disjoint():
    df = evidence_membership([_episode()]).set_index("mode")
    # overlap: step 1 in A and T (2), step 2 in T (1) -> mean 1.5, none evicted
    assert df.loc["overlap", "mean_osus"] == pytest.approx(1.5)
    assert df.loc["overlap", "share_no_osu"] == 0.0
    # disjoint: step 1 in A (1), step 2 in nothing (0) -> mean .5, half evicted
    assert df.loc["disjoint", "mean_osus"] == pytest.approx(0.5)
    assert df.loc["disjoint", "median_osus"] == pytest.approx(0.5)
    assert df.loc["disjoint", "share_no_osu"] == pytest.approx(0.5)
    assert df.loc["overlap", "mean_tool"] == pytest.approx(1.0)


def test_reachability_on_a_hand_episode():
    # K = ceil(2·B / mean OSU cost): with B large every OSU is kept, so overlap reaches
    # both evidence steps (p_entity = .5, p_tool = 1) and disjoint only step 1.
    df = reachability([_episode()], [1000]).set_index("mode")
    assert df.loc["overlap", "p_entity"] == 0.5 and df.loc["overlap", "p_tool"] == 1.0
    assert df.loc["overlap", "p_reach_independence"] == 1.0
    assert df.loc["overlap", "p_reach_empirical"] == 1.0
    assert df.loc["disjoint", "p_reach_empirical"] == 0.5
    assert df.loc["disjoint", "p_tool"] == 0.0


def test_reachability_bounds_on_synthetic():
    eps = [generate_episode(SyntheticConfig(n_episodes=2), 1000, i) for i in range(2)]
    df = reachability(eps, [64, 256])
    assert set(df["mode"]) == {"overlap", "disjoint"}
    assert (df["p_reach_independence"] >= df["p_reach_union_bound"] - 1e-12).all()
    # the empirical reach is at least the best single view (a union of events)
    assert (df["p_reach_empirical"] >= df["p_reach_union_bound"] - 1e-12).all()
    assert (df.groupby("mode")["mean_k"].apply(lambda k: k.is_monotonic_increasing)).all()
