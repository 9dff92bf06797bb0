"""Flat + MMR: maximal marginal relevance over the flat cosine ranking."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Self

import numpy as np
from numpy.typing import NDArray

from osumem.frozen import Constraints, Interval, Symbols
from osumem.retrieve.base import Retriever, RetrieverConfig
from osumem.retrieve.packing import FLAT_HEAD_MIN, greedy_pack
from osumem.types import IntArray, MemoryView


@dataclass(frozen=True, kw_only=True)
class MMRConfig(RetrieverConfig):
    """``mmr_lambda`` (λ, paper .7) weighs relevance against redundancy:
    score = λ·cos(q, h_i) − (1 − λ)·max_{j selected} cos(h_i, h_j).

    ``head_ratio``: the greedy runs over the head of the flat cosine ranking holding
    ``head_ratio``·B tokens and at least ``FLAT_HEAD_MIN`` (256) steps (0: over every
    visible step), so a query costs
    O(n + head) instead of a sort and a redundancy update over all n steps; budget the
    head cannot use is filled first fit from the rest of the ranking.
    """

    mmr_lambda: float = 0.7
    head_ratio: float = 8.0

    config_name = "flat_mmr"
    parameter_constraints: ClassVar[Constraints] = {
        "mmr_lambda": Interval(float, 0, 1),
        "head_ratio": Interval(float, 0, None),
    }
    parameter_symbols: ClassVar[Symbols] = {"mmr_lambda": "λ"}


class FlatMMR(Retriever[MMRConfig]):
    """Flat + MMR: greedy selection by λ-weighted relevance minus redundancy.

    With λ = 1 it selects exactly what Flat Vector selects.
    """

    name = "flat_mmr"
    Config = MMRConfig

    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        view = self.fitted_view
        cfg = self.config
        if cfg.head_ratio > 0:
            cand = self._flat_head(q, limit, cfg.head_ratio * budget, min_count=FLAT_HEAD_MIN)
        else:
            cand = self._flat_order(q, limit)
        H = view.embeddings[cand]
        lam = cfg.mmr_lambda
        costs = view.costs
        relevance = lam * (H @ q).astype(np.float64)
        if lam == 1.0:
            chosen = greedy_pack(relevance, cand, costs, budget)
            return self._fill(q, limit, budget, cand, chosen)
        max_sim = np.full(cand.shape[0], -np.inf)

        def on_pick(j: int) -> NDArray[np.float64]:
            nonlocal max_sim
            sims = (H @ H[j]).astype(np.float64)
            new_max = np.maximum(max_sim, sims)
            old = np.where(np.isfinite(max_sim), max_sim, 0.0)
            delta = -(1.0 - lam) * (new_max - old)
            max_sim = new_max
            return delta

        chosen = greedy_pack(relevance, cand, costs, budget, on_pick)
        return self._fill(q, limit, budget, cand, chosen)

    def _fill(
        self, q: NDArray[np.float32], limit: int, budget: int, head: IntArray, chosen: IntArray
    ) -> IntArray:
        """Budget the head could not use goes to the rest of the flat ranking, first
        fit (so λ = 1 selects exactly what Flat Vector selects)."""
        view = self.fitted_view
        costs = view.costs
        left = budget - int(costs[chosen].sum())
        if left <= 0 or head.shape[0] >= limit:
            return chosen
        return np.concatenate([chosen, self._flat_pack(q, limit, left, exclude=head)])

    def update(self, view: MemoryView) -> Self:
        """Flat + MMR keeps no structure but the step index: extend, do not rebuild."""
        self.view_ = view
        return self
