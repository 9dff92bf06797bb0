"""Coverage-Aware baseline: cosine plus a β bonus for a new subgoal."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from osumem.frozen import Constraints, Interval, Symbols
from osumem.retrieve.base import Retriever, RetrieverConfig
from osumem.retrieve.groups import label_codes
from osumem.retrieve.packing import greedy_pack
from osumem.types import IntArray, MemoryView


@dataclass(frozen=True, kw_only=True)
class CoverageConfig(RetrieverConfig):
    """``subgoal_bonus`` (β, ours: .12, the value the paper uses for OSU coverage) is
    added to a step's cosine while its subgoal is not yet covered by a selected step.
    Steps without a subgoal never get the bonus. β = 0 is Flat Vector."""

    subgoal_bonus: float = 0.12

    config_name = "coverage"
    parameter_constraints: ClassVar[Constraints] = {
        "subgoal_bonus": Interval(float, 0, math.inf, closed="left")
    }
    parameter_symbols: ClassVar[Symbols] = {"subgoal_bonus": "β"}


class CoverageAware(Retriever[CoverageConfig]):
    """Coverage-Aware greedy: score = cos(q, h_i) + β·[subgoal(i) not yet covered],
    picked greedily under the shared first-fit rule; picking a step removes the bonus
    from every step of its subgoal."""

    name = "coverage"
    Config = CoverageConfig

    def _build(self, view: MemoryView) -> None:
        self.subgoal_codes_ = label_codes(view.subgoals)

    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        view = self.fitted_view
        beta = float(self.config.subgoal_bonus)
        cand = self._flat_order(q, limit)
        cos = self._cosines(q, limit)[cand].astype(np.float64)
        if beta == 0.0:
            return greedy_pack(cos, cand, view.costs, budget)
        codes = self.subgoal_codes_[cand]
        covered: set[int] = set()

        def on_pick(j: int) -> NDArray[np.float64] | None:
            s = int(codes[j])
            if s < 0 or s in covered:
                return None
            covered.add(s)
            return np.where(codes == s, -beta, 0.0)

        return greedy_pack(cos + beta * (codes >= 0), cand, view.costs, budget, on_pick)
