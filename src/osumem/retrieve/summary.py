"""Periodic Summary baseline: a recent window plus one extractive summary
step per older chunk (no LLM at retrieval time)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
from numpy.typing import NDArray

from osumem.frozen import Boolean, Constraints, Interval, Options
from osumem.retrieve.base import Retriever, RetrieverConfig
from osumem.retrieve.groups import group_argmax, group_centroids, labels_to_incidence
from osumem.retrieve.packing import pack_first_fit
from osumem.types import FloatMatrix, IntArray, MemoryView


@dataclass(frozen=True, kw_only=True)
class PeriodicSummaryConfig(RetrieverConfig):
    """Parameters (paper: chunks of 20 steps, a recent window of half the budget; the
    rest ours, docs/decisions.md).

    * ``chunk_size``: older steps are cut into chunks of this many positions, counted
      from position 0 (a chunk cut by the recent window keeps its older part).
    * ``recent_fraction``: the recent window is the longest run of latest steps whose
      cost fits in ⌊fraction·B⌋.
    * ``summary_order``: how chunk summaries compete for the rest of the budget:
      ``"query"`` by the cosine of the chunk centroid with the query (a summary stands
      for its chunk), ``"recency"`` newest chunk first.
    * ``fill_leftover``: budget left after the summaries goes on walking back from the
      window (most recent first), as Replay would.
    """

    chunk_size: int = 20
    recent_fraction: float = 0.5
    summary_order: Literal["query", "recency"] = "query"
    fill_leftover: bool = True

    config_name = "periodic_summary"
    parameter_constraints: ClassVar[Constraints] = {
        "chunk_size": Interval(int, 1, None),
        "recent_fraction": Interval(float, 0, 1),
        "summary_order": Options(("query", "recency")),
        "fill_leftover": Boolean(),
    }


def central_steps(embeddings: FloatMatrix, chunk_ids: IntArray) -> tuple[IntArray, FloatMatrix]:
    """Per chunk (ids ``0..C-1``): its most central step (largest cosine to the chunk's
    normalised centroid; ties to the earliest) and the centroid itself."""
    members = labels_to_incidence(chunk_ids)
    centroids = group_centroids(embeddings, members)
    to_own = np.einsum("ij,ij->i", embeddings, centroids[chunk_ids])
    return group_argmax(to_own, chunk_ids, members.shape[0]), centroids


class PeriodicSummary(Retriever[PeriodicSummaryConfig]):
    """Periodic Summary: the recent window (half the budget) first, then one summary
    step per older chunk of ``chunk_size`` steps (its most central step), then, with
    ``fill_leftover``, more recent steps; all through the shared first-fit packer."""

    name = "periodic_summary"
    Config = PeriodicSummaryConfig

    def _build(self, view: MemoryView) -> None:
        size = self.config.chunk_size
        n_full = view.n // size
        chunk_ids = np.arange(n_full * size, dtype=np.int64) // size
        self.summary_, self.chunk_centroids_ = central_steps(
            view.embeddings[: n_full * size], chunk_ids
        )

    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        view = self.fitted_view
        cfg = self.config
        costs = view.costs
        # Recent window: the longest suffix of visible steps fitting the recent budget.
        recent_budget = math.floor(cfg.recent_fraction * budget)
        back = np.cumsum(costs[:limit][::-1])
        w = int(np.searchsorted(back, recent_budget, side="right"))
        older_end = limit - w
        # Summaries of the older part: precomputed full chunks, plus a cut one.
        n_full = min(older_end // cfg.chunk_size, self.summary_.shape[0])
        summaries = self.summary_[:n_full]
        centroids = self.chunk_centroids_[:n_full]
        cut_start = n_full * cfg.chunk_size
        if cut_start < older_end:
            span = view.embeddings[cut_start:older_end]
            step, cent = central_steps(span, np.zeros(span.shape[0], dtype=np.int64))
            summaries = np.append(summaries, cut_start + step)
            centroids = np.vstack([centroids, cent])
        if cfg.summary_order == "query":
            summaries = summaries[np.argsort(-(centroids @ q), kind="stable")]
        else:
            summaries = summaries[::-1]
        parts = [np.arange(limit - 1, older_end - 1, -1, dtype=np.int64), summaries]
        if cfg.fill_leftover:
            rest = np.ones(older_end, dtype=bool)
            rest[summaries] = False
            parts.append(np.flatnonzero(rest)[::-1].astype(np.int64))
        return pack_first_fit(np.concatenate(parts), costs, budget)
