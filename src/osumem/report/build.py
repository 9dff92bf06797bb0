"""``osumem report DIR``: a results directory → ``report.md`` and PNG figures.

A results directory holds ``<benchmark>.parquet`` row files (with ``<benchmark>.json``
metadata), optionally ``experiments.json`` (the experiment configs that produced them,
written by ``osumem reproduce``) and ``efficiency.csv``. Sections appear when their
inputs are present: the configured tables; for every benchmark without a config a
default comparison; the budget-vs-metric curves and recall by temporal distance; the
cell cross-tab, interaction test and metadata heuristic when the queries fall in more
than one cell; the ToolBench overlap − disjoint contrast when both variants have rows.
The paper's number is printed beside ours wherever the paper has one
(:mod:`osumem.report.paper`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from osumem.evaluate.defaults import primary_budget
from osumem.evaluate.heuristic import verdict_from_cells
from osumem.evaluate.methods import read_method_table
from osumem.evaluate.metrics import summarise
from osumem.evaluate.stats import resolve_threads
from osumem.report import figures
from osumem.report.experiment import KINDS, SECTION_KINDS, Experiment
from osumem.report.osu_sections import membership_section, reach_section, read_analysis
from osumem.report.paper import paper_cell, paper_value
from osumem.report.sections import (
    ReportSettings,
    comparison_section,
    crosstab_section,
    distance_section,
    efficiency_section,
    observed_overlap_section,
    paper_benchmark,
    read_dir,
    sweep_section,
    toolbench_section,
)

__all__ = ["ReportSettings", "build_report", "paper_benchmark", "primary_budget", "read_dir"]


def _construction(stats: dict[str, Any], bench_key: str) -> str:
    """The construction statistics, the paper's number beside each one it reports."""
    parts = []
    for k, v in stats.items():
        text = f"{k} = {v:.3f}" if isinstance(v, float) else f"{k} = {v}"
        paper = paper_value(bench_key, "construction", None, k)
        if paper is not None:
            text += f" [{paper:.3f}]" if isinstance(v, float) else f" [{paper:.0f}]"
        parts.append(text)
    return ", ".join(parts)


def build_report(
    results: Path, *, settings: ReportSettings | None = None, out: Path | None = None
) -> Path:
    """Write ``report.md`` (and ``figures/*.png``) for a results directory.

    BLAS is held to one thread meanwhile: the report's matrix products are small, so
    more threads only spin; parallelism comes from ``settings.jobs``."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        return _build_report(results, settings=settings, out=out)


def _build_report(results: Path, *, settings: ReportSettings | None, out: Path | None) -> Path:
    settings = settings or ReportSettings()
    resolve_threads(settings.jobs)  # a bad value fails before anything is written
    results = Path(results)
    out = Path(out) if out is not None else results / "report.md"
    figdir = out.parent / "figures"
    data = read_dir(results)
    exps: list[Experiment] = []
    if (results / "experiments.json").exists():
        exps = [
            Experiment.from_dict(d) for d in json.loads((results / "experiments.json").read_text())
        ]
    md: list[str] = ["# OSU-Mem results report", ""]
    md.append(
        f"Results directory: `{results}`. Paper numbers: arXiv 2606.28376. "
        f"All p-values: paired sign-flip permutation tests, two-sided, "
        f"{settings.n_permutations} permutations, seed {settings.seed}; "
        "per-seed p-values Fisher-combined.\n"
    )
    for name, rows in data.items():
        meta_path = results / f"{name}.json"
        meta: dict[str, Any] = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        bench = str(rows["benchmark"].iloc[0]) if len(rows) else name
        bench_key = paper_benchmark(bench)
        budgets = sorted(int(b) for b in rows["budget"].unique())

        methods = read_method_table(meta, rows["method"].unique().tolist())
        legend = {label: m.display() for label, m in methods.items()}

        def paper_lookup(
            method: str, budget: int, metric: str, key: str = bench_key, table: Any = methods
        ) -> Any:
            alias = table[method].alias if method in table else method
            return None if alias is None else paper_value(key, alias, budget, metric)

        mine = sorted(
            (e for e in exps if e.benchmark == bench and e.kind in SECTION_KINDS),
            key=lambda e: (KINDS.index(e.kind), e.name),
        )
        n_q = rows.drop_duplicates(["seed", "episode", "query"]).shape[0]
        n_ep = rows.drop_duplicates(["seed", "episode"]).shape[0]
        md += [
            f"## Benchmark `{bench}` ({name}.parquet)",
            "",
            f"{n_q} queries in {n_ep} episodes; seeds {sorted(rows['seed'].unique().tolist())}; "
            f"budgets {budgets}.",
        ]
        if "construction" in meta:
            md.append(
                "Construction [paper's number in brackets where it has one]: "
                + _construction(meta["construction"], bench_key)
                + "."
            )
        md.append("")
        if not mine:
            ref = (
                settings.reference
                if settings.reference in set(rows["method"].unique().tolist())
                else str(rows["method"].iloc[0])
            )
            pb = primary_budget(bench, budgets)
            md += [
                f"### All methods at B = {pb} (reference {ref})",
                "",
                comparison_section(
                    rows,
                    rows["method"].unique().tolist(),
                    reference=ref,
                    budget=pb,
                    bench_key=bench_key,
                    settings=settings,
                    methods=methods,
                ),
            ]
            if len(budgets) > 1:
                md += [
                    "### Budget sweep",
                    "",
                    sweep_section(
                        rows,
                        rows["method"].unique().tolist(),
                        reference=ref,
                        bench_key=bench_key,
                        settings=settings,
                        methods=methods,
                    ),
                ]
        for e in mine:
            md += [
                f"### {e.title}",
                "",
                f"_Config: `{Path(e.source).name}`; reference "
                f"`{e.reference}`; primary budget {e.primary_budget}._",
                "",
            ]
            if e.paper_note:
                md += [f"Paper: {e.paper_note}", ""]
            if e.kind == "sweep":
                md.append(
                    sweep_section(
                        rows,
                        list(e.methods),
                        reference=e.reference,
                        bench_key=bench_key,
                        settings=settings,
                        metrics=e.metrics,
                        methods=methods,
                    )
                )
                sub = rows[rows["method"].isin(e.methods)]
                p = figures.budget_curves(
                    sub,
                    figdir / f"{name}_{e.name}_curves.png",
                    metrics=e.metrics,
                    title=f"{bench}: {e.title}",
                    paper=paper_lookup,
                    labels=legend,
                )
                md += [f"![budget-vs-metric curves](figures/{p.name})", ""]
            else:
                md.append(
                    comparison_section(
                        rows,
                        list(e.methods),
                        reference=e.reference,
                        budget=e.primary_budget,
                        bench_key=bench_key,
                        settings=settings,
                        metrics=e.metrics,
                        methods=methods,
                    )
                )
        main_methods = next(
            (list(e.methods) for e in mine if e.kind == "comparison"),
            rows["method"].unique().tolist(),
        )
        pb = primary_budget(bench, budgets)
        text, bd = distance_section(rows[rows["method"].isin(main_methods)], pb)
        p = figures.distance_bars(
            bd,
            figdir / f"{name}_distance.png",
            title=f"{bench}: recall by temporal distance, B = {pb}",
            order=main_methods,
        )
        md += [
            f"### Recall by temporal distance (B = {pb})",
            "",
            text,
            f"![recall by distance](figures/{p.name})",
            "",
        ]
        if not any(e.kind == "sweep" for e in mine) and len(budgets) > 1:
            p = figures.budget_curves(
                rows[rows["method"].isin(main_methods)],
                figdir / f"{name}_curves.png",
                title=bench,
                paper=paper_lookup,
                labels=legend,
            )
            md += [f"![budget-vs-metric curves](figures/{p.name})", ""]
        one = rows[rows["method"] == rows["method"].iloc[0]]
        cells = one.drop_duplicates(["seed", "episode", "query"])["cell"]
        verdict = verdict_from_cells(cells)
        md += [
            "### Cells and the metadata heuristic",
            "",
            "Cells from annotations alone (T+: evidence shares a tool signature, E+: an "
            "entity); the heuristic predicts that overlap helps when the any-binding "
            f"share π_any ≥ {verdict.min_binding_share:.2f}.",
            "",
            verdict.to_markdown(),
            "",
            observed_overlap_section(rows, pb, settings),
        ]
        reach, member = read_analysis(results, name)
        if reach is not None:
            md += [
                "### Reachability (Propositions 4.1/4.2), overlap vs disjoint",
                "",
                reach_section(
                    reach,
                    bench_key=bench_key,
                    n_permutations=settings.n_permutations,
                    seed=settings.seed,
                ),
            ]
        if member is not None:
            md += [
                "### Evidence-OSU membership, overlap vs disjoint",
                "",
                membership_section(member, bench_key=bench_key),
            ]
        have = set(rows["method"].unique().tolist())
        if cells.nunique() > 1 and {settings.reference, settings.baseline} <= have:
            md += [
                f"### Cross-tab and interaction test ({settings.reference} vs {settings.baseline})",
                "",
                crosstab_section(rows, bench_key=bench_key, settings=settings),
            ]
        if {settings.overlap, settings.disjoint} <= have:
            md += [
                f"### Overlap vs disjoint ({settings.overlap} vs {settings.disjoint})",
                "",
                toolbench_section(rows, settings=settings, bench_key=bench_key),
            ]
            if settings.baseline in have:
                flat = summarise(rows[rows["method"] == settings.baseline]).set_index("budget")
                parts = []
                for b in flat.index:
                    paper = paper_cell(bench_key, settings.baseline, int(b), "recall")
                    extra = f" [paper {paper}]" if paper != "–" else ""
                    parts.append(f"B={b}: {flat.loc[b, 'recall']:.3f}{extra}")
                md += [f"{settings.baseline} recall by budget: " + ", ".join(parts) + ".", ""]
        if "llm_hard_recall" in rows.columns:  # the LLM evidence-selection stage
            from osumem.report.llm_section import llm_section

            md.append(
                llm_section(rows, info=meta.get("llm"), n_permutations=settings.n_permutations)
            )
    eff_path = results / "efficiency.csv"
    if eff_path.exists():
        md += [
            "## Efficiency",
            "",
            "Retrieve-only latency: median `retrieve` call; amortised: median of retrieve "
            "time plus the fit time divided by the queries sharing the fit; structure: the "
            "learned state alone; storage: structure plus the step embeddings and costs. "
            "Ratios are to Flat Vector in the same run.",
            "",
            efficiency_section(pd.read_csv(eff_path, dtype={"dim": str})),
        ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(md).rstrip() + "\n")
    return out
