"""Figures as PNG (matplotlib, Agg backend): budget-vs-metric curves and recall by
temporal distance. Each function writes one file and returns its path."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from osumem.evaluate.metrics import summarise


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def budget_curves(
    rows: pd.DataFrame, path: Path, *, metrics: Sequence[str] = ("recall", "hit2"), title: str = ""
) -> Path:
    """One panel per metric: the metric against the budget, a line per method."""
    plt = _plt()
    s = summarise(rows)
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4), squeeze=False)
    names = {"recall": "Recall", "hit1": "Hit@1", "hit2": "Hit@2"}
    for ax, metric in zip(axes[0], metrics, strict=True):
        for method, g in s.groupby("method", sort=False):
            g = g.sort_values("budget")
            ax.plot(g["budget"], g[metric], marker="o", label=str(method))
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(s["budget"].unique()))
        ax.set_xticklabels([str(b) for b in sorted(s["budget"].unique())])
        ax.set_xlabel("token budget B")
        ax.set_ylabel(names.get(metric, metric))
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def distance_bars(by_distance: pd.DataFrame, path: Path, *, title: str = "") -> Path:
    """Grouped bars: recall per temporal-distance bucket, a bar per method."""
    plt = _plt()
    wide = by_distance.pivot(index="bucket", columns="method", values="recall")
    wide = wide[list(dict.fromkeys(by_distance["method"]))]
    fig, ax = plt.subplots(figsize=(8, 4))
    wide.plot.bar(ax=ax, rot=0, width=0.85)
    ax.set_xlabel("steps between evidence and query")
    ax.set_ylabel("Recall")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3, axis="y")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
