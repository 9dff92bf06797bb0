"""Retrieval metrics: Hit@1, Hit@2, Recall, recall by temporal distance.

Each metric is a :class:`Metric` object (in the spirit of ir_measures): its row column,
its display name and its per-query function of (evidence found, evidence total).
:data:`METRICS` lists them; per-query values are computed once, into result rows, and
every table reads the rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray

#: Temporal-distance buckets (steps between an evidence step and the query time).
DISTANCE_EDGES: tuple[int, ...] = (0, 50, 100, 200)


@dataclass(frozen=True)
class Metric:
    """A per-query retrieval metric.

    Attributes:
        key: the result-row column holding it.
        name: how tables and figures name it.
        of: its value for one query from ``(evidence steps found, evidence steps)``.
    """

    key: str
    name: str
    of: Callable[[int, int], float]

    def __str__(self) -> str:
        return self.name


def Hit(k: int) -> Metric:
    """Hit@k: 1 when at least ``k`` evidence steps were retrieved (a query with fewer
    than ``k`` evidence steps cannot hit at ``k``)."""
    return Metric(f"hit{k}", f"Hit@{k}", lambda found, total: float(found >= k))


#: Recall: the fraction of the query's evidence steps retrieved (0 without evidence).
Recall = Metric("recall", "Recall", lambda found, total: found / total if total else 0.0)

#: Every metric the result rows carry, in table order.
METRICS: dict[str, Metric] = {m.key: m for m in (Recall, Hit(1), Hit(2))}


def metric_name(key: str) -> str:
    """The display name of a metric column (the key itself when it is no metric)."""
    m = METRICS.get(key)
    return m.name if m is not None else key


@dataclass(frozen=True)
class QueryScore:
    """Per-query metric values and the per-evidence detail behind them."""

    hit1: float
    hit2: float
    recall: float
    n_evidence: int
    n_found: int
    ev_distance: tuple[int, ...]
    ev_found: tuple[bool, ...]


def score_query(selected: NDArray[np.int64], evidence: Sequence[int], t: int) -> QueryScore:
    """Score one retrieval against its evidence.

    Hit@k is 1 when at least ``k`` evidence steps are among the selected ones (a query
    with fewer than ``k`` evidence steps cannot hit at ``k``); Recall is the fraction
    of evidence retrieved. A position listed twice in ``evidence`` counts once.
    """
    ev = list(dict.fromkeys(int(e) for e in evidence))
    chosen = set(np.asarray(selected).tolist())  # a handful of evidence steps: a set beats isin
    found = tuple(e in chosen for e in ev)
    n_found = sum(found)
    n_ev = len(ev)
    return QueryScore(
        hit1=METRICS["hit1"].of(n_found, n_ev),
        hit2=METRICS["hit2"].of(n_found, n_ev),
        recall=METRICS["recall"].of(n_found, n_ev),
        n_evidence=n_ev,
        n_found=n_found,
        ev_distance=tuple(int(t) - e for e in ev),
        ev_found=found,
    )


def distance_bucket_labels(edges: Sequence[int] = DISTANCE_EDGES) -> list[str]:
    """Readable labels of the distance buckets, e.g. ``"0-49"``, ``"200+"``."""
    labels = [f"{lo}-{hi - 1}" for lo, hi in itertools.pairwise(edges)]
    return [*labels, f"{edges[-1]}+"]


def recall_by_distance(rows: pd.DataFrame, edges: Sequence[int] = DISTANCE_EDGES) -> pd.DataFrame:
    """Recall per temporal-distance bucket, per method and budget, from result rows.

    Each evidence step counts once in its bucket (micro-average over evidence).
    """
    ex = rows[["method", "budget", "ev_distance", "ev_found"]].explode(["ev_distance", "ev_found"])
    ex = ex.dropna(subset=["ev_distance"])
    labels = distance_bucket_labels(edges)
    idx = np.searchsorted(np.asarray(edges), ex["ev_distance"].astype(int), side="right") - 1
    ex = ex.assign(bucket=pd.Categorical([labels[i] for i in idx], labels, ordered=True))
    ex["ev_found"] = ex["ev_found"].astype(float)
    out = ex.groupby(["method", "budget", "bucket"], observed=True)["ev_found"].agg(
        recall="mean", n="size"
    )
    return out.reset_index()


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean of every metric (:data:`METRICS`) and query count per method and budget."""
    g = rows.groupby(["method", "budget"], sort=False)
    out = g.agg(**{k: (k, "mean") for k in METRICS}, n=("recall", "size"))
    return out.reset_index()


def summary_json(rows: pd.DataFrame) -> dict[str, dict[str, dict[str, float]]]:
    """``{"method": {"budget": {"recall", "hit1", "hit2", "n"}}}`` as the CLI prints it."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for rec in summarise(rows).itertuples(index=False):
        out.setdefault(str(rec.method), {})[str(int(rec.budget))] = {
            **{k: round(float(getattr(rec, k)), 6) for k in METRICS},
            "n": int(rec.n),
        }
    return out
