"""No LT Memory and Flat Vector."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

import numpy as np
from numpy.typing import NDArray

from osumem.retrieve.base import Retriever, RetrieverConfig
from osumem.types import IntArray, MemoryView


@dataclass(frozen=True, kw_only=True)
class NoMemoryConfig(RetrieverConfig):
    """No LT Memory has no parameters."""


class NoMemory(Retriever[NoMemoryConfig]):
    """No LT Memory: returns an empty context."""

    name = "no_memory"
    Config = NoMemoryConfig

    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        return np.empty(0, dtype=np.int64)


@dataclass(frozen=True, kw_only=True)
class FlatConfig(RetrieverConfig):
    """Flat Vector has no parameters."""


class FlatVector(Retriever[FlatConfig]):
    """Flat Vector: steps by descending cosine ``h_i^T q``, packed first-fit (only the
    head of the ranking that the budget can reach is sorted)."""

    name = "flat"
    Config = FlatConfig

    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        return self._flat_pack(q, limit, budget)

    def update(self, view: MemoryView) -> Self:
        """Flat Vector keeps no structure but the step index: extend, do not rebuild."""
        self.view_ = view
        return self
