"""The ToolBench tables (SPEC §6.3, §8): main overlap-vs-disjoint table, β sweep,
evidence-size sweep, evidence-OSU membership/eviction and coarse-routing recall,
each beside the paper's numbers. Everything is computed from per-query rows except
the two construction diagnostics (membership, routing), which read the OSU pools.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

OVERLAP = "osumem_coverage"
DISJOINT = "osumem_coverage_disjoint"

#: The paper's ToolBench numbers (SPEC §8), for the side-by-side tables.
PAPER = {
    "gap_hit2_pp": {200: 6.2, 400: 4.8, 800: 3.7, 1600: 3.8},
    "gap_recall_pp": {200: 2.7, 400: 3.7, 800: 2.1, 1600: 1.6},
    "flat_recall": {200: 0.686, 1600: 0.917},
    "membership_mean": {"overlap": 2.16, "disjoint": 0.87},
    "membership_median": {"overlap": 2.0, "disjoint": 1.0},
    "evicted": {"overlap": 0.0, "disjoint": 0.132},
    "routing_recall_below": 0.17,
}


def _p_per_seed(rows: pd.DataFrame, a: str, b: str, metric: str, budget: int) -> list[float]:
    from osumem.evaluate.stats import paired_differences, sign_flip_test

    d = paired_differences(rows, a, b, metric, budget=budget)
    return [sign_flip_test(g["d"].to_numpy()).p_value for _, g in d.groupby("seed", sort=True)]


def gap_table(rows: pd.DataFrame, a: str, b: str, paper: dict[str, dict[int, float]]) -> str:
    """Markdown: per budget, ``a − b`` Hit@2 and Recall gaps (pp) with per-seed and
    Fisher-combined sign-flip p-values (query level), beside the paper's gaps."""
    from osumem.evaluate.stats import fisher_combine, format_p, paired_test

    lines = [
        f"| B | Hit@2 {a} | Hit@2 {b} | ΔHit@2 pp (paper) | p Fisher (per seed) | "
        f"Recall {a} | Recall {b} | ΔRecall pp (paper) | p Fisher (per seed) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for budget in sorted(rows["budget"].unique()):
        cells = [str(int(budget))]
        for metric, key in (("hit2", "gap_hit2_pp"), ("recall", "gap_recall_pp")):
            sub = rows[rows["budget"] == budget]
            ma = sub.loc[sub["method"] == a, metric].mean()
            mb = sub.loc[sub["method"] == b, metric].mean()
            diff, _, _ = paired_test(rows, a, b, metric, budget=int(budget))
            per = _p_per_seed(rows, a, b, metric, int(budget))
            ref = paper.get(key, {}).get(int(budget))
            ref_s = f"{ref:+.1f}" if ref is not None else "–"
            cells += [
                f"{ma:.3f}",
                f"{mb:.3f}",
                f"{100 * diff:+.1f} ({ref_s})",
                f"{format_p(fisher_combine(per))} ({', '.join(format_p(p) for p in per)})",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_table(rows: pd.DataFrame) -> str:
    """Markdown: mean Recall / Hit@2 per method and budget (3-seed pooled)."""
    g = rows.groupby(["method", "budget"], sort=False)[["recall", "hit2"]].mean().reset_index()
    budgets = sorted(g["budget"].unique())
    head = "| method | " + " | ".join(f"R / H2 @{b}" for b in budgets) + " |"
    lines = [head, "|---|" + "---|" * len(budgets)]
    for m, sub in g.groupby("method", sort=False):
        vals = sub.set_index("budget")
        lines.append(
            f"| {m} | "
            + " | ".join(
                f"{vals.loc[b, 'recall']:.3f} / {vals.loc[b, 'hit2']:.3f}" for b in budgets
            )
            + " |"
        )
    return "\n".join(lines)


def reproduce(
    data: Path,
    out: Path,
    *,
    seeds: Sequence[int] = (42, 123, 456),
    episodes: int | None = None,
    sweep_episodes: int | None = None,
    budgets: Sequence[int] = (200, 400, 800, 1600),
    betas: Sequence[float] = (0.04, 0.08, 0.12, 0.16, 0.20),
    evidence_sizes: Sequence[int] = (2, 3, 4),
    jobs: int = -1,
    progress: bool = True,
    encoder: Any = None,
) -> str:
    """Run the main table (k = 3, β = .12), the β sweep and the evidence-size sweep;
    write rows ``toolbench.parquet``, ``toolbench_beta.parquet``,
    ``toolbench_evidence.parquet`` and ``toolbench.md`` under ``out``; return the
    Markdown."""
    from osumem.bench.toolbench import (
        ToolBenchConfig,
        build_corpus,
        construction_stats,
        evidence_membership,
        generate,
        routing_recall,
    )
    from osumem.embed import load_encoder
    from osumem.evaluate.runner import parse_method_runs, run, write_results
    from osumem.ingest.toolbench import read_toolbench

    out = Path(out)
    cfg = ToolBenchConfig()
    if episodes is not None:
        cfg = cfg.replace(n_episodes=episodes)
    sweep_n = sweep_episodes or cfg.n_episodes
    enc = encoder if encoder is not None else load_encoder()
    records = read_toolbench(data, signature_level=cfg.signature_level)
    corpus = build_corpus(records, enc, step_roles=cfg.step_roles, n_neighbors=cfg.n_neighbors)

    def episodes_for(c: ToolBenchConfig) -> list:
        return [(s, ep) for s in seeds for ep in generate(corpus, c, s)]

    def go(eps: list, methods: list[str], name: str, meta: dict[str, Any]) -> pd.DataFrame:
        rows = run(
            eps,
            parse_method_runs(methods),
            list(budgets),
            benchmark="toolbench",
            jobs=jobs,
            progress=progress,
        )
        write_results(out, rows, {**meta, "seeds": list(seeds)}, name=name)
        return rows

    parts: list[str] = ["# ToolBench planted-evidence probe (SPEC §6.3)", ""]
    main_eps = episodes_for(cfg)
    stats = construction_stats([ep for _, ep in main_eps])
    main = go(
        main_eps,
        ["flat", "osumem", OVERLAP, DISJOINT],
        "toolbench",
        {"config": cfg.__dict__, "construction": stats},
    )
    parts += [
        f"Seeds {list(seeds)}, {cfg.n_episodes} episodes each, k = {cfg.evidence_size}, "
        f"β = .12. Construction: " + ", ".join(f"{k} {v:.3g}" for k, v in stats.items()),
        "",
        "## Overlap − disjoint (coverage-guided, β = .12), beside the paper",
        "",
        gap_table(main, OVERLAP, DISJOINT, PAPER),
        "",
        "## All methods (Recall / Hit@2)",
        "",
        summary_table(main),
        "",
    ]
    flat = main[main["method"] == "flat"].groupby("budget")["recall"].mean()
    parts += [
        "Flat recall: "
        + ", ".join(
            f"B={b}: {flat.get(b, float('nan')):.3f}"
            + (f" (paper {PAPER['flat_recall'][b]:.3f})" if b in PAPER["flat_recall"] else "")
            for b in budgets
        ),
        "",
    ]
    eps_only = [ep for _, ep in main_eps]
    over = evidence_membership(eps_only, OVERLAP)
    disj = evidence_membership(eps_only, DISJOINT)
    parts += [
        "## Evidence-OSU membership",
        "",
        "| construction | mean (paper) | median (paper) | evidence in no OSU (paper) |",
        "|---|---|---|---|",
        f"| overlap M=5 | {over['mean']:.2f} (2.16) | {over['median']:.0f} (2) | "
        f"{over['share_none']:.1%} (0%) |",
        f"| disjoint M=1 | {disj['mean']:.2f} (.87) | {disj['median']:.0f} (1) | "
        f"{disj['share_none']:.1%} (13.2%) |",
        "",
    ]
    rr = routing_recall(eps_only, budgets)
    parts += [
        "Default coarse-to-fine OSU-Mem coarse-routing recall (paper < .17): "
        + ", ".join(f"B={b}: {v:.3f}" for b, v in rr.items()),
        "",
    ]
    sweep_cfg = cfg.replace(n_episodes=sweep_n)
    sweep_eps = main_eps if sweep_n == cfg.n_episodes else episodes_for(sweep_cfg)
    beta_methods = [f"{m}[beta={b}]" for b in betas for m in (OVERLAP, DISJOINT)]
    beta_rows = go(sweep_eps, beta_methods, "toolbench_beta", {"betas": list(betas)})
    parts += ["## β sweep (overlap − disjoint, pp)", ""]
    parts += _sweep_lines(
        beta_rows,
        [(f"β={b}", f"{OVERLAP}[beta={b}]", f"{DISJOINT}[beta={b}]") for b in betas],
        budgets,
    )
    ev_frames = []
    for k in evidence_sizes:
        k_eps = episodes_for(sweep_cfg.replace(evidence_size=k))
        rows = go(k_eps, ["flat", OVERLAP, DISJOINT], f"toolbench_evidence_k{k}", {"k": k})
        ev_frames.append(rows.assign(method=rows["method"] + f"@k{k}"))
    ev_rows = pd.concat(ev_frames, ignore_index=True)
    parts += ["", "## Evidence-size sweep (overlap − disjoint, pp)", ""]
    parts += _sweep_lines(
        ev_rows,
        [(f"k={k}", f"{OVERLAP}@k{k}", f"{DISJOINT}@k{k}") for k in evidence_sizes],
        budgets,
    )
    text = "\n".join(parts) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "toolbench.md").write_text(text)
    return text


def _sweep_lines(
    rows: pd.DataFrame, pairs: Sequence[tuple[str, str, str]], budgets: Sequence[int]
) -> list[str]:
    from osumem.evaluate.stats import format_p, paired_test

    head = "| setting | " + " | ".join(f"ΔH2 / ΔR @{b} (p H2)" for b in budgets) + " |"
    lines = [head, "|---|" + "---|" * len(budgets)]
    for label, a, b in pairs:
        cells = []
        for budget in budgets:
            dh, ph, _ = paired_test(rows, a, b, "hit2", budget=int(budget))
            dr, _, _ = paired_test(rows, a, b, "recall", budget=int(budget))
            cells.append(f"{100 * dh:+.1f} / {100 * dr:+.1f} ({format_p(ph)})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines
