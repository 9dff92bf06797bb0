"""Flat + MMR (SPEC §5): maximal marginal relevance over the flat cosine ranking."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from osumem.errors import ConfigError
from osumem.retrieve.base import Retriever, RetrieverConfig, greedy_pack
from osumem.types import IntArray


@dataclass(frozen=True, kw_only=True)
class MMRConfig(RetrieverConfig):
    """``mmr_lambda`` (λ, paper .7) weighs relevance against redundancy:
    score = λ·cos(q, h_i) − (1 − λ)·max_{j selected} cos(h_i, h_j)."""

    mmr_lambda: float = 0.7

    def __post_init__(self) -> None:
        if not 0.0 <= self.mmr_lambda <= 1.0:
            raise ConfigError(f"flat_mmr.mmr_lambda must be in [0, 1], got {self.mmr_lambda}")


class FlatMMR(Retriever):
    """Flat + MMR: greedy selection by λ-weighted relevance minus redundancy.

    With λ = 1 it selects exactly what Flat Vector selects.
    """

    name = "flat_mmr"
    Config = MMRConfig

    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        assert self.view_ is not None
        cfg: MMRConfig = self.config  # type: ignore[assignment]
        cand = self._flat_order(q, limit)
        H = self.view_.embeddings[cand]
        lam = cfg.mmr_lambda
        relevance = lam * (H @ q).astype(np.float64)
        if lam == 1.0:
            return greedy_pack(relevance, cand, self.view_.costs, budget)
        max_sim = np.full(cand.shape[0], -np.inf)

        def on_pick(j: int) -> NDArray[np.float64]:
            nonlocal max_sim
            sims = (H @ H[j]).astype(np.float64)
            new_max = np.maximum(max_sim, sims)
            old = np.where(np.isfinite(max_sim), max_sim, 0.0)
            delta = -(1.0 - lam) * (new_max - old)
            max_sim = new_max
            return delta

        return greedy_pack(relevance, cand, self.view_.costs, budget, on_pick)
