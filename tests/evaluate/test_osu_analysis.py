"""Reachability / membership analysis tables and their report sections."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from osumem.bench.synthetic import SyntheticConfig, generate
from osumem.evaluate.membership import membership_table
from osumem.evaluate.osu_analysis import (
    analysis_paths,
    osu_analysis_rows,
    reach_difference,
    write_osu_analysis,
)
from osumem.evaluate.reach import reach_table
from osumem.evaluate.runner import parse_method_runs, run, write_results
from osumem.osu.config import VIEWS
from osumem.report.build import ReportSettings, build_report
from osumem.report.osu_sections import membership_section, reach_section
from osumem.report.sections import read_dir


def _reach_rows(mode: str, via: dict[str, list[bool]], reached: list[bool]) -> pd.DataFrame:
    n = len(reached)
    data = {
        "seed": [0] * n,
        "mode": [mode] * n,
        "budget": [256] * n,
        "episode": ["e"] * n,
        "query": [f"q{i // 2}" for i in range(n)],
        "step": list(range(n)),
        "k": [4] * n,
        "reached": reached,
    }
    for v in VIEWS:
        data[f"via_{v}"] = via.get(v, [False] * n)
    return pd.DataFrame(data)


def test_reach_table_by_hand() -> None:
    rows = _reach_rows(
        "overlap",
        {"entity": [True, False, False, False], "tool": [True, True, False, False]},
        [True, True, False, False],
    )
    t = reach_table(rows).iloc[0]
    assert t["p_entity"] == 0.25 and t["p_tool"] == 0.5 and t["p_subgoal"] == 0.0
    assert t["p_reach_independence"] == pytest.approx(1 - 0.75 * 0.5)
    assert t["p_reach_union_bound"] == 0.5
    assert t["p_reach_empirical"] == 0.5
    assert t["n_evidence"] == 4 and t["mean_k"] == 4.0


def test_reach_difference_pairs_by_query() -> None:
    over = _reach_rows("overlap", {}, [True, True, True, False])
    disj = _reach_rows("disjoint", {}, [False, False, True, False])
    d = reach_difference(pd.concat([over, disj]), n_permutations=99).iloc[0]
    # q0: 1.0 − 0.0; q1: 0.5 − 0.5 → mean difference .5 over 2 queries
    assert d["n_queries"] == 2 and d["diff"] == pytest.approx(0.5)
    assert 0 < d["p"] <= 1
    assert reach_difference(over).empty  # no disjoint rows: nothing to pair


def test_membership_table_by_hand() -> None:
    rows = pd.DataFrame(
        {
            "mode": ["overlap"] * 4,
            "n_osus": [0, 1, 2, 3],
            **{f"n_{v}": [0, 1, 1, 1] for v in VIEWS},
        }
    )
    t = membership_table(rows).iloc[0]
    assert t["mean_osus"] == 1.5 and t["median_osus"] == 1.5 and t["share_no_osu"] == 0.25
    assert t["mean_entity"] == 0.75
    assert membership_table(pd.DataFrame()).empty


@pytest.fixture(scope="module")
def episodes() -> list:
    return [(1000, ep) for ep in generate(SyntheticConfig(n_episodes=3), 1000)]


@pytest.fixture(scope="module")
def analysis(episodes: list) -> tuple[pd.DataFrame, pd.DataFrame]:
    return osu_analysis_rows(episodes, [64, 256, 512])


def test_rows_invariants(episodes: list, analysis: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    reach, member = analysis
    n_ev = sum(len(q.evidence) for _, ep in episodes for q in ep.queries)
    assert len(member) == 2 * n_ev and len(reach) == 2 * 3 * n_ev
    assert set(reach["seed"]) == {1000}
    via = reach[[f"via_{v}" for v in VIEWS]]
    # reached exactly when some view reaches the step
    assert (reach["reached"] == via.any(axis=1)).all()
    # disjoint: each step is in at most one OSU, so at most one view reaches it
    assert (via[reach["mode"] == "disjoint"].sum(axis=1) <= 1).all()
    assert member[member["mode"] == "disjoint"]["n_osus"].max() <= 1
    # the coarse ranking does not depend on B and K grows with B: reach is monotone
    wide = reach.pivot_table(
        index=["mode", "episode", "query", "step"], columns="budget", values="reached"
    )
    assert (wide[64] <= wide[256]).all() and (wide[256] <= wide[512]).all()


def test_report_sections_from_written_analysis(tmp_path: Path, episodes: list) -> None:
    rows = run(episodes, parse_method_runs(["flat", "osumem"]), [256], benchmark="synthetic")
    write_results(tmp_path, rows, {"benchmark": "synthetic"}, name="synthetic")
    info = write_osu_analysis(tmp_path, "synthetic", episodes, [256])
    rpath, mpath = analysis_paths(tmp_path, "synthetic")
    assert rpath.exists() and mpath.exists() and info["reach_rows"] > 0
    # a stray derived table at the top level is not mistaken for retrieval rows
    pd.DataFrame({"x": [1]}).to_parquet(tmp_path / "synthetic_extra.parquet")
    assert set(read_dir(tmp_path)) == {"synthetic"}
    (tmp_path / "synthetic.json").write_text(
        json.dumps({"construction": {"queries": 12, "share_same_action": 0.5}})
    )
    md = build_report(tmp_path, settings=ReportSettings(n_permutations=99)).read_text()
    assert "### Reachability (Propositions 4.1/4.2), overlap vs disjoint" in md
    assert "### Evidence-OSU membership, overlap vs disjoint" in md
    assert "queries = 12 [907]" in md and "share_same_action = 0.500 [0.834]" in md
    assert "Coarse routing recall of the default OSU-Mem" in md
    assert "2.16" not in md  # ToolBench's membership numbers stay out of synthetic


def test_toolbench_sections_show_paper_numbers(
    analysis: tuple[pd.DataFrame, pd.DataFrame],
) -> None:
    reach, member = analysis
    md = membership_section(member, bench_key="toolbench")
    line = next(ln for ln in md.splitlines() if ln.startswith("| overlap |"))
    assert "2.16" in line and "0.0%" in line
    line = next(ln for ln in md.splitlines() if ln.startswith("| disjoint |"))
    assert "0.87" in line and "13.2%" in line
    assert "< .17" in reach_section(reach, bench_key="toolbench", n_permutations=99)
    assert "< .17" not in reach_section(reach, bench_key="synthetic", n_permutations=99)


def test_row_files_of_one_benchmark_get_their_own_figures(tmp_path: Path, episodes: list) -> None:
    rows = run(episodes, parse_method_runs(["flat", "osumem"]), [64, 256], benchmark="synthetic")
    write_results(tmp_path, rows, {}, name="synthetic")
    write_results(tmp_path, rows[rows["method"] == "flat"], {}, name="synthetic_flat_only")
    md = build_report(tmp_path, settings=ReportSettings(n_permutations=99)).read_text()
    figs = {p.name for p in (tmp_path / "figures").glob("*.png")}
    assert {"synthetic_distance.png", "synthetic_flat_only_distance.png"} <= figs
    assert "figures/synthetic_flat_only_curves.png" in md


def test_spec_labels_get_their_registered_alias_and_paper_numbers() -> None:
    from osumem.evaluate.methods import read_method_table

    t = read_method_table(
        {},
        [
            "osumem[max_memberships=1]",
            "osumem[max_memberships=5]",
            "osumem[max_memberships=3]",
            "osumem_gf",
            "flat@k3",
        ],
    )
    assert t["osumem[max_memberships=1]"].alias == "osumem_disjoint"
    assert t["osumem[max_memberships=5]"].alias == "osumem"
    assert t["osumem[max_memberships=3]"].alias is None
    assert t["osumem[max_memberships=3]"].params["max_memberships"] == 3
    assert t["osumem[max_memberships=1]"].display() == (
        "osumem[max_memberships=1] (= osumem_disjoint)"
    )
    assert t["osumem_gf"].display() == "osumem_gf (oracle)"
    assert t["flat@k3"].alias == "flat@k3" and not t["flat@k3"].is_oracle


def test_analysis_on_the_runs_pools_equals_its_own_builds(
    episodes: list, analysis: tuple[pd.DataFrame, pd.DataFrame], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside the run (reusing the pools of osumem and osumem_disjoint) the reach and
    membership rows are those of the stand-alone analysis, which builds its own, and
    the retrieval rows those of a run without the analysis."""
    from functools import partial

    from osumem.evaluate.osu_analysis import combine_parts, episode_osu_analysis
    from osumem.evaluate.runner import run_episodes
    from osumem.osu.pool import OSUPool

    built = []
    real_build = OSUPool.build.__func__  # type: ignore[attr-defined]

    def counting_build(cls, *args, **kwargs):  # type: ignore[no-untyped-def]
        built.append(1)
        return real_build(cls, *args, **kwargs)

    monkeypatch.setattr(OSUPool, "build", classmethod(counting_build))
    runs = parse_method_runs(["osumem", "osumem_disjoint", "flat"])
    budgets = [64, 256, 512]
    rows, parts, after_s = run_episodes(
        episodes,
        runs,
        budgets,
        benchmark="synthetic",
        after=partial(episode_osu_analysis, budgets=budgets),
    )
    reach, member = combine_parts(parts)
    assert len(parts) == len(episodes) and after_s > 0
    # two constructions per query time, built once each for the run and the analysis
    n_times = sum(len({int(q.t) for q in ep.queries}) for _, ep in episodes)
    assert len(built) == 2 * n_times
    pd.testing.assert_frame_equal(reach, analysis[0])
    pd.testing.assert_frame_equal(member, analysis[1])
    alone = run(episodes, runs, budgets, benchmark="synthetic")
    timing = ["latency_s", "build_share_s", "build_s"]
    pd.testing.assert_frame_equal(rows.drop(columns=timing), alone.drop(columns=timing))
