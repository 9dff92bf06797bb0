"""One method against Flat and the structured variants, per benchmark × budget × cell.

Reads per-query result rows (the runner's output) and, for every benchmark, budget and
cell (``all`` plus each T±E± cell present), reports the mean Hit@2 and Recall of the
method and of each baseline, their difference ``method − baseline`` and the episode-level
sign-flip p-value, Fisher-combined over seeds (:func:`osumem.evaluate.stats.paired_test`).
The *bar* a default retrieval must clear against Flat is checked by :func:`check_bar`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from osumem.errors import InvalidInputError
from osumem.evaluate.metrics import metric_name
from osumem.evaluate.stats import N_PERMUTATIONS, format_p, paired_test

#: The cell label used for "every query".
ALL_CELLS = "all"
#: A difference below this (in metric units: −1 pp) fails the bar even when not
#: significant.
MAX_LOSS = -0.01
#: Significance level of the bar.
ALPHA = 0.05


@dataclass(frozen=True)
class CompareReport:
    """The comparison table and what it was computed from.

    ``table`` columns: ``benchmark``, ``budget``, ``cell``, ``baseline``, ``metric``,
    ``method_mean``, ``baseline_mean``, ``diff`` (method − baseline), ``p`` (episode
    level, Fisher-combined over seeds), ``n_queries``, ``n_episodes``.
    """

    method: str
    baselines: tuple[str, ...]
    table: pd.DataFrame
    n_permutations: int

    def to_markdown(self, baseline: str | None = None) -> str:
        """The table as Markdown, one line per benchmark × budget × cell × baseline."""
        t = self.table if baseline is None else self.table[self.table["baseline"] == baseline]
        lines = [
            f"| benchmark | B | cell | n q / ep | vs | {self.method} Hit@2 | base | Δ Hit@2 (p) "
            f"| {self.method} Recall | base | Δ Recall (p) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        keys = ["benchmark", "budget", "cell", "baseline"]
        for key, g in t.groupby(keys, sort=False):
            m = {r.metric: r for r in g.itertuples(index=False)}
            h, r = m.get("hit2"), m.get("recall")
            if h is None or r is None:
                continue
            lines.append(
                f"| {key[0]} | {key[1]} | {key[2]} | {h.n_queries} / {h.n_episodes} | {key[3]} "
                f"| {h.method_mean:.3f} | {h.baseline_mean:.3f} | {h.diff:+.3f} ({format_p(h.p)}) "
                f"| {r.method_mean:.3f} | {r.baseline_mean:.3f} | {r.diff:+.3f} ({format_p(r.p)}) |"
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: the rows of the table plus the bar's failures."""
        return {
            "method": self.method,
            "baselines": list(self.baselines),
            "n_permutations": self.n_permutations,
            "rows": self.table.to_dict(orient="records"),
            "bar_failures": check_bar(self),
        }


def _cells(rows: pd.DataFrame) -> list[str]:
    cells = sorted(c for c in rows["cell"].dropna().unique() if c)
    return [ALL_CELLS, *cells] if len(cells) > 1 else [ALL_CELLS]


def compare_rows(
    rows: pd.DataFrame,
    *,
    method: str,
    baselines: Sequence[str],
    metrics: Sequence[str] = ("hit2", "recall"),
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
) -> CompareReport:
    """Compare ``method`` with each of ``baselines`` on every benchmark × budget × cell
    in ``rows``; episode-level sign-flip tests, Fisher-combined over seeds."""
    present = set(rows["method"].unique())
    missing = [m for m in (method, *baselines) if m not in present]
    if missing:
        raise InvalidInputError(f"compare: no result rows for method(s) {missing}")
    out: list[dict[str, Any]] = []
    for bench, brows in rows.groupby("benchmark", sort=False):
        for budget in sorted(brows["budget"].unique()):
            at_b = brows[brows["budget"] == budget]
            for cell in _cells(brows):
                sub = at_b if cell == ALL_CELLS else at_b[at_b["cell"] == cell]
                if sub.empty:
                    continue
                for base in baselines:
                    for metric in metrics:
                        mean_d, p, n_ep = paired_test(
                            sub,
                            method,
                            base,
                            metric,
                            budget=int(budget),
                            level="episode",
                            n_permutations=n_permutations,
                            seed=seed,
                        )
                        a = sub.loc[sub["method"] == method, metric]
                        b = sub.loc[sub["method"] == base, metric]
                        out.append(
                            {
                                "benchmark": bench,
                                "budget": int(budget),
                                "cell": cell,
                                "baseline": base,
                                "metric": metric,
                                "method_mean": float(a.mean()),
                                "baseline_mean": float(b.mean()),
                                "diff": float(a.mean() - b.mean()),
                                "episode_diff": mean_d,
                                "p": p,
                                "n_queries": int(a.shape[0]),
                                "n_episodes": n_ep,
                            }
                        )
    return CompareReport(method, tuple(baselines), pd.DataFrame(out), n_permutations)


def check_bar(
    report: CompareReport,
    *,
    baseline: str = "flat",
    alpha: float = ALPHA,
    max_loss: float = MAX_LOSS,
) -> list[str]:
    """Where ``method − baseline`` fails the bar on the ``all`` rows: a loss that is
    significant (p < ``alpha``) or larger than ``max_loss``. Empty when it clears."""
    t = report.table
    t = t[(t["baseline"] == baseline) & (t["cell"] == ALL_CELLS)]
    fails = []
    for r in t.itertuples(index=False):
        if (r.diff < 0 and r.p < alpha) or r.diff < max_loss:
            fails.append(
                f"{r.benchmark} B={r.budget} {metric_name(r.metric)}: "
                f"{r.diff:+.3f} (p {format_p(r.p)})"
            )
    return fails
