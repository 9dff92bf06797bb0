"""Metrics and statistics of the LLM evidence-selection stage.

Per query (one retrieved context, one model):

* **hard recall** — the fraction of the query's evidence steps that the model names in
  its selection answer: ``|selected ∩ E| / |E|``. Evidence the retriever missed cannot
  be selected, so hard recall ≤ retrieval recall. A malformed answer selects nothing.
* **soft recall** — the expected hard recall if the model picked each shown step
  independently with its relevance score ``s_p = P(yes) / (P(yes) + P(no))``:
  ``Σ_{e ∈ E ∩ shown} s_e / |E|`` (missed evidence scores 0). It reads the model's
  graded belief instead of its one greedy answer.

Both average over queries like retrieval Recall. Per cell T±E±, ``method − baseline``
is tested with the paired sign-flip test of :mod:`osumem.evaluate.stats` (per seed,
Fisher-combined), with a bootstrap 95% CI of the mean difference and Holm's correction
across the cells that have queries; the pooled test (all queries together) is shown
beside them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from osumem.evaluate.stats import N_PERMUTATIONS, bootstrap_ci, paired_differences, paired_test
from osumem.types import CELLS

#: Row columns the stage adds (the per-query rows of the retrieval run).
LLM_COLUMNS: tuple[str, ...] = (
    "llm_model",
    "llm_hard_recall",
    "llm_soft_recall",
    "llm_selected",
    "llm_scores",
    "llm_parse_ok",
    "llm_answer",
    "llm_s",
)
LLM_METRICS: dict[str, str] = {"llm_hard_recall": "hard recall", "llm_soft_recall": "soft recall"}
CELL_TABLE_COLUMNS: tuple[str, ...] = (
    "metric",
    "cell",
    "n",
    "method_mean",
    "baseline_mean",
    "diff",
    "ci_low",
    "ci_high",
    "p",
    "p_holm",
)


def _unique(evidence: Sequence[int]) -> list[int]:
    return list(dict.fromkeys(int(e) for e in evidence))


def hard_recall(selected: Sequence[int], evidence: Sequence[int]) -> float:
    """``|selected ∩ E| / |E|`` (0 for no evidence); repeated positions count once."""
    ev = _unique(evidence)
    if not ev:
        return 0.0
    return len(set(ev) & {int(s) for s in selected}) / len(ev)


def soft_recall(scores: Mapping[int, float], evidence: Sequence[int]) -> float:
    """``Σ_{e ∈ E} score(e) / |E|`` with ``score = 0`` for evidence not shown."""
    ev = _unique(evidence)
    if not ev:
        return 0.0
    return float(sum(float(scores.get(e, 0.0)) for e in ev) / len(ev))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (step-down, monotone, capped at 1); NaN
    entries are not part of the family and stay NaN."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    m = idx.size
    if m == 0:
        return out.tolist()
    order = idx[np.argsort(p[idx], kind="stable")]
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out[order] = np.minimum(adjusted, 1.0)
    return out.tolist()


def llm_cell_table(
    rows: pd.DataFrame,
    *,
    budget: int,
    method: str = "osumem",
    baseline: str = "flat",
    metrics: Sequence[str] = tuple(LLM_METRICS),
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
) -> pd.DataFrame:
    """``method − baseline`` per cell and metric at ``budget``, plus a pooled row
    (``cell = "all"``, whose ``p_holm`` is NaN: it is the uncorrected comparison).

    Only rows scored by the stage (non-NaN metric) take part.
    """
    sub = rows[(rows["budget"] == budget) & rows["method"].isin([method, baseline])]
    out = []
    for metric in metrics:
        scored = sub[sub[metric].notna()] if metric in sub.columns else sub.iloc[:0]
        if scored.empty:
            continue
        per_cell: list[dict[str, Any]] = []
        for cell in (*CELLS, "all"):
            part = scored if cell == "all" else scored[scored["cell"] == cell]
            if part.empty or part["method"].nunique() < 2:
                continue
            d = paired_differences(part, method, baseline, metric, budget=budget)
            if d.empty:
                continue
            _, p, n = paired_test(
                part, method, baseline, metric, budget=budget,
                n_permutations=n_permutations, seed=seed,
            )  # fmt: skip
            lo, hi = bootstrap_ci(d["d"].to_numpy(), seed=seed)
            per_cell.append(
                {
                    "metric": metric,
                    "cell": cell,
                    "n": n,
                    "method_mean": float(d[metric].mean()),
                    "baseline_mean": float(d[f"{metric}_b"].mean()),
                    "diff": float(d["d"].mean()),
                    "ci_low": lo,
                    "ci_high": hi,
                    "p": p,
                }
            )
        cells = [r for r in per_cell if r["cell"] != "all"]
        for r, adj in zip(cells, holm([r["p"] for r in cells]), strict=True):
            r["p_holm"] = adj
        for r in per_cell:
            r.setdefault("p_holm", float("nan"))
        out.extend(per_cell)
    return pd.DataFrame(out, columns=list(CELL_TABLE_COLUMNS))
