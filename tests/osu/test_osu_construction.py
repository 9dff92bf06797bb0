"""One test per construction rule of SPEC §4, on small hand-checkable trajectories."""

import numpy as np
import pytest

from conftest import make_view
from osumem.errors import ConfigError
from osumem.osu import OSUConfig, OSUPool
from osumem.osu.views import split_segments

ONLY_ENTITY = OSUConfig(views=("entity",))


def _entity_view(positions: dict[str, list[int]], n: int, **kw):
    ents = [set() for _ in range(n)]
    for key, pos in positions.items():
        for p in pos:
            ents[p].add(key)
    return make_view(n, 8, entities=ents, **kw)


def _groups(pool: OSUPool, view: str = "entity") -> dict[str, list[tuple[int, ...]]]:
    out: dict[str, list[tuple[int, ...]]] = {}
    for v, key, members in sorted(pool.signature()):
        if v == view:
            out.setdefault(key, []).append(members)
    return out


def test_thresholds_follow_gap():
    cfg = OSUConfig(gap=4)
    assert (cfg.split_threshold("entity"), cfg.split_threshold("tool")) == (60, 12)
    assert cfg.split_threshold("subgoal") == 8
    big = OSUConfig(gap=10)  # 8·10 = 80 > 60, 2·10 = 20 > 12, 10 > 8
    assert (big.split_threshold("entity"), big.split_threshold("tool")) == (80, 20)
    assert big.split_threshold("subgoal") == 10


@pytest.mark.parametrize(("view", "delta"), [("entity", 60), ("tool", 12), ("subgoal", 8)])
def test_gap_just_under_and_just_over_each_delta(view, delta):
    n = 2 * delta + 10
    # steps 0 and delta are exactly delta apart (kept together); the pair at
    # delta+5 .. 2*delta+6 is delta+1 apart (split into two singletons -> pruned).
    together, apart = [0, delta], [delta + 5, 2 * delta + 6]
    cols = {"entity": [set() for _ in range(n)], "tool": [""] * n, "subgoal": [""] * n}
    for p in together:
        cols[view][p] = {"A"} if view == "entity" else "A"
    for p in apart:
        cols[view][p] = {"B"} if view == "entity" else "B"
    kw = {"entities": cols["entity"], "tool_signatures": cols["tool"], "subgoals": cols["subgoal"]}
    pool = OSUPool.build(make_view(n, 8, **kw), OSUConfig(views=(view,)))
    assert pool.signature() == {(view, "A", (0, delta))}


def test_split_segments_is_strictly_more_than():
    assert [s.tolist() for s in split_segments(np.array([0, 3, 7, 12]), 4, 20)] == [
        [0, 3, 7],
        [12],
    ]


def test_forty_five_members_split_20_20_5():
    view = _entity_view({"A": list(range(45))}, 45)
    pool = OSUPool.build(view, ONLY_ENTITY)
    sizes = sorted(len(m) for m in _groups(pool)["A"])
    assert sizes == [5, 20, 20]
    assert _groups(pool)["A"][0] == tuple(range(20))  # consecutive chunks


def test_singleton_is_pruned():
    view = _entity_view({"A": [0, 2], "B": [5]}, 6)
    pool = OSUPool.build(view, ONLY_ENTITY)
    assert set(_groups(pool)) == {"A"}
    assert pool.memberships_per_step().tolist() == [1, 0, 1, 0, 0, 0]


def test_step_in_seven_osus_kept_in_five_by_priority():
    # step 0 carries 4 entities, a tool and a subgoal; partners (steps 1..6) make every
    # group size 2, and the similarity view (all steps, identical vectors) one
    # community of 7: step 0 has 4 + 1 + 1 + 1 = 7 candidate OSUs.
    n = 7
    ents = [{"e1", "e2", "e3", "e4"}, {"e1"}, {"e2"}, {"e3"}, {"e4"}, set(), set()]
    tools = ["t", "", "", "", "", "t", ""]
    subs = ["s", "", "", "", "", "", "s"]
    emb = np.zeros((n, 4))
    emb[:, 0] = 1.0
    view = make_view(n, 4, embeddings=emb, entities=ents, tool_signatures=tools, subgoals=subs)

    def build(m):
        return OSUPool.build(view, OSUConfig(max_memberships=m, similarity_scope="all", knn_k=6))

    pool = build(5)
    names = pool.view_names()
    assert sorted(str(names[u]) for u in pool.osus_of(0)) == ["entity"] * 4 + ["tool"]
    # the subgoal OSU lost step 0 and fell to 1 member: pruned (f_min after the cap);
    # the similarity OSU lost step 0 but keeps 6 members.
    assert "subgoal" not in set(names)
    assert {m for v, _, m in pool.signature() if v == "similarity"} == {(1, 2, 3, 4, 5, 6)}
    assert pool.memberships_per_step().tolist() == [5, 2, 2, 2, 2, 2, 1]
    # M_max = 6 keeps the subgoal too, still not the similarity OSU.
    six = build(6)
    kept6 = sorted(str(six.view_names()[u]) for u in six.osus_of(0))
    assert kept6 == ["entity"] * 4 + ["subgoal", "tool"]


def test_priority_ties_go_to_coherence():
    # step 0 has two entities; M_max = 1 keeps the more coherent group ("tight").
    emb = np.array([[1, 0, 0, 0], [1, 0.05, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]])
    ents = [{"tight", "loose"}, {"tight"}, {"loose"}, {"tight"}, {"loose"}]
    view = make_view(5, 4, embeddings=emb, entities=ents)
    pool = OSUPool.build(view, OSUConfig(views=("entity",), max_memberships=1))
    assert [str(pool.keys[u]) for u in pool.osus_of(0)] == ["tight"]
    assert _groups(pool)["loose"] == [(2, 4)]


def test_disjoint_evicts_step_whose_only_osu_falls_below_f_min():
    # step 1 is in entity A (with step 0) and tool T (with step 2). Disjoint keeps A
    # for step 1, so T keeps only step 2 -> below f_min -> pruned: step 2 is evicted.
    ents = [{"A"}, {"A"}, set()]
    tools = ["", "T", "T"]
    view = make_view(3, 4, entities=ents, tool_signatures=tools)
    pool = OSUPool.build(view, OSUConfig(views=("entity", "tool"), max_memberships=1))
    assert pool.signature() == {("entity", "A", (0, 1))}
    assert pool.memberships_per_step().tolist() == [1, 1, 0]
    overlap = OSUPool.build(view, OSUConfig(views=("entity", "tool"), max_memberships=5))
    assert overlap.memberships_per_step().tolist() == [1, 2, 1]


def test_similarity_fallback_scope():
    # annotated steps (entity) are left to the entity view; the similarity view covers
    # the unannotated ones, and every step when it is the only view.
    n = 8
    emb = np.zeros((n, 4))
    emb[:4, 0] = 1.0
    emb[4:, 1] = 1.0
    ents = [{"A"}, {"A"}, {"A"}, {"A"}, set(), set(), set(), set()]
    view = make_view(n, 4, embeddings=emb, entities=ents)
    pool = OSUPool.build(view, OSUConfig(knn_k=3))
    sim = [m for v, _, m in pool.signature() if v == "similarity"]
    assert sim == [(4, 5, 6, 7)]
    only = OSUPool.build(view, OSUConfig(views=("similarity",), knn_k=3))
    assert sorted(m for _, _, m in only.signature()) == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_pool_fields():
    costs = [10, 20, 30, 40]
    view = _entity_view({"A": [1, 3]}, 4, costs=costs)
    pool = OSUPool.build(view, ONLY_ENTITY)
    assert pool.n_osus == 1
    assert pool.costs.tolist() == [20 + 40]
    assert pool.spans.tolist() == [[1, 3]]
    assert pool.sizes.tolist() == [2]
    c = view.embeddings[1] + view.embeddings[3]
    np.testing.assert_allclose(pool.centroids[0], c / np.linalg.norm(c), rtol=1e-5)
    np.testing.assert_allclose(pool.coherence[0], np.linalg.norm(c) / 2, rtol=1e-5)


def test_config_validation_reports_everything():
    with pytest.raises(ConfigError, match=r"max_memberships.*views"):
        OSUConfig(max_memberships=0, views=("bogus",))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("gap", "s_max"), [(1, 3), (4, 20), (2, 2)])
def test_annotation_groups_equal_split_segments_per_key(seed, gap, s_max):
    """All keys at once give what splitting each key's positions alone gives: the same
    groups, keys in order of first appearance, each key's groups in time order."""
    from collections import defaultdict

    from osumem.osu.views import annotation_groups, step_keys

    rng = np.random.default_rng(seed)
    n = 300
    ents = [set(rng.choice(list("abcdefg"), size=rng.integers(0, 4)).tolist()) for _ in range(n)]
    tools = [str(rng.choice(["", "t1", "t2", "t3"])) for _ in range(n)]
    subs = [str(rng.choice(["", "s1", "s2"])) for _ in range(n)]
    view = make_view(n, 8, entities=ents, tool_signatures=tools, subgoals=subs)
    cfg = OSUConfig(gap=gap, max_osu_size=s_max)
    for name in ("entity", "tool", "subgoal"):
        by_key: dict[str, list[int]] = defaultdict(list)
        for p, key in step_keys(view, name):
            by_key[key].append(p)
        want = [
            (name, key, seg.tolist())
            for key, pos in by_key.items()
            for seg in split_segments(np.asarray(pos), cfg.split_threshold(name), s_max)
        ]
        got = [(v, k, m.tolist()) for v, k, m in annotation_groups(view, name, cfg)]
        assert got == want
