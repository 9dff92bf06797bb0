"""The ToolBench tables: main overlap-vs-disjoint table, β sweep,
evidence-size sweep, evidence-OSU membership/eviction and coarse-routing recall, each
beside the paper's numbers, plus clearly labelled sensitivity runs (namespace prefix on,
a larger Δ_gap) that are never used to pick defaults.

Retrieval numbers come from per-query rows (``toolbench*.parquet``); membership and
routing come from :mod:`osumem.evaluate.osu_analysis` (``analysis/toolbench_*.parquet``),
so ``osumem report`` shows them too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

OVERLAP = "osumem_coverage"
DISJOINT = "osumem_coverage_disjoint"


def _paper(item: str, budget: int | None, metric: str) -> float | None:
    """The paper's ToolBench number (one table for the whole project: report.paper)."""
    from osumem.report.paper import paper_value

    return paper_value("toolbench", item, budget, metric)


def _fisher(rows: pd.DataFrame, a: str, b: str, metric: str, budget: int) -> tuple[float, str]:
    """Mean ``a − b`` and 'Fisher p (per-seed p, ...)' from per-seed sign-flip tests."""
    from osumem.evaluate.stats import fisher_combine, format_p, paired_differences, seed_p_values

    d = paired_differences(rows, a, b, metric, budget=budget)
    per = seed_p_values(d)
    text = f"{format_p(fisher_combine(per))} ({', '.join(format_p(p) for p in per)})"
    return float(d["d"].mean()), text


def gap_table(rows: pd.DataFrame, a: str, b: str, *, paper: bool = True) -> str:
    """Markdown: per budget, ``a − b`` Hit@2 and Recall gaps (pp) with per-seed and
    Fisher-combined sign-flip p-values (query level), beside the paper's gaps
    (``paper=False``: no paper numbers, for sensitivity runs)."""
    lines = [
        f"| B | Hit@2 {a} | Hit@2 {b} | ΔHit@2 pp (paper) | p Fisher (per seed) | "
        f"Recall {a} | Recall {b} | ΔRecall pp (paper) | p Fisher (per seed) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for budget in sorted(rows["budget"].unique()):
        cells = [str(int(budget))]
        sub = rows[rows["budget"] == budget]
        for metric in ("hit2", "recall"):
            diff, ptext = _fisher(rows, a, b, metric, int(budget))
            ref = _paper("overlap-disjoint", int(budget), f"{metric}_gap") if paper else None
            ref_s = f"{100 * ref:+.1f}" if ref is not None else "–"
            cells += [
                f"{sub.loc[sub['method'] == a, metric].mean():.3f}",
                f"{sub.loc[sub['method'] == b, metric].mean():.3f}",
                f"{100 * diff:+.1f} ({ref_s})",
                ptext,
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_table(rows: pd.DataFrame) -> str:
    """Markdown: mean Recall / Hit@2 per method and budget (seeds pooled)."""
    g = rows.groupby(["method", "budget"], sort=False)[["recall", "hit2"]].mean().reset_index()
    budgets = sorted(g["budget"].unique())
    lines = ["| method | " + " | ".join(f"R / H2 @{b}" for b in budgets) + " |"]
    lines.append("|---|" + "---|" * len(budgets))
    for m, sub in g.groupby("method", sort=False):
        v = sub.set_index("budget")
        cells = [f"{v.loc[b, 'recall']:.3f} / {v.loc[b, 'hit2']:.3f}" for b in budgets]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def sweep_table(
    rows: pd.DataFrame, pairs: Sequence[tuple[str, str, str]], budgets: Sequence[int]
) -> str:
    """Markdown: per setting ``(label, a, b)`` and budget, ``a − b`` Hit@2 / Recall gaps
    (pp) with the Fisher-combined per-seed sign-flip p of the Hit@2 gap."""
    from osumem.evaluate.stats import format_p, paired_differences, seed_combined_p

    lines = ["| setting | " + " | ".join(f"ΔH2 / ΔR pp @{b} (p H2)" for b in budgets) + " |"]
    lines.append("|---|" + "---|" * len(budgets))
    for label, a, b in pairs:
        cells = []
        for budget in budgets:
            dh = paired_differences(rows, a, b, "hit2", budget=int(budget))
            dr = paired_differences(rows, a, b, "recall", budget=int(budget))
            cells.append(
                f"{100 * dh['d'].mean():+.1f} / {100 * dr['d'].mean():+.1f} "
                f"({format_p(seed_combined_p(dh))})"
            )
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def membership_lines(member: pd.DataFrame, *, paper: bool = True) -> list[str]:
    """Markdown: evidence-OSU membership per mode (mean, median, share in no OSU, mean
    per view), beside the paper's numbers when ``paper``."""
    from osumem.evaluate.membership import membership_table
    from osumem.osu.config import VIEWS

    table = membership_table(member).set_index("mode")
    head = "| construction | mean | median | evidence in no OSU | "
    head += " | ".join(f"mean {v}" for v in VIEWS) + " |"
    lines = [head, "|---|---|---|---|" + "---|" * len(VIEWS)]
    for mode in ("overlap", "disjoint"):
        if mode not in table.index:
            continue
        r = table.loc[mode]
        ref = (
            (
                f" ({_paper(f'membership_{mode}', None, 'mean'):.2f})",
                f" ({_paper(f'membership_{mode}', None, 'median'):.0f})",
                f" ({_paper(f'membership_{mode}', None, 'share_none'):.1%})",
            )
            if paper
            else ("", "", "")
        )
        lines.append(
            f"| {mode} | {r['mean_osus']:.2f}{ref[0]} | {r['median_osus']:.0f}{ref[1]} | "
            f"{r['share_no_osu']:.1%}{ref[2]} | "
            + " | ".join(f"{r[f'mean_{v}']:.2f}" for v in VIEWS)
            + " |"
        )
    return lines


def routing_line(reach: pd.DataFrame) -> str:
    """The default OSU-Mem's coarse-routing recall (overlap pool) per budget."""
    from osumem.evaluate.reach import reach_table

    t = reach_table(reach)
    t = t[t["mode"] == "overlap"]
    vals = ", ".join(
        f"B={int(b)}: {v:.3f}" for b, v in zip(t["budget"], t["p_reach_empirical"], strict=True)
    )
    return f"Default coarse-to-fine OSU-Mem coarse-routing recall (paper < .17): {vals}"


def params_membership_path(results: Path, rows: str) -> Path:
    """Where the evidence-OSU membership of a sensitivity run under its method
    parameters is written (not a file :func:`~osumem.report.build.build_report` reads:
    :func:`summary_markdown` presents it)."""
    from osumem.evaluate.osu_analysis import ANALYSIS_DIR

    return Path(results) / ANALYSIS_DIR / f"{rows}_params_membership.parquet"


def _read(results: Path, name: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The rows and metadata of row file ``name`` in ``results``."""
    return (
        pd.read_parquet(results / f"{name}.parquet"),
        json.loads((results / f"{name}.json").read_text()),
    )


def summary_markdown(results: Path, spec: Any) -> str:
    """The ToolBench summary (ours beside the paper's) from a results directory written
    by :func:`osumem.bench.reproduce.reproduce` for ``spec``: the main table
    (experiment role ``main``), the β sweep (``beta_sweep``, its ``grid``), the
    evidence-size sweep (``evidence_sweep``, one row file per k) and the labelled
    sensitivity runs (``sensitivity``, titled by their label)."""
    from osumem.evaluate.osu_analysis import analysis_paths

    results = Path(results)
    by_role: dict[str, list[Any]] = {}
    for e in spec.experiments:
        by_role.setdefault(e.role, []).append(e)
    main_exp = by_role["main"][0]
    budgets = list(main_exp.budgets)
    main, meta = _read(results, main_exp.row_file)
    cfg, stats, seeds = meta["config"], meta["construction"], meta["seeds"]
    rpath, mpath = analysis_paths(results, main_exp.row_file)
    member, reach = pd.read_parquet(mpath), pd.read_parquet(rpath)
    flat = main[main["method"] == "flat"].groupby("budget")["recall"].mean()
    parts = [
        "# ToolBench planted-evidence probe: ours beside the paper",
        "",
        f"Seeds {list(seeds)}, {cfg['n_episodes']} episodes each, k = {cfg['evidence_size']}, "
        f"β = .12, namespace_prefix = {cfg['namespace_prefix']}. Construction: "
        + ", ".join(f"{k} {v:.3g}" for k, v in stats.items()),
        "",
        "## Overlap − disjoint (coverage-guided, β = .12), beside the paper",
        "",
        gap_table(main, OVERLAP, DISJOINT),
        "",
        "## All methods (Recall / Hit@2)",
        "",
        summary_table(main),
        "",
        "Flat recall: "
        + ", ".join(
            f"B={b}: {flat.get(b, float('nan')):.3f}"
            + (f" (paper {ref:.3f})" if (ref := _paper("flat", b, "recall")) is not None else "")
            for b in budgets
        ),
        "",
        "## Evidence-OSU membership (paper in parentheses)",
        "",
        *membership_lines(member),
        "",
        routing_line(reach),
        "",
    ]
    for e in by_role.get("beta_sweep", []):
        rows, meta = _read(results, e.row_file)
        betas = e.grid["beta"]
        parts += [
            f"## β sweep ({meta['config']['n_episodes']} episodes per seed; overlap − disjoint)",
            "",
            sweep_table(
                rows,
                [(f"β={b}", f"{OVERLAP}[beta={b}]", f"{DISJOINT}[beta={b}]") for b in betas],
                budgets,
            ),
            "",
        ]
    ev = by_role.get("evidence_sweep", [])
    if ev:
        frames, sizes, n = [], [], 0
        for e in ev:
            rows, meta = _read(results, e.row_file)
            k, n = meta["config"]["evidence_size"], meta["config"]["n_episodes"]
            sizes.append(k)
            frames.append(rows.assign(method=rows["method"] + f"@k{k}"))
        parts += [
            f"## Evidence-size sweep ({n} episodes per seed; overlap − disjoint)",
            "",
            sweep_table(
                pd.concat(frames, ignore_index=True),
                [(f"k={k}", f"{OVERLAP}@k{k}", f"{DISJOINT}@k{k}") for k in sizes],
                budgets,
            ),
            "",
        ]
    for e in by_role.get("sensitivity", []):
        rows, meta = _read(results, e.row_file)
        a, b = meta["methods"]
        s_member = pd.read_parquet(params_membership_path(results, e.row_file))
        parts += [
            f"## SENSITIVITY (not used to pick defaults): {e.title}",
            "",
            gap_table(rows, a, b, paper=False),
            "",
            *membership_lines(s_member, paper=False),
            "",
        ]
    return "\n".join(parts) + "\n"
