"""The cell cross-tab as data: method − baseline per cell T±E± and budget,
with paired sign-flip p-values, and the method × cell interaction test per budget.

The tests themselves live in :mod:`osumem.evaluate.stats`; this module only arranges
their results into DataFrames (the report's Markdown cross-tab is
:func:`osumem.report.sections.crosstab_section`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from osumem.evaluate.defaults import N_PERMUTATIONS
from osumem.evaluate.stats import (
    fisher_combine,
    interaction_test,
    paired_differences,
    seed_combined_p,
)
from osumem.types import CELLS

CROSSTAB_COLUMNS: tuple[str, ...] = (
    "cell",
    "budget",
    "metric",
    "n",
    "method_mean",
    "baseline_mean",
    "diff",
    "p",
)
INTERACTION_COLUMNS: tuple[str, ...] = ("budget", "metric", "statistic", "p", "n", "n_cells")


def crosstab(
    rows: pd.DataFrame,
    *,
    method: str = "osumem",
    baseline: str = "flat",
    metrics: Sequence[str] = ("hit2", "recall"),
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
) -> pd.DataFrame:
    """``method − baseline`` per cell, budget and metric (query level).

    Returns one row per (cell, budget, metric) with a query in that cell, columns
    :data:`CROSSTAB_COLUMNS`: ``n`` paired queries, both means, ``diff`` (their
    difference) and ``p`` (two-sided paired sign-flip test, per seed, Fisher-combined).
    Cells are in the order T+E+, T+E−, T−E+, T−E−; budgets ascending.

    Raises:
        InvalidInputError: when either method has no rows at some budget.
    """
    out = []
    for b in sorted(int(x) for x in rows["budget"].unique()):
        for m in metrics:
            d = paired_differences(rows, method, baseline, m, budget=b)
            for cell in CELLS:
                dc = d[d["cell"] == cell]
                if dc.empty:
                    continue
                out.append(
                    {
                        "cell": cell,
                        "budget": b,
                        "metric": m,
                        "n": len(dc),
                        "method_mean": float(dc[m].mean()),
                        "baseline_mean": float(dc[f"{m}_b"].mean()),
                        "diff": float(dc["d"].mean()),
                        "p": seed_combined_p(dc, n_permutations=n_permutations, seed=seed),
                    }
                )
    df = pd.DataFrame(out, columns=list(CROSSTAB_COLUMNS))
    order = {c: i for i, c in enumerate(CELLS)}
    df = df.sort_values(
        ["metric", "cell", "budget"], key=lambda s: s.map(order) if s.name == "cell" else s
    )
    return df.reset_index(drop=True)


def interaction(
    rows: pd.DataFrame,
    *,
    method: str = "osumem",
    baseline: str = "flat",
    metrics: Sequence[str] = ("hit2", "recall"),
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
) -> pd.DataFrame:
    """The method × cell interaction test (:func:`osumem.evaluate.stats.interaction_test`)
    per budget and metric on the per-query ``method − baseline`` differences.

    With several seeds the per-seed p-values are Fisher-combined and ``statistic`` is
    the mean of the per-seed statistics. Columns :data:`INTERACTION_COLUMNS`.
    """
    out = []
    for b in sorted(int(x) for x in rows["budget"].unique()):
        for m in metrics:
            d = paired_differences(rows, method, baseline, m, budget=b)
            results = [
                interaction_test(
                    g["d"].to_numpy(),
                    g["cell"].to_numpy(),
                    n_permutations=n_permutations,
                    seed=seed,
                )
                for _, g in d.groupby("seed", sort=True)
            ]
            out.append(
                {
                    "budget": b,
                    "metric": m,
                    "statistic": float(np.mean([r.statistic for r in results])),
                    "p": fisher_combine([r.p_value for r in results]),
                    "n": len(d),
                    "n_cells": int(d["cell"].nunique()),
                }
            )
    return pd.DataFrame(out, columns=list(INTERACTION_COLUMNS))
