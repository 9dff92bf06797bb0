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
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from osumem.evaluate.defaults import BUDGETS, TOOLBENCH_METHODS, TOOLBENCH_SEEDS

OVERLAP = "osumem_coverage"
DISJOINT = "osumem_coverage_disjoint"
MAIN_METHODS: tuple[str, ...] = TOOLBENCH_METHODS


def _paper(item: str, budget: int | None, metric: str) -> float | None:
    """The paper's ToolBench number (one table for the whole project: report.paper)."""
    from osumem.report.paper import paper_value

    return paper_value("toolbench", item, budget, metric)


@dataclass(frozen=True, kw_only=True)
class Sensitivity:
    """A labelled sensitivity run of overlap vs disjoint: ``bench_changes`` go to
    :class:`~osumem.bench.toolbench.ToolBenchConfig`, ``method_params`` to both
    coverage-guided methods (and to the OSU construction of the membership table)."""

    name: str
    label: str
    bench_changes: Mapping[str, Any] = field(default_factory=dict)
    method_params: Mapping[str, Any] = field(default_factory=dict)


#: Sensitivity runs (never used to pick defaults): the tau-bench prefixing rule
#: applied to ToolBench, the similarity view over every step (so no evidence step can be
#: left without an OSU under overlap, as the paper reports), and Δ_gap = 16 (Δ_ent = 128 ≥ the ~126-step evidence spacing,
#: Δ_tool = 32, Δ_sg = 16), which lets entity OSUs link evidence steps.
DEFAULT_SENSITIVITY: tuple[Sensitivity, ...] = (
    Sensitivity(
        name="toolbench_sens_prefix_on",
        label="namespace prefix on (the tau-bench concatenation rule)",
        bench_changes={"namespace_prefix": True},
    ),
    Sensitivity(
        name="toolbench_sens_similarity_all",
        label="similarity view over every step (similarity_scope = all)",
        method_params={"similarity_scope": "all"},
    ),
    Sensitivity(
        name="toolbench_sens_gap16",
        label="Δ_gap = 16 (Δ_ent 128, Δ_tool 32, Δ_sg 16)",
        method_params={"gap": 16},
    ),
)


def _label(method: str, params: Mapping[str, Any]) -> str:
    """The inline method spec ``method[k=v;k=v]`` that
    :func:`~osumem.evaluate.runner.parse_method_runs` reads back."""
    if not params:
        return method
    return f"{method}[{';'.join(f'{k}={v}' for k, v in params.items())}]"


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


def _membership(
    episodes: Sequence[tuple[int, Any]], modes: Mapping[str, Mapping[str, Any]], jobs: int
) -> pd.DataFrame:
    """Evidence-membership rows (no reach) for ``(seed, episode)`` pairs, in parallel."""
    from joblib import Parallel, delayed

    from osumem.evaluate.membership import membership_rows

    parts = Parallel(n_jobs=jobs)(
        delayed(membership_rows)([ep], modes, seed=s) for s, ep in episodes
    )
    return pd.concat(parts, ignore_index=True)


def reproduce(
    data: Path,
    out: Path,
    *,
    seeds: Sequence[int] = TOOLBENCH_SEEDS,
    episodes: int | None = None,
    sweep_episodes: int | None = 100,
    budgets: Sequence[int] = BUDGETS["toolbench"],
    betas: Sequence[float] = (0.04, 0.08, 0.12, 0.16, 0.20),
    evidence_sizes: Sequence[int] = (2, 3, 4),
    sensitivity: Sequence[Sensitivity] = DEFAULT_SENSITIVITY,
    jobs: int = -1,
    progress: bool = True,
    encoder: Any = None,
    report: bool = True,
    config: Any = None,
) -> str:
    """Run the main table (k = 3, β = .12, ``episodes`` per seed, default 200), the β
    and evidence-size sweeps (``sweep_episodes`` per seed, default 100; ``None`` = the
    main size) and the ``sensitivity`` runs (main size); write the row files
    ``toolbench*.parquet``, the membership/reach analysis, ``toolbench_summary.md``,
    ``toolbench_timings.json`` and (``report``) ``report.md`` with the summary appended.
    ``config`` is the base :class:`~osumem.bench.toolbench.ToolBenchConfig` (default:
    the paper's probe). Returns the summary Markdown."""
    from osumem.bench.toolbench import ToolBenchConfig, build_corpus, construction_stats, generate
    from osumem.embed import load_encoder
    from osumem.evaluate.membership import DEFAULT_MODES
    from osumem.evaluate.methods import TABLE_KEY, method_table
    from osumem.evaluate.osu_analysis import write_osu_analysis
    from osumem.evaluate.runner import parse_method_runs, run, write_results
    from osumem.ingest.toolbench import read_toolbench

    started = time.perf_counter()
    timings: dict[str, float] = {}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = config if config is not None else ToolBenchConfig()
    if episodes is not None:
        cfg = cfg.replace(n_episodes=episodes)
    sweep_cfg = cfg.replace(n_episodes=sweep_episodes or cfg.n_episodes)
    enc = encoder if encoder is not None else load_encoder()
    records = read_toolbench(data, signature_level=cfg.signature_level)
    corpus = build_corpus(records, enc, step_roles=cfg.step_roles, n_neighbors=cfg.n_neighbors)

    def episodes_for(c: ToolBenchConfig) -> list:
        return [(s, ep) for s in seeds for ep in generate(corpus, c, s)]

    def go(eps: list, methods: Sequence[str], name: str, meta: dict[str, Any]) -> pd.DataFrame:
        t0 = time.perf_counter()
        runs = parse_method_runs(list(methods))
        rows = run(
            eps,
            runs,
            list(budgets),
            benchmark=name,
            jobs=jobs,
            progress=progress,
        )
        timings[f"{name}_s"] = round(time.perf_counter() - t0, 1)
        write_results(
            out,
            rows,
            {
                **meta,
                "seeds": list(seeds),
                "methods": list(methods),
                TABLE_KEY: method_table(runs),
            },
            name=name,
        )
        return rows

    main_eps = episodes_for(cfg)
    stats = construction_stats([ep for _, ep in main_eps])
    main = go(main_eps, MAIN_METHODS, "toolbench", {"config": cfg.to_dict(), "construction": stats})
    t0 = time.perf_counter()
    write_osu_analysis(out, "toolbench", main_eps, budgets, jobs=jobs)
    timings["toolbench_analysis_s"] = round(time.perf_counter() - t0, 1)
    member = pd.read_parquet(out / "analysis" / "toolbench_membership.parquet")
    reach = pd.read_parquet(out / "analysis" / "toolbench_reach.parquet")
    flat = main[main["method"] == "flat"].groupby("budget")["recall"].mean()
    parts = [
        "# ToolBench planted-evidence probe: ours beside the paper",
        "",
        f"Seeds {list(seeds)}, {cfg.n_episodes} episodes each, k = {cfg.evidence_size}, "
        f"β = .12, namespace_prefix = {cfg.namespace_prefix}. Construction: "
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
    sweep_eps = main_eps if sweep_cfg == cfg else episodes_for(sweep_cfg)
    beta_methods = [f"{m}[beta={b}]" for b in betas for m in (OVERLAP, DISJOINT)]
    beta_rows = go(sweep_eps, beta_methods, "toolbench_beta", {"betas": list(betas)})
    parts += [
        f"## β sweep ({sweep_cfg.n_episodes} episodes per seed; overlap − disjoint)",
        "",
        sweep_table(
            beta_rows,
            [(f"β={b}", f"{OVERLAP}[beta={b}]", f"{DISJOINT}[beta={b}]") for b in betas],
            budgets,
        ),
        "",
    ]
    ev_frames = []
    for k in evidence_sizes:
        k_eps = episodes_for(sweep_cfg.replace(evidence_size=k))
        rows = go(k_eps, ["flat", OVERLAP, DISJOINT], f"toolbench_k{k}", {"k": k})
        ev_frames.append(rows.assign(method=rows["method"] + f"@k{k}"))
    ev_rows = pd.concat(ev_frames, ignore_index=True)
    parts += [
        f"## Evidence-size sweep ({sweep_cfg.n_episodes} episodes per seed; overlap − disjoint)",
        "",
        sweep_table(
            ev_rows,
            [(f"k={k}", f"{OVERLAP}@k{k}", f"{DISJOINT}@k{k}") for k in evidence_sizes],
            budgets,
        ),
        "",
    ]
    for sens in sensitivity:
        s_cfg = cfg.replace(**dict(sens.bench_changes))
        s_eps = main_eps if s_cfg == cfg else episodes_for(s_cfg)
        a, b = _label(OVERLAP, sens.method_params), _label(DISJOINT, sens.method_params)
        rows = go(s_eps, [a, b], sens.name, {"sensitivity": sens.label, "config": s_cfg.to_dict()})
        modes = {m: {**ch, **sens.method_params} for m, ch in DEFAULT_MODES.items()}
        s_member = _membership(s_eps, modes, jobs)
        parts += [
            f"## SENSITIVITY (not used to pick defaults): {sens.label}",
            "",
            gap_table(rows, a, b, paper=False),
            "",
            *membership_lines(s_member, paper=False),
            "",
        ]
    summary = "\n".join(parts) + "\n"
    (out / "toolbench_summary.md").write_text(summary)
    if report:
        from osumem.report.build import ReportSettings, build_report

        t0 = time.perf_counter()
        path = build_report(out, settings=ReportSettings())
        with path.open("a", encoding="utf-8") as fh:
            fh.write("\n" + summary)
        timings["report_s"] = round(time.perf_counter() - t0, 1)
    timings["total_s"] = round(time.perf_counter() - started, 1)
    (out / "toolbench_timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    return summary
