"""Recency baselines: Budget-Truncated Replay and Sliding Window."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from osumem.retrieve.base import Retriever, RetrieverConfig
from osumem.retrieve.groups import recency_order
from osumem.retrieve.packing import pack_first_fit
from osumem.types import IntArray


@dataclass(frozen=True, kw_only=True)
class TruncatedReplayConfig(RetrieverConfig):
    """Budget-Truncated Replay has no parameters."""


class TruncatedReplay(Retriever[TruncatedReplayConfig]):
    """Budget-Truncated Replay: the most recent steps that fit in ``B`` tokens.

    Walks backwards from the query time and packs first-fit (a step too large for
    what is left is skipped and the walk continues), so the result is the most recent
    steps that fit.
    """

    name = "truncated_replay"
    Config = TruncatedReplayConfig

    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        view = self.fitted_view
        return pack_first_fit(recency_order(limit), view.costs, budget)


@dataclass(frozen=True, kw_only=True)
class SlidingWindowConfig(RetrieverConfig):
    """Sliding Window has no parameters: its window is W = ⌊B / mean step cost⌋
    (mean over the visible steps), at least one step (our choice)."""


def window_size(budget: int, mean_cost: float) -> int:
    """W = ⌊B / mean step cost⌋, at least 1."""
    if mean_cost <= 0:
        return 1
    return max(1, math.floor(budget / mean_cost))


class SlidingWindow(Retriever[SlidingWindowConfig]):
    """Sliding Window: the last W steps, W = ⌊B / mean step cost⌋, packed first-fit
    most recent first (a window costlier than B loses its oldest steps that do not
    fit; unlike Replay it never reaches back beyond the window)."""

    name = "sliding_window"
    Config = SlidingWindowConfig

    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        view = self.fitted_view
        costs = view.costs
        w = window_size(budget, float(costs[:limit].mean()))
        return pack_first_fit(recency_order(limit, max(0, limit - w)), costs, budget)
