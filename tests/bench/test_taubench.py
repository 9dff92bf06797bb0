"""tau-bench: evidence matching, episode construction, namespace prefixing, Stage D."""

from __future__ import annotations

import json

import numpy as np
import pytest

from osumem.bench.augment import StageDConfig, stage_d
from osumem.bench.taubench import (
    TauBenchConfig,
    construction_stats,
    generate,
    query_vector,
    source_views,
)
from osumem.embed import HashingEncoder
from osumem.errors import ConfigError
from osumem.ingest.taubench import load_taubench, match_actions, match_stats
from osumem.types import Step


def tool(name: str, **args) -> Step:
    return Step(role="tool", tool_action=name, arguments=args)


def test_match_exact_vs_relaxed() -> None:
    steps = [
        Step(role="user", text="hi"),
        tool("get", id="A"),
        tool("cancel", id="B", reason="x"),  # executed with a different reason
        tool("cancel", id="A", reason="change"),
    ]
    actions = [
        {"name": "cancel", "kwargs": {"id": "A", "reason": "change"}},
        {"name": "cancel", "kwargs": {"id": "B", "reason": "other"}},
        {"name": "book", "kwargs": {}},  # never executed
    ]
    exact, n_exact, n_relaxed = match_actions(steps, actions, match="exact")
    assert exact == (3,) and n_exact == 1 and n_relaxed == 2
    relaxed, _, _ = match_actions(steps, actions, match="relaxed")
    assert relaxed == (2, 3)  # the exact match first, then the best partial one
    with pytest.raises(ConfigError):
        match_actions(steps, actions, match="fuzzy")


def test_relaxed_prefers_most_agreeing_arguments_and_uses_each_step_once() -> None:
    steps = [tool("f", a=1, b=9), tool("f", a=1, b=2), tool("f", a=0, b=0)]
    pos, _, n = match_actions(steps, [{"name": "f", "kwargs": {"a": 1, "b": 2, "c": 3}}] * 2)
    assert pos == (0, 1) and n == 2  # most agreeing (1) first, then the earliest tie (0)


def _tiny_file(tmp_path, n_tasks: int = 8, trials: int = 1):
    recs = []
    for t, trial in [(t, r) for t in range(n_tasks) for r in range(trials)]:
        traj = [{"role": "system", "content": "policy"}]
        for k in range(10):
            traj.append({"role": "user", "content": f"task {t} turn {k}"})
            traj.append({"role": "assistant", "content": f"reply {k}"})
        traj.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{j}",
                        "function": {
                            "name": "cancel",
                            "arguments": json.dumps({"rid": f"R{t}", "n": j}),
                        },
                    }
                    for j in range(2)
                ],
            }
        )
        traj += [{"role": "tool", "tool_call_id": f"c{j}", "content": "ok"} for j in range(2)]
        traj.append({"role": "user", "content": "bye"})
        actions = [{"name": "cancel", "kwargs": {"rid": f"R{t}", "n": j}} for j in range(2)]
        recs.append(
            {
                "task_id": t,
                "trial": trial,
                "reward": 1.0,
                "traj": traj,
                "info": {"task": {"instruction": f"do {t}", "actions": actions}},
            }
        )
    path = tmp_path / "tau.json"
    path.write_text(json.dumps(recs))
    return path


def test_synthetic_file_episodes_respect_lengths_distance_and_cells(tmp_path) -> None:
    src = load_taubench(_tiny_file(tmp_path))
    assert match_stats(src)["matched_exact"] == 16 and match_stats(src)["focal_candidates"] == 8
    assert src[0].evidence == (20, 21)  # 20 user/assistant steps, then the two calls
    assert src[0].steps[20].entities == frozenset({"t0r0::R0", "t0r0::0"})
    views = source_views(src, HashingEncoder(32))
    cfg = TauBenchConfig(n_episodes=6, min_steps=60, max_steps=100, min_query_distance=30)
    eps = generate(src, views, cfg, seed=3)
    for ep in eps:
        assert 60 <= ep.view.n <= 100
        assert ep.meta["focal"] in ep.meta["queried"]
        for q in ep.queries:
            assert q.t == ep.view.n and q.t - max(q.evidence) >= 30
            ns = q.qid.split("-", 1)[1]
            assert all(ep.view.sources[e] == ns for e in q.evidence)
            assert q.cell == "T+E+"  # same signature, shared rid entity
            assert abs(float(np.linalg.norm(q.vector)) - 1) < 1e-5
    again = generate(src, views, cfg, seed=3)
    np.testing.assert_array_equal(eps[0].queries[0].vector, again[0].queries[0].vector)
    n_q = sum(len(ep.queries) for ep in eps)
    assert construction_stats(eps)["cells"]["T+E+"] == n_q


def test_every_distant_source_gives_a_query_up_to_the_cap(tmp_path) -> None:
    """Each source (23 steps, evidence at 20 and 21) whose evidence lies >= 30 steps
    before the episode end gives one query; the cap keeps the focal source's."""
    src = load_taubench(_tiny_file(tmp_path, n_tasks=10))
    views = source_views(src, HashingEncoder(16))
    cfg = TauBenchConfig(
        n_episodes=5,
        min_steps=90,
        max_steps=100,
        min_query_distance=30,
        max_queries_per_episode=10,
    )
    for ep in generate(src, views, cfg, seed=1):
        start, want = 0, []
        for ns in ep.meta["sources"]:  # 4 sources of 23 steps: 92 steps
            if ep.view.n - (start + 21) >= 30:
                want.append(ns)
            start += 23
        assert ep.view.n == 92 and ep.meta["queried"] == want == ep.meta["sources"][:2]
        assert [q.qid.split("-", 1)[1] for q in ep.queries] == want
    capped = generate(src, views, cfg.replace(max_queries_per_episode=1), seed=1)
    assert all([q.qid.split("-", 1)[1] for q in ep.queries] == [ep.meta["focal"]] for ep in capped)


def test_sources_of_an_episode_have_distinct_tasks(tmp_path) -> None:
    src = load_taubench(_tiny_file(tmp_path, n_tasks=6, trials=3))
    views = source_views(src, HashingEncoder(16))
    cfg = TauBenchConfig(n_episodes=8, min_steps=90, max_steps=120, min_query_distance=30)
    for ep in generate(src, views, cfg, seed=0):
        tasks = [ns.split("r")[0] for ns in ep.meta["sources"]]
        assert len(tasks) == len(set(tasks)) >= 4
    same = generate(src, views, cfg.replace(exclude_same_task=False), seed=0)
    assert any(
        len({ns.split("r")[0] for ns in ep.meta["sources"]}) < len(ep.meta["sources"])
        for ep in same
    )


def test_query_noise_modes() -> None:
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((10, 384)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    mean = emb[[1, 2, 3]].mean(axis=0)
    mean /= np.linalg.norm(mean)
    cos = {}
    for mode in ("per_coordinate", "norm"):
        qs = [
            query_vector(emb, [1, 2, 3], mode="noisy_mean", noise=0.25, rng=rng, noise_mode=mode)
            for _ in range(20)
        ]
        cos[mode] = float(np.mean([q @ mean for q in qs]))
    # per coordinate: noise norm ≈ .25·√384 ≈ 4.9, cos ≈ 1/√(1 + 24) = .2;
    # as a norm: noise norm ≈ .25, cos ≈ 1/√(1 + .0625) ≈ .97
    assert 0.15 < cos["per_coordinate"] < 0.25 and cos["norm"] > 0.95
    with pytest.raises(ConfigError):
        query_vector(emb, [1], mode="noisy_mean", noise=0.1, rng=rng, noise_mode="l2")
    with pytest.raises(ConfigError):
        TauBenchConfig(query_noise_mode="l2")


def test_prefix_off_lets_strings_bridge_sources(tmp_path) -> None:
    path = _tiny_file(tmp_path)
    on = load_taubench(path, prefix_namespace=True)
    off = load_taubench(path, prefix_namespace=False)
    sig_on = {s.steps[20].tool_signature for s in on}
    sig_off = {s.steps[20].tool_signature for s in off}
    assert len(sig_on) == 8 and sig_off == {"cancel(n,rid)"}
    # "0" (the n argument) is shared by every source only without prefixes
    assert off[0].steps[20].entities & off[1].steps[20].entities == frozenset({"0"})
    assert not on[0].steps[20].entities & on[1].steps[20].entities


def test_stage_d_copies_inherit_annotations(tmp_path) -> None:
    src = load_taubench(_tiny_file(tmp_path))
    views = source_views(src, HashingEncoder(32))
    cfg = TauBenchConfig(
        n_episodes=3,
        min_steps=60,
        max_steps=100,
        min_query_distance=30,
        max_queries_per_episode=1,
    )
    ep = generate(src, views, cfg, seed=0)[0]
    aug = stage_d(ep, StageDConfig(min_query_distance=30, copy_noise=0.1), seed=0)
    (q0,), (q1,) = ep.queries, aug.queries
    assert aug.view.n == ep.view.n + 3 * len(q0.evidence)
    assert q1.t == aug.view.n and len(q1.evidence) == 4 and q1.cell == "T+E+"
    anchor = q0.evidence[0]
    for e in q1.evidence:
        assert aug.view.tool_signatures[e] == ep.view.tool_signatures[anchor]
        assert aug.view.entities[e] == ep.view.entities[anchor]
        assert aug.view.subgoals[e] == ep.view.subgoals[anchor]
        assert aug.view.costs[e] == ep.view.costs[anchor]
        assert float(aug.view.embeddings[e] @ ep.view.embeddings[anchor]) > 0.98
        assert q1.t - e >= 30
    # the original steps keep their order (copies only interleave)
    it = iter(aug.view.texts.tolist())
    assert all(any(t == u for u in it) for t in ep.view.texts.tolist())
    all_ev = stage_d(ep, StageDConfig(min_query_distance=30, evidence="all"), seed=0)
    assert len(all_ev.queries[0].evidence) == 4 * len(q0.evidence)


@pytest.mark.data
def test_real_file_matching_counts(shared_data) -> None:
    """The real airline file: 200 trajectories, 632 ground-truth actions; we report
    how many match (measured: 391 exact, 466 relaxed)."""
    path = shared_data / "taubench" / "gpt-4o-airline.json"
    src = load_taubench(path)
    stats = match_stats(src)
    assert stats["trajectories"] == 200 and stats["gt_actions"] == 632
    assert stats["matched_exact"] == 391 and stats["matched_relaxed"] == 466
    assert stats["focal_candidates"] == 80
    # every evidence step is a tool call of a ground-truth action name
    for s in src[:40]:
        for e in s.evidence:
            assert s.steps[e].role == "tool" and s.steps[e].tool_action
    views = source_views(src, HashingEncoder(16))
    eps = generate(src, views, TauBenchConfig(), seed=0)
    assert all(150 <= ep.view.n <= 300 for ep in eps)
    assert all(q.t - max(q.evidence) >= 100 for ep in eps for q in ep.queries)
    # the counts reported beside the paper's 125 / 328 / 56 T+E+ / 44 T-E+ (cells come
    # from annotations only, so the encoder does not matter)
    st = construction_stats(eps)
    assert (st["episodes"], st["queries"]) == (125, 326)
    assert st["cells"] == {"T+E+": 21, "T+E-": 0, "T-E+": 25, "T-E-": 280}


def test_cross_source_sharing_counts_pairs_by_hand() -> None:
    from osumem.bench.taubench import cross_source_sharing
    from osumem.ingest.openai_chat import steps_to_view

    steps = [
        Step(
            role="tool",
            tool_action="f",
            tool_signature="f(a)",
            entities=frozenset({"x"}),
            source="A",
        ),
        Step(
            role="tool",
            tool_action="f",
            tool_signature="f(a)",
            entities=frozenset({"y"}),
            source="B",
        ),
        Step(
            role="tool",
            tool_action="g",
            tool_signature="g(b)",
            entities=frozenset({"x"}),
            source="B",
        ),
        Step(role="user", text="hi", source="B"),
        Step(role="user", text="yo", source="A"),
    ]
    view = steps_to_view(steps, HashingEncoder(8))
    # cross pairs: A{0,4} x B{1,2,3} = 6; (0,1) share the signature, (0,2) the entity
    # "x"; same-source pair (1,2) shares nothing anyway; empty signatures never match
    assert cross_source_sharing(view) == {"pairs": 6, "entity": 1, "signature": 1, "either": 2}


def test_prefixing_removes_cross_source_sharing(tmp_path) -> None:
    from osumem.bench.taubench import sharing_rates

    path = _tiny_file(tmp_path)
    cfg = TauBenchConfig(n_episodes=3, min_steps=60, max_steps=100, min_query_distance=30)
    rates = {}
    for prefix in (True, False):
        src = load_taubench(path, prefix_namespace=prefix)
        rates[prefix] = sharing_rates(generate(src, source_views(src, HashingEncoder(8)), cfg, 0))
    assert rates[True] == {"entity": 0.0, "signature": 0.0, "either": 0.0}
    # off: both calls of every source have the signature cancel(n,rid), and "0"/"1"
    # (the n argument) recur across sources
    assert rates[False]["signature"] > 0 and rates[False]["entity"] > 0
    assert rates[False]["either"] >= max(rates[False]["entity"], rates[False]["signature"])


def test_calls_alone_is_the_default_and_200_chars_the_sensitivity_variant(tmp_path) -> None:
    from osumem.bench.reproduce import load_spec
    from osumem.bench.taubench_report import build_taubench

    data = _tiny_file(tmp_path)
    small = {"n_episodes": 2, "min_steps": 60, "max_steps": 100, "min_query_distance": 30}
    texts = {}
    for e in load_spec("taubench").experiments:
        if e.row_file not in ("taubench", "taubench_obs200"):
            continue
        cfg = TauBenchConfig(**small).replace(**dict(e.benchmark_params))
        eps, _ = build_taubench(data, cfg, [0], encoder="hashing")
        view = eps[0][1].view
        texts[e.row_file] = [t for t, r in zip(view.texts, view.roles, strict=True) if r == "tool"]
    # the default keeps the call and none of the response (only the cut marker)
    assert texts["taubench"]
    assert all(t.startswith("call: cancel(") and "ok" not in t for t in texts["taubench"])
    assert all(t.endswith("result: ok") for t in texts["taubench_obs200"])


@pytest.mark.slow  # six runs and the report
def test_reproduce_taubench_happy_path(tmp_path) -> None:
    import pandas as pd

    from osumem.bench.reproduce import load_spec, reproduce

    out = tmp_path / "out"
    small = {"n_episodes": 2, "min_steps": 60, "max_steps": 100, "min_query_distance": 30}
    spec = load_spec("taubench", encoder="hashing", n_permutations=99, benchmark_params=small)
    main = next(e for e in spec.experiments if e.role == "main")
    from dataclasses import replace

    spec = spec.replace(
        experiments=tuple(
            replace(e, methods=("flat", "osumem", "osumem_disjoint")) if e is main else e
            for e in spec.experiments
        )
    )
    info = reproduce(spec, data=_tiny_file(tmp_path), out=out, jobs=1, progress=False)
    for e in spec.experiments:
        rows = pd.read_parquet(out / f"{e.row_file}.parquet")
        assert list(dict.fromkeys(rows["method"])) == list(e.run_methods())
        meta = json.loads((out / f"{e.row_file}.json").read_text())
        assert [m["label"] for m in meta["method_table"]] == list(e.run_methods())
        assert meta["config"]["n_episodes"] == 2
    summary = (out / "taubench_summary.md").read_text()
    assert "| episodes | 2 | 125 |" in summary  # ours beside the paper's
    assert (out / "report.md").read_text().rstrip().endswith(summary.rstrip())
    assert info["report"] == str(out / "report.md")
