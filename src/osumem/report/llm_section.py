"""The report section of the LLM evidence-selection stage: per-cell hard and soft
recall, OSU-Mem − Flat, with CIs, sign-flip p-values, Holm-corrected p-values and the
pooled comparison, the paper's numbers beside ours."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from osumem.evaluate.llm_metrics import LLM_METRICS, llm_cell_table
from osumem.evaluate.stats import N_PERMUTATIONS, format_p

#: The paper's LLM-stage numbers (tau-bench, B = 256): (metric, cell) → (Δ, p).
PAPER_LLM: dict[tuple[str, str], tuple[float | None, float | None]] = {
    ("llm_hard_recall", "T+E+"): (0.064, 0.025),
    ("llm_hard_recall", "T-E-"): (None, 0.65),
}

DEFINITIONS = (
    "Hard recall: the fraction of a query's evidence steps that the model names in its "
    'one greedy answer to "which steps carried out this task?" (a malformed answer '
    "selects nothing). Soft recall: the sum, over the query's evidence steps that were "
    "retrieved, of the model's P(yes) / (P(yes) + P(no)) for \"did step p carry out part "
    'of this task?", divided by the number of evidence steps. Both are at most the '
    "retrieval Recall of the same context."
)


def _paper(metric: str, cell: str) -> str:
    diff, p = PAPER_LLM.get((metric, cell), (None, None))
    parts = []
    if diff is not None:
        parts.append(f"{diff * 100:+.1f} pp")
    if p is not None:
        parts.append(f"p = {format_p(p)}")
    return ", ".join(parts) or "–"


def llm_section(
    rows: pd.DataFrame,
    *,
    budget: int | None = None,
    method: str = "osumem",
    baseline: str = "flat",
    info: Mapping[str, Any] | None = None,
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
) -> str:
    """Markdown for the stage's rows (those with ``llm_hard_recall``); empty when the
    rows carry no stage results. ``budget`` defaults to 256 when scored, else the
    smallest scored budget."""
    if "llm_hard_recall" not in rows.columns or rows["llm_hard_recall"].isna().all():
        return ""
    scored = rows[rows["llm_hard_recall"].notna()]
    budgets = sorted(int(b) for b in scored["budget"].unique())
    b = budget if budget is not None else (256 if 256 in budgets else budgets[0])
    tab = llm_cell_table(
        rows, budget=b, method=method, baseline=baseline,
        n_permutations=n_permutations, seed=seed,
    )  # fmt: skip
    at_b = scored[scored["budget"] == b]
    models = sorted(set(at_b["llm_model"].dropna()))
    ok = at_b["llm_parse_ok"].astype(bool)
    md = [
        f"### LLM evidence-selection stage ({method} − {baseline}, B = {b})",
        "",
        f"Model: {', '.join(models)}. {len(at_b)} contexts; malformed answers "
        f"{int((~ok).sum())} ({(~ok).mean():.1%}). {DEFINITIONS}",
        "",
        f"Per cell: paired sign-flip test ({n_permutations} permutations, two-sided), "
        "bootstrap 95% CI of the mean difference, Holm's correction across the cells; "
        "`all` is the pooled, uncorrected test. Retrieval Recall of the same contexts "
        "for reference.",
        "",
        f"| metric | cell | n | {baseline} | {method} | Δ pp | 95% CI pp | p | p (Holm) | paper |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in tab.itertuples(index=False):
        md.append(
            f"| {LLM_METRICS.get(r.metric, r.metric)} | {r.cell} | {r.n} | "
            f"{r.baseline_mean:.3f} | {r.method_mean:.3f} | {r.diff * 100:+.1f} | "
            f"[{r.ci_low * 100:+.1f}, {r.ci_high * 100:+.1f}] | {format_p(r.p)} | "
            f"{format_p(r.p_holm)} | {_paper(r.metric, r.cell)} |"
        )
    rec = at_b.groupby("method")["recall"].mean()
    md.append("")
    md.append(
        "Retrieval Recall of these contexts: "
        + ", ".join(f"{m} {rec[m]:.3f}" for m in (baseline, method) if m in rec)
        + "."
    )
    if info:
        keys = ("contexts", "wall_s", "cpu_s", "load_s", "prompt_tokens", "generated_tokens")
        md.append("Run: " + ", ".join(f"{k} {info[k]}" for k in keys if k in info) + ".")
    return "\n".join(md) + "\n"
