"""Plain-text and Markdown tables from result rows."""

from __future__ import annotations

import pandas as pd

from osumem.evaluate.metrics import METRICS, metric_name, summarise


def summary_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """Methods × (budget, metric) frame of Recall, Hit@1, Hit@2 in row order."""
    s = summarise(rows)
    wide = s.pivot(index="method", columns="budget", values=["recall", "hit1", "hit2"])
    wide = wide.swaplevel(0, 1, axis=1).sort_index(axis=1, level=0, sort_remaining=False)
    order = rows["method"].unique().tolist()
    metrics = list(METRICS)
    budgets = sorted(s["budget"].unique())
    cols = [(b, m) for b in budgets for m in metrics]
    return wide.reindex(index=order, columns=pd.MultiIndex.from_tuples(cols))


def summary_table(rows: pd.DataFrame) -> str:
    """The Recall / Hit@1 / Hit@2 table per method and budget as aligned text."""
    frame = summary_frame(rows)
    header1 = ["method"] + [f"B={b}" for b, _ in frame.columns]
    header2 = [""] + [metric_name(m) for _, m in frame.columns]
    body = [[str(idx)] + [f"{v:.3f}" for v in frame.loc[idx]] for idx in frame.index]
    n = (
        rows.groupby("method", sort=False).size()
        // rows.groupby("method", sort=False)["budget"].nunique()
    )
    body = [[*r, str(int(n[r[0]]))] for r in body]
    header1.append("queries")
    header2.append("")
    table = [header1, header2, *body]
    widths = [max(len(r[i]) for r in table) for i in range(len(header1))]
    lines = []
    for r_i, r in enumerate(table):
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
        if r_i == 1:
            lines.append("-" * len(lines[-1]))
    return "\n".join(lines)
