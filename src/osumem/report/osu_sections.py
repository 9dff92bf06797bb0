"""Report sections from the derived OSU analysis tables (:mod:`osumem.evaluate.osu_analysis`):
reachability (Propositions 4.1/4.2) and evidence-OSU membership, overlap vs disjoint."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from osumem.evaluate.membership import membership_table
from osumem.evaluate.osu_analysis import analysis_paths, reach_difference
from osumem.evaluate.reach import reach_table
from osumem.evaluate.stats import format_p
from osumem.osu.config import VIEWS
from osumem.report.paper import paper_cell


def read_analysis(results: Path, name: str) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """The reach and membership rows written for row file ``name``, ``None`` when absent."""
    rpath, mpath = analysis_paths(results, name)
    reach = pd.read_parquet(rpath) if rpath.exists() else None
    member = pd.read_parquet(mpath) if mpath.exists() else None
    return reach, member


def reach_section(
    reach: pd.DataFrame, *, bench_key: str, n_permutations: int, seed: int = 0
) -> str:
    """Per mode and budget: p_v per view, P_reach (independence model, union bound,
    empirical), then the overlap − disjoint reach difference with its p-value and the
    coarse routing recall of the default OSU-Mem."""
    table = reach_table(reach)
    if table.empty:
        return "_No evidence steps to analyse._\n"
    views = [v for v in VIEWS if table[f"p_{v}"].gt(0).any() or v != "similarity"]
    head = ["mode", "B", "evidence", *(f"p_{v}" for v in views)]
    head += ["P_reach indep. 1−Π(1−p_v)", "union bound max p_v", "P_reach empirical", "mean K"]
    lines = [
        "p_v: share of evidence steps inside a kept (top-K coarse) OSU of view v. Under the "
        "independence model the overlap pool reaches a step with P = 1 − Π_v(1 − p_v); "
        "the union bound is P ≥ max_v p_v. Under disjoint (M_max = 1) a step lies in at "
        "most one OSU, so the paper's P_reach^disj = p_{v*} and the empirical reach is "
        "Σ_v p_v. Overlap = `osumem` (M_max = 5), disjoint = `osumem_disjoint` (M_max = 1).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in table.itertuples(index=False):
        cells = [str(r.mode), str(r.budget), str(r.n_evidence)]
        cells += [f"{getattr(r, f'p_{v}'):.3f}" for v in views]
        cells += [
            f"{r.p_reach_independence:.3f}",
            f"{r.p_reach_union_bound:.3f}",
            f"**{r.p_reach_empirical:.3f}**",
            f"{r.mean_k:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    diff = reach_difference(reach, n_permutations=n_permutations, seed=seed)
    if not diff.empty:
        lines += [
            "",
            "Empirical reach, overlap − disjoint (paired by query: mean reach of its "
            "evidence; sign-flip p per seed, Fisher-combined):",
            "",
            "| B | queries | Δ reach | p |",
            "|---|---|---|---|",
        ]
        for r in diff.itertuples(index=False):
            lines.append(f"| {r.budget} | {r.n_queries} | {r.diff:+.3f} | {format_p(r.p)} |")
    over = table[table["mode"] == "overlap"]
    if not over.empty:
        paper = paper_cell(bench_key, "osumem", None, "routing_recall")
        lines += [
            "",
            "Coarse routing recall of the default OSU-Mem (overlap, share of evidence in a "
            "kept OSU): "
            + ", ".join(f"B={r.budget}: {r.p_reach_empirical:.3f}" for r in over.itertuples())
            + (f" [paper: {paper}]" if paper != "–" else "")
            + ".",
        ]
    return "\n".join(lines) + "\n"


def membership_section(member: pd.DataFrame, *, bench_key: str) -> str:
    """Per mode: mean / median OSUs per evidence step, share in no OSU, per-view means;
    the paper's numbers beside ours where the paper has them (ToolBench only)."""
    table = membership_table(member)
    if table.empty:
        return "_No evidence steps to analyse._\n"
    head = ["mode", "evidence", "mean OSUs", "paper", "median", "paper", "in no OSU", "paper"]
    head += [f"mean {v}" for v in VIEWS]
    lines = [
        "OSUs per evidence step in the pool built on the query's causal prefix.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in table.itertuples(index=False):
        item = f"membership_{r.mode}"
        cells = [
            str(r.mode),
            str(r.n_evidence),
            f"{r.mean_osus:.2f}",
            paper_cell(bench_key, item, None, "mean", ".2f"),
            f"{r.median_osus:g}",
            paper_cell(bench_key, item, None, "median", "g"),
            f"{r.share_no_osu:.1%}",
            paper_cell(bench_key, item, None, "share_none", ".1%"),
            *(f"{getattr(r, f'mean_{v}'):.2f}" for v in VIEWS),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
