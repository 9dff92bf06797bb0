"""Disjoint Hierarchy baseline: disjoint subgoal partitions, selected by
centroid cosine, then top cosine within them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from osumem.frozen import Boolean, Constraints, Interval
from osumem.retrieve.base import Retriever, RetrieverConfig
from osumem.retrieve.groups import (
    coarse_k,
    coarse_to_fine,
    group_centroids,
    group_costs,
    label_codes,
    labels_to_incidence,
    with_fallback,
)
from osumem.retrieve.packing import pack_first_fit
from osumem.types import IntArray, MemoryView


@dataclass(frozen=True, kw_only=True)
class DisjointHierarchyConfig(RetrieverConfig):
    """Parameters (all ours; docs/decisions.md).

    * ``max_gap``: a subgoal's steps are split into separate partitions wherever two
      consecutive ones are more than this many positions apart (default 8, the floor
      of the paper's Δ_sg); ``None`` keeps one partition per subgoal label.
    * ``unlabeled_block``: steps with no subgoal are partitioned by position blocks of
      this many positions.
    * ``coarse_ratio``: ρ in K = ⌈ρ·B / mean partition cost⌉, the number of partitions
      kept by the coarse stage (the same rule as OSU-Mem).
    * ``fill_leftover``: budget the chosen partitions leave unused is filled from the
      flat cosine ranking (as OSU-Mem does).
    """

    max_gap: int | None = 8
    unlabeled_block: int = 20
    coarse_ratio: float = 2.0
    fill_leftover: bool = True

    config_name = "disjoint_hierarchy"
    parameter_constraints: ClassVar[Constraints] = {
        "max_gap": (Interval(int, 1, None), None),
        "unlabeled_block": Interval(int, 1, None),
        "coarse_ratio": Interval(float, 0, None, closed="neither"),
        "fill_leftover": Boolean(),
    }


def subgoal_partition(
    subgoals: NDArray[np.object_], *, max_gap: int | None, unlabeled_block: int
) -> IntArray:
    """One partition id per step, ids numbered by each partition's first position.

    Steps with the same subgoal label share a partition unless consecutive ones are
    more than ``max_gap`` positions apart; unlabeled steps are grouped by position
    blocks of ``unlabeled_block``.
    """
    codes = label_codes(subgoals)
    n = codes.shape[0]
    part = np.empty(n, dtype=np.int64)
    if n == 0:
        return part
    pos = np.arange(n, dtype=np.int64)
    lab = codes >= 0
    p, c = pos[lab], codes[lab]
    n_lab = 0
    if p.size:
        o = np.lexsort((p, c))
        ps, cs = p[o], c[o]
        new = np.ones(ps.shape[0], dtype=bool)
        new[1:] = cs[1:] != cs[:-1]
        if max_gap is not None:
            new[1:] |= (ps[1:] - ps[:-1]) > max_gap
        ids = np.cumsum(new) - 1
        part[ps] = ids
        n_lab = int(ids[-1]) + 1
    u = pos[~lab]
    if u.size:
        _, inv = np.unique(u // unlabeled_block, return_inverse=True)
        part[u] = n_lab + inv
    n_parts = int(part.max()) + 1
    first = np.full(n_parts, n, dtype=np.int64)
    np.minimum.at(first, part, pos)
    rank = np.empty(n_parts, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(n_parts)
    return rank[part]


class DisjointHierarchy(Retriever[DisjointHierarchyConfig]):
    """Disjoint Hierarchy: two levels, subgoal partitions over steps.

    Coarse: the top K partitions by centroid cosine (K = ⌈ρ·B / mean partition
    cost⌉); fine: their steps by descending cosine, packed first-fit; leftover budget
    from the flat ranking (``fill_leftover``).
    """

    name = "disjoint_hierarchy"
    Config = DisjointHierarchyConfig

    def _build(self, view: MemoryView) -> None:
        cfg = self.config
        self.partition_ = subgoal_partition(
            view.subgoals, max_gap=cfg.max_gap, unlabeled_block=cfg.unlabeled_block
        )
        self.members_ = labels_to_incidence(self.partition_)
        self.centroids_ = group_centroids(view.embeddings, self.members_)
        n_parts = self.members_.shape[0]
        self.first_ = np.full(n_parts, view.n, dtype=np.int64)
        np.minimum.at(self.first_, self.partition_, np.arange(view.n))
        self.costs_ = group_costs(view.costs, self.members_)

    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        view = self.fitted_view
        cfg = self.config
        costs = view.costs
        cos = self._cosines(q, limit)
        ok = self.first_ < limit
        if limit >= view.n:  # every step visible: the costs computed at build
            vis_cost = self.costs_[ok]
        else:
            vis_cost = group_costs(costs[:limit], self.members_[:, :limit])[ok]
        k = coarse_k(budget, float(vis_cost.mean()), cfg.coarse_ratio)
        cand, _ = coarse_to_fine(cos, self.centroids_ @ q, self.members_, k, group_ok=ok)
        if cfg.fill_leftover:
            cand = with_fallback(cand, np.argsort(-cos, kind="stable"), limit)
        return pack_first_fit(cand, costs, budget)
