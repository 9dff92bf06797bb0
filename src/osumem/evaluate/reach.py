"""Coarse-stage diagnostics and reachability (the paper's Propositions 4.1/4.2).

``p_v`` is the empirical probability that an evidence step is reached through view
``v``: one of its view-``v`` OSUs is kept by the coarse stage (a step with no view-``v``
OSU is not reached through ``v``). Under the independence model the overlap pool
reaches an evidence step with P = 1 − Π_v (1 − p_v); the assumption-free union bound is
P ≥ max_v p_v. Both are set beside the empirical reach (the step is in any kept OSU).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from osumem.evaluate.membership import DEFAULT_MODES, queries_by_time
from osumem.osu.config import VIEWS
from osumem.retrieve.budget import check_budget
from osumem.retrieve.osumem import OSUMem
from osumem.retrieve.registry import create
from osumem.types import Episode


@dataclass(frozen=True)
class CoarseDiagnostics:
    """The coarse stage of one query.

    Attributes:
        k: K, the number of OSUs the budget allows.
        osus: one row per kept OSU, best first: ``rank, osu, view, key, score, size,
            cost, n_evidence``.
        evidence: one row per evidence step: ``step, n_osus, views, in_kept,
            kept_views``.
        routing_recall: share of evidence steps inside some kept OSU.
    """

    k: int
    osus: pd.DataFrame
    evidence: pd.DataFrame
    routing_recall: float


def coarse_diagnostics(
    retriever: OSUMem,
    query: NDArray[Any],
    budget: int,
    *,
    evidence: Sequence[int],
    before: int | None = None,
) -> CoarseDiagnostics:
    """Which OSUs a fitted :class:`OSUMem` keeps for ``query`` at ``budget``, their
    views, and whether each evidence step lies in a kept OSU (coarse routing recall)."""
    view, pool = retriever.fitted_view, retriever.fitted_pool
    b = check_budget(budget)
    limit = view.n if before is None else max(0, min(int(before), view.n))
    q = view.check_query(query)
    ev = np.asarray([e for e in evidence if 0 <= e < limit], dtype=np.int64)
    coarse = retriever.coarse(q, b, limit, ev)
    members = coarse.members
    names = pool.view_names()
    csr = members.tocsr()
    kept_set = set(coarse.kept.tolist())
    ev_mask = np.zeros(members.shape[0], dtype=bool)
    ev_mask[ev] = True
    osu_rows = []
    for rank, u in enumerate(coarse.kept.tolist()):
        mem = members.indices[members.indptr[u] : members.indptr[u + 1]]
        osu_rows.append(
            {
                "rank": rank,
                "osu": u,
                "view": names[u],
                "key": pool.keys[u],
                "score": float(coarse.scores[u]),
                "size": int(mem.size),
                "cost": int(view.costs[mem].sum()),
                "n_evidence": int(ev_mask[mem].sum()),
            }
        )
    ev_rows = []
    for e in ev.tolist():
        osus = csr.indices[csr.indptr[e] : csr.indptr[e + 1]].tolist()
        kept = [u for u in osus if u in kept_set]
        ev_rows.append(
            {
                "step": e,
                "n_osus": len(osus),
                "views": tuple(sorted({names[u] for u in osus})),
                "in_kept": bool(kept),
                "kept_views": tuple(sorted({names[u] for u in kept})),
            }
        )
    ev_df = pd.DataFrame(ev_rows, columns=["step", "n_osus", "views", "in_kept", "kept_views"])
    recall = float(ev_df["in_kept"].mean()) if len(ev_df) else float("nan")
    return CoarseDiagnostics(coarse.k, pd.DataFrame(osu_rows), ev_df, recall)


def _evidence_reach(
    retriever: OSUMem, names: NDArray[np.object_], query: NDArray[Any], budget: int, evidence: Any
) -> tuple[int, list[tuple[int, set[str], set[str]]]]:
    """``(K, [(step, views, kept_views)])``: the evidence rows of
    :func:`coarse_diagnostics` (same steps, same sets) without building its tables."""
    view = retriever.fitted_view
    b = check_budget(budget)
    limit = view.n
    q = view.check_query(query)
    ev = np.asarray([e for e in evidence if 0 <= e < limit], dtype=np.int64)
    coarse = retriever.coarse(q, b, limit, ev)
    csr = coarse.members.tocsr()
    kept_set = set(coarse.kept.tolist())
    out = []
    for e in ev.tolist():
        osus = csr.indices[csr.indptr[e] : csr.indptr[e + 1]].tolist()
        out.append((e, {names[u] for u in osus}, {names[u] for u in osus if u in kept_set}))
    return coarse.k, out


def episode_reach_rows(
    episode: Episode,
    budgets: Sequence[int],
    modes: Mapping[str, Mapping[str, Any]] = DEFAULT_MODES,
    *,
    method: str = "osumem",
    seed: int = 0,
    pools: Mapping[tuple[Any, int], tuple[Any, float]] | None = None,
) -> list[dict[str, Any]]:
    """:func:`reach_rows` of one episode, as records. ``pools`` maps ``(construction
    settings, query time)`` to a pool already built on that prefix of this episode with
    ``seed`` (what :func:`osumem.evaluate.runner.evaluate_episode` fills); a pool found
    there is used instead of building it again."""
    rows: list[dict[str, Any]] = []
    for t, queries in queries_by_time(episode):
        prefix = episode.view.prefix(t)
        for mode, changes in modes.items():
            r = create(method, {k: str(v) for k, v in changes.items()}, seed=seed)
            if not isinstance(r, OSUMem):
                raise TypeError(f"reach_rows: {method!r} is not a coarse-to-fine OSU-Mem")
            shared = None if pools is None else pools.get((r.state_key(), t))
            if shared is not None:
                r.load_state(prefix, shared[0])
            else:
                r.fit(prefix)
            names = r.fitted_pool.view_names()
            for q in queries:
                for b in budgets:
                    k, ev_rows = _evidence_reach(r, names, q.vector, b, q.evidence)
                    for step, views, kept_views in ev_rows:
                        rows.append(
                            {
                                "mode": mode,
                                "budget": int(b),
                                "episode": episode.episode_id,
                                "query": q.qid,
                                "cell": q.cell,
                                "step": step,
                                "k": k,
                                "reached": bool(kept_views),
                                **{f"via_{v}": v in kept_views for v in VIEWS},
                                **{f"has_{v}": v in views for v in VIEWS},
                            }
                        )
    return rows


def reach_rows(
    episodes: Iterable[Episode],
    budgets: Sequence[int],
    modes: Mapping[str, Mapping[str, Any]] = DEFAULT_MODES,
    *,
    method: str = "osumem",
    seed: int = 0,
) -> pd.DataFrame:
    """One row per (mode, budget, evidence step): whether the step is reached through
    each view (``via_entity`` …) and at all (``reached``) by the coarse stage of
    ``method`` configured with each mode's overrides (the evidence rows of
    :func:`coarse_diagnostics` for every query and budget)."""
    rows: list[dict[str, Any]] = []
    for episode in episodes:
        rows += episode_reach_rows(episode, budgets, modes, method=method, seed=seed)
    return pd.DataFrame(rows)


def reach_table(reach: pd.DataFrame) -> pd.DataFrame:
    """Per (mode, budget) of reach rows: evidence steps, empirical p_v per view,
    P_reach under the independence model 1 − Π_v(1 − p_v), the union bound max_v p_v,
    the empirical reach (= coarse routing recall: share of evidence inside a kept OSU)
    and mean K."""
    cols = ["mode", "budget", "n_evidence", *(f"p_{v}" for v in VIEWS)]
    cols += ["p_reach_independence", "p_reach_union_bound", "p_reach_empirical", "mean_k"]
    if reach.empty:
        return pd.DataFrame(columns=cols)
    out = []
    for (mode, b), g in reach.groupby(["mode", "budget"], sort=False):
        p = np.array([g[f"via_{v}"].mean() for v in VIEWS], dtype=float)
        out.append(
            [
                mode,
                int(b),
                len(g),
                *p.tolist(),
                float(1.0 - np.prod(1.0 - p)),
                float(p.max()),
                float(g["reached"].mean()),
                float(g["k"].mean()),
            ]
        )
    return pd.DataFrame(out, columns=cols)


def reachability(
    episodes: Iterable[Episode],
    budgets: Sequence[int],
    modes: Mapping[str, Mapping[str, Any]] = DEFAULT_MODES,
    *,
    method: str = "osumem",
    seed: int = 0,
) -> pd.DataFrame:
    """:func:`reach_table` of :func:`reach_rows`."""
    return reach_table(reach_rows(episodes, budgets, modes, method=method, seed=seed))
