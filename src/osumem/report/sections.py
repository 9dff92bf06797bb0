"""Report sections: each turns result rows into one Markdown table (p-values from
:mod:`osumem.evaluate.stats`, the paper's numbers from :mod:`osumem.report.paper`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from osumem.evaluate.crosstab import crosstab
from osumem.evaluate.defaults import N_PERMUTATIONS
from osumem.evaluate.methods import ResolvedMethod, read_method_table
from osumem.evaluate.metrics import metric_name, recall_by_distance, summarise
from osumem.evaluate.stats import (
    Prefetch,
    TestResult,
    compare,
    episode_differences,
    format_p,
    interaction_test,
    paired_differences,
    paired_test,
    precompute,
    resolve_threads,
    seed_combined_p,
    seed_groups,
)
from osumem.report.paper import paper_cell, paper_value
from osumem.types import CELLS


@dataclass(frozen=True, kw_only=True)
class ReportSettings:
    """What the report compares. Method names here are parameters, not special cases.

    Attributes:
        reference: the designated reference method (p-values are against it).
        baseline: the method the cell cross-tab and interaction test contrast with.
        reference_disjoint: the reference's disjoint (M_max = 1) variant.
        overlap, disjoint: the ToolBench overlap − disjoint pair.
        n_permutations: permutations per sign-flip test (paper: 10,000).
        seed: seed of every permutation test and bootstrap.
        jobs: threads for the permutation tests and bootstraps (-1: one per core);
            the report is the same for every value.
    """

    reference: str = "osumem"
    baseline: str = "flat"
    reference_disjoint: str = "osumem_disjoint"
    overlap: str = "osumem_coverage"
    disjoint: str = "osumem_coverage_disjoint"
    n_permutations: int = N_PERMUTATIONS
    seed: int = 0
    jobs: int = 1


def paper_benchmark(benchmark: str) -> str:
    """The key under which the paper's numbers for ``benchmark`` are stored."""
    b = benchmark.lower()
    # Sensitivity runs and sweeps get no paper numbers beside them: the paper's numbers
    # belong to its main configuration (tau-bench prefix-off / noise / observation-cut
    # checks; ToolBench beta and evidence-size sweeps and sensitivity runs).
    if b.startswith(("taubench_no", "taubench_obs", "toolbench_")):
        return b
    if "stage" in b or "augment" in b:
        return "taubench_staged"
    if "weak" in b:
        return "taubench_weak"
    for known in ("synthetic", "taubench", "toolbench"):
        if b.startswith(known):
            return known
    return b


MethodTable = Mapping[str, ResolvedMethod]


def methods_of(labels: Sequence[str], methods: MethodTable | None = None) -> MethodTable:
    """``methods`` (the rows' method table) when given, else ``labels`` resolved as
    specs (:func:`~osumem.evaluate.methods.read_method_table` without a table)."""
    return methods if methods is not None else read_method_table({}, labels)


def _paper_for(
    bench_key: str, info: ResolvedMethod, budget: int | None, metric: str, fmt: str = ".3f"
) -> str:
    """The paper's number for a method, only when it is configured like the registered
    method the paper reports (its alias)."""
    return "–" if info.alias is None else paper_cell(bench_key, info.alias, budget, metric, fmt)


def read_dir(results: Path) -> dict[str, pd.DataFrame]:
    """Every row file in ``results`` by its stem (benchmark name). Parquet files that
    are not per-query retrieval rows (no ``method``/``budget`` column) are skipped."""
    import pyarrow.parquet as pq

    out = {}
    for f in sorted(Path(results).glob("*.parquet")):
        if not {"method", "budget", "query"} <= set(pq.read_schema(f).names):
            continue
        out[f.stem] = pd.read_parquet(f)
    if not out:
        raise FileNotFoundError(f"no result rows (*.parquet) in {results}")
    return out


def comparison_section(
    rows: pd.DataFrame,
    exp_methods: list[str],
    *,
    reference: str,
    budget: int,
    bench_key: str,
    settings: ReportSettings,
    metrics: tuple[str, ...] = ("recall", "hit2"),
    methods: MethodTable | None = None,
) -> str:
    """Methods × metrics at one budget, paper beside ours, p-values against the
    reference (episode level first: the paper's n is episodes; query level beside).
    ``methods``: the rows' method table (resolved from the labels when absent)."""
    sub = rows[rows["method"].isin(exp_methods) & (rows["budget"] == budget)]
    if sub.empty or reference not in set(sub["method"].unique().tolist()):
        return f"_No rows for the reference {reference!r} at B = {budget}._\n"
    cmp = compare(
        sub,
        reference=reference,
        budget=budget,
        metrics=metrics,
        n_permutations=settings.n_permutations,
        seed=settings.seed,
        jobs=settings.jobs,
    ).table
    means = summarise(sub).set_index("method")
    info = methods_of(sub["method"].unique().tolist(), methods)
    head = ["method"]
    for m in metrics:
        head += [f"{metric_name(m)}", "paper"]
    for m in metrics:
        head += [f"p {metric_name(m)} (episode)", f"p {metric_name(m)} (query)"]
    head += ["paper p", "queries"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method in [m for m in exp_methods if m in means.index]:
        mi = info[method]
        name = mi.display()
        cells = [f"**{name}**" if method == reference else name]
        for m in metrics:
            cells += [f"{means.loc[method, m]:.3f}", _paper_for(bench_key, mi, budget, m)]
        for m in metrics:
            if method == reference:
                cells += ["ref", "ref"]
                continue
            r = cmp[(cmp["method"] == method) & (cmp["metric"] == m)].iloc[0]
            cells += [format_p(r["p_episode"]), format_p(r["p_query"])]
        pp = [_paper_for(bench_key, mi, budget, f"p_{m}", "p") for m in metrics]
        pp_text = " / ".join(pp) if any(p != "–" for p in pp) else "–"
        if pp_text == "–":
            pp_text = _paper_for(bench_key, mi, budget, "p_vs_reference")
        if method == reference:
            pp_text = _paper_for(bench_key, mi, budget, "p_vs_baselines")
        cells += [pp_text, str(int(means.loc[method, "n"]))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def sweep_section(
    rows: pd.DataFrame,
    exp_methods: list[str],
    *,
    reference: str,
    bench_key: str,
    settings: ReportSettings,
    metrics: tuple[str, ...] = ("recall", "hit2"),
    methods: MethodTable | None = None,
) -> str:
    """Per metric: methods × budgets, each cell "ours (episode-level p vs reference)",
    with the paper's number in brackets where it has one."""
    sub = rows[rows["method"].isin(exp_methods)]
    info = methods_of(sub["method"].unique().tolist(), methods)
    budgets = sorted(sub["budget"].unique())
    means = summarise(sub).set_index(["method", "budget"])
    present = set(sub["method"].unique().tolist())
    # per method and metric one join over every budget, split by budget: the same rows
    # in the same order as a join at each budget (a budget without pairs is left to
    # the join at that budget, which reports it)
    tested = [x for x in exp_methods if x in present and x != reference and reference in present]
    episodes: dict[tuple[str, str, int], pd.DataFrame] = {}
    with Prefetch(
        n_permutations=settings.n_permutations, seed=settings.seed, jobs=settings.jobs
    ) as pre:
        for m in metrics:
            for method in tested:
                d = paired_differences(sub, reference, method, m)
                at = d["budget"].to_numpy()
                for b in budgets:
                    if (method, b) in means.index and (at == b).any():
                        de = episode_differences(d[at == b])
                        episodes[(method, m, int(b))] = de
                        if pre.threads > 1:
                            pre.add(sign_flips=seed_groups(de))
    out = []
    for m in metrics:
        out.append(f"**{metric_name(m)}** — ours (p vs {reference}, episode level) [paper]\n")
        head = ["method", *[f"B={b}" for b in budgets]]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for method in [x for x in exp_methods if x in present]:
            cells = [info[method].display()]
            for b in budgets:
                if (method, b) not in means.index:
                    cells.append("–")
                    continue
                text = f"{means.loc[(method, b), m]:.3f}"
                if (method, m, int(b)) in episodes:
                    p = seed_combined_p(
                        episodes[(method, m, int(b))],
                        n_permutations=settings.n_permutations,
                        seed=settings.seed,
                    )
                    text += f" ({format_p(p)})"
                elif method != reference and reference in present:
                    _, p, _ = paired_test(
                        sub,
                        reference,
                        method,
                        m,
                        budget=int(b),
                        level="episode",
                        n_permutations=settings.n_permutations,
                        seed=settings.seed,
                    )
                    text += f" ({format_p(p)})"
                paper = _paper_for(bench_key, info[method], int(b), m)
                if paper != "–":
                    text += f" [{paper}]"
                cells.append(text)
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def efficiency_section(eff: pd.DataFrame) -> str:
    """Efficiency per embedding dimension: absolute numbers, ratios to the reference
    run beside them, and the paper's numbers."""
    out = []
    for dim, g in eff.groupby("dim", sort=False):
        key = f"efficiency-{dim}"
        out.append(f"**{dim}-d embeddings**\n")
        out.append(
            "| method | retrieve-only ms | × flat | amortised ms | × flat | paper ms "
            "(retrieve / amortised) | structure KB | storage KB | × flat | paper KB |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in g.itertuples(index=False):
            pm = f"{paper_cell(key, r.method, None, 'retrieve_ms', '.1f')} / " + paper_cell(
                key, r.method, None, "amortised_ms", ".1f"
            )
            out.append(
                f"| {r.method} | {r.retrieve_ms:.3f} | {r.retrieve_ms_ratio:.2f} | "
                f"{r.amortised_ms:.3f} | {r.amortised_ms_ratio:.2f} | {pm} | "
                f"{r.structure_kb:.1f} | {r.storage_kb:.1f} | {r.storage_kb_ratio:.2f} | "
                f"{paper_cell(key, r.method, None, 'storage_kb', '.0f')} |"
            )
        out.append("")
    return "\n".join(out)


def distance_section(rows: pd.DataFrame, budget: int) -> tuple[str, pd.DataFrame]:
    """Recall by temporal distance at one budget (methods × distance buckets)."""
    bd = recall_by_distance(rows[rows["budget"] == budget])
    wide = bd.pivot(index="method", columns="bucket", values="recall")
    n = bd.groupby("bucket", observed=True)["n"].first()
    wide = wide.reindex(rows["method"].unique().tolist())
    head = ["method", *[f"{b} (n={int(n[b])})" for b in wide.columns]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method, r in wide.iterrows():
        lines.append("| " + " | ".join([str(method), *[f"{v:.3f}" for v in r]]) + " |")
    return "\n".join(lines) + "\n", bd


def crosstab_section(rows: pd.DataFrame, *, bench_key: str, settings: ReportSettings) -> str:
    """Per cell and budget: OSU-Mem − baseline Hit@2 and Recall with query-level p,
    then the method × cell interaction test per budget."""
    ref, base = settings.reference, settings.baseline
    budgets = sorted(rows["budget"].unique())
    out = [
        f"Differences {ref} − {base} per cell (query level, sign-flip p in brackets); "
        "paper Hit@2 differences where given.\n",
        "| cell | n | "
        + " | ".join(f"B={b} Hit@2" for b in budgets)
        + " | "
        + " | ".join(f"B={b} Recall" for b in budgets)
        + " | paper Hit@2 Δ |",
        "|" + "---|" * (2 + 2 * len(budgets) + 1),
    ]
    per_b = {
        (int(b), m): paired_differences(rows, ref, base, m, budget=int(b))
        for b in budgets
        for m in ("hit2", "recall")
    }
    threads = resolve_threads(settings.jobs)
    if threads > 1:  # the cells' tests, computed on several threads and remembered
        precompute(
            sign_flips=[
                g
                for d in per_b.values()
                for cell in CELLS
                for g in seed_groups(d[(d["cell"] == cell).to_numpy()])
                if g.size
            ],
            n_permutations=settings.n_permutations,
            seed=settings.seed,
            jobs=threads,
        )

    def interaction_of(key: tuple[int, str]) -> TestResult:
        d = per_b[key]
        return interaction_test(
            d["d"].to_numpy(),
            d["cell"].to_numpy(),
            n_permutations=settings.n_permutations,
            seed=settings.seed,
        )

    keys = [(int(b), m) for b in budgets for m in ("hit2", "recall")]
    if threads > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=threads) as pool:
            inter = dict(zip(keys, pool.map(interaction_of, keys), strict=True))
    else:
        inter = {k: interaction_of(k) for k in keys}
    ct = crosstab(
        rows,
        method=ref,
        baseline=base,
        metrics=("hit2", "recall"),
        n_permutations=settings.n_permutations,
        seed=settings.seed,
    ).set_index(["cell", "metric", "budget"])
    for cell in CELLS:
        if (cell, "hit2", int(budgets[0])) not in ct.index:
            continue
        n = int(ct.loc[(cell, "hit2", int(budgets[0])), "n"])
        paper_n = paper_value(bench_key, cell, None, "n")
        cells = [cell, str(n) + (f" [{paper_n:.0f}]" if paper_n is not None else "")]
        for m in ("hit2", "recall"):
            for b in budgets:
                key = (cell, m, int(b))
                if key not in ct.index:
                    cells.append("–")
                    continue
                cells.append(f"{ct.loc[key, 'diff']:+.3f} ({format_p(ct.loc[key, 'p'])})")
        paper = [paper_cell(bench_key, cell, int(b), "hit2_gap", "+.3f") for b in budgets]
        cells.append(" / ".join(paper) if any(x != "–" for x in paper) else "–")
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out.append(
        f"Interaction test ({ref} − {base} per query, centred within cells; "
        f"statistic: size-weighted between-cell variance; {settings.n_permutations} "
        "sign flips).\n"
    )
    out.append("| budget | p Hit@2 | paper | p Recall | paper | cells |")
    out.append("|---|---|---|---|---|---|")
    for b in budgets:
        res = {m: inter[(int(b), m)] for m in ("hit2", "recall")}
        ncells = per_b[(int(b), "hit2")]["cell"].nunique()
        out.append(
            f"| {b} | {format_p(res['hit2'].p_value)} | "
            f"{paper_cell(bench_key, 'interaction', int(b), 'p_hit2', 'p')} | "
            f"{format_p(res['recall'].p_value)} | "
            f"{paper_cell(bench_key, 'interaction', int(b), 'p_recall', 'p')} | {ncells} |"
        )
    return "\n".join(out) + "\n"


def toolbench_section(
    rows: pd.DataFrame, *, settings: ReportSettings, bench_key: str = "toolbench"
) -> str:
    """Overlap − disjoint per budget, per-seed p-values Fisher-combined, paper beside."""
    ov, dj = settings.overlap, settings.disjoint
    budgets = sorted(rows["budget"].unique())
    out = [
        f"{ov} − {dj} (per-seed sign-flip p, Fisher-combined across "
        f"{rows['seed'].nunique()} seed(s)).\n",
        "| budget | Δ Hit@2 | p | paper | Δ Recall | p | paper |",
        "|---|---|---|---|---|---|---|",
    ]
    for b in budgets:
        cells = [str(b)]
        for m in ("hit2", "recall"):
            diff, p, _ = paired_test(
                rows,
                ov,
                dj,
                m,
                budget=int(b),
                n_permutations=settings.n_permutations,
                seed=settings.seed,
            )
            cells += [
                f"{diff:+.3f}",
                format_p(p),
                paper_cell(bench_key, "overlap-disjoint", int(b), f"{m}_gap", "+.3f"),
            ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def observed_overlap_section(rows: pd.DataFrame, budget: int, settings: ReportSettings) -> str:
    """What happened, to set beside the heuristic's prediction: at ``budget``, the
    reference against its disjoint variant and against the baseline, and the
    overlap − disjoint pair, where their rows exist (episode-level sign-flip p)."""
    have = set(rows["method"].unique().tolist())
    pairs = [
        (settings.reference, settings.reference_disjoint),
        (settings.overlap, settings.disjoint),
        (settings.reference, settings.baseline),
    ]
    lines = []
    for a, b in dict.fromkeys(pairs):
        if not {a, b} <= have:
            continue
        parts = []
        for m in ("hit2", "recall"):
            diff, p, n = paired_test(
                rows,
                a,
                b,
                m,
                budget=budget,
                level="episode",
                n_permutations=settings.n_permutations,
                seed=settings.seed,
            )
            parts.append(f"{metric_name(m)} {diff:+.3f} (p {format_p(p)})")
        lines.append(f"- {a} − {b}: " + ", ".join(parts) + f"; {n} episodes")
    if not lines:
        return ""
    return f"Observed at B = {budget} (episode level):\n\n" + "\n".join(lines) + "\n"
