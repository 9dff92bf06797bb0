"""Figures as PNG (matplotlib, Agg backend): budget-vs-metric curves and recall by
temporal distance. Each function writes one file and returns its path."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from osumem.evaluate.metrics import metric_name, summarise


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: ``paper(method, budget, metric)`` → the paper's number or ``None``.
PaperLookup = Callable[[str, int, str], float | None]


def colours(methods: Sequence[str]) -> dict[str, object]:
    """One fixed colour per method, by its position in ``methods`` (the same method
    gets the same colour in every figure built from the same order)."""
    plt = _plt()
    palette = list(plt.get_cmap("tab10").colors) + list(plt.get_cmap("Dark2").colors)
    palette += list(plt.get_cmap("Set1").colors)
    return {m: palette[i % len(palette)] for i, m in enumerate(dict.fromkeys(methods))}


def budget_curves(
    rows: pd.DataFrame,
    path: Path,
    *,
    metrics: Sequence[str] = ("recall", "hit2"),
    title: str = "",
    paper: PaperLookup | None = None,
    labels: Mapping[str, str] | None = None,
) -> Path:
    """One panel per metric: the metric against the budget, a line per method (legend
    text from ``labels``, default the method label); the paper's numbers, where
    ``paper`` has them, as open stars in the method's colour."""
    plt = _plt()
    s = summarise(rows)
    colour = colours(rows["method"].unique().tolist())
    any_paper = False
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for method, g in s.groupby("method", sort=False):
            g = g.sort_values("budget")
            c = colour.get(str(method))
            ax.plot(
                g["budget"],
                g[metric],
                marker="o",
                label=(labels or {}).get(str(method), str(method)),
                color=c,
            )
            if paper is None:
                continue
            for b in g["budget"]:
                v = paper(str(method), int(b), metric)
                if v is not None:
                    any_paper = True
                    ax.plot([b], [v], marker="*", markersize=13, mfc="none", color=c, ls="")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(s["budget"].unique()))
        ax.set_xticklabels([str(b) for b in sorted(s["budget"].unique())])
        ax.set_xlabel("token budget B")
        ax.set_ylabel(metric_name(metric))
        ax.grid(alpha=0.3)
    if any_paper:
        axes[0][-1].plot([], [], marker="*", mfc="none", color="grey", ls="", label="paper")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def distance_bars(
    by_distance: pd.DataFrame,
    path: Path,
    *,
    title: str = "",
    order: Sequence[str] | None = None,
) -> Path:
    """Grouped bars: recall per temporal-distance bucket, a bar per method (in
    ``order``, coloured as in :func:`budget_curves` for the same order)."""
    plt = _plt()
    wide = by_distance.pivot(index="bucket", columns="method", values="recall")
    present = set(wide.columns)
    methods = [m for m in (order or by_distance["method"]) if m in present]
    wide = wide[list(dict.fromkeys(methods))]
    colour = colours(list(order) if order is not None else list(wide.columns))
    fig, ax = plt.subplots(figsize=(8, 4))
    wide.plot.bar(ax=ax, rot=0, width=0.85, color=[colour[m] for m in wide.columns])
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
