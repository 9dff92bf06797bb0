"""The frozen construction parameters of an OSU pool."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from osumem.frozen import Constraints, FrozenConfig, Interval, Options, Permutation, Subset, Symbols

#: The four views, in the paper's priority order (entity > tool > subgoal > similarity).
VIEWS: tuple[str, ...] = ("entity", "tool", "subgoal", "similarity")

#: Community-detection back ends for the similarity view.
COMMUNITY_METHODS: tuple[str, ...] = ("leiden", "louvain")


@dataclass(frozen=True, kw_only=True)
class OSUConfig(FrozenConfig):
    """How OSUs are built.

    Attributes:
        gap: Δ_gap, the base temporal gap. The per-view split thresholds derive from it:
            Δ_ent = max(60, 8·Δ_gap), Δ_tool = max(12, 2·Δ_gap), Δ_sg = max(8, Δ_gap).
        max_osu_size: S_max, segments longer than this are cut into consecutive chunks.
        min_osu_size: f_min, groups smaller than this are pruned (before and after the
            membership cap).
        max_memberships: M_max, the most OSUs one step may belong to (5 overlap, 1
            disjoint).
        views: which views to build (a subset of :data:`VIEWS`).
        view_priority: the order in which a step keeps memberships under the cap; ties
            within a view go to the OSU with the higher centroid coherence.
        knn_k: k of the similarity view's cosine k-NN graph.
        community: ``"leiden"`` (leidenalg, modularity) or ``"louvain"`` (networkx).
        similarity_scope: ``"fallback"`` (the paper's "fallback for steps that lack
            entity or tool annotations": the similarity view covers the steps with no
            entity and no tool signature *of the enabled views*, so with
            ``views=("similarity",)`` it covers every step) or ``"all"`` (every step).
        similarity_refresh: incremental ``add`` recomputes the similarity view once at
            least this many steps arrived since its last refresh (batch refresh) ...
        similarity_refresh_ratio: ... and at least this fraction of the steps it
            covered then, so refreshes are geometric (O(log n) k-NN + community runs
            over a growing memory instead of O(n)).
    """

    gap: int = 4
    max_osu_size: int = 20
    min_osu_size: int = 2
    max_memberships: int = 5
    views: tuple[str, ...] = VIEWS
    view_priority: tuple[str, ...] = VIEWS
    knn_k: int = 10
    community: str = "leiden"
    similarity_scope: str = "fallback"
    similarity_refresh: int = 16
    similarity_refresh_ratio: float = 0.25

    parameter_constraints: ClassVar[Constraints] = {
        "gap": Interval(int, 0, None),
        "max_osu_size": Interval(int, 1, None),
        "min_osu_size": Interval(int, 1, None),
        "max_memberships": Interval(int, 1, None),
        "views": Subset(VIEWS),
        "view_priority": Permutation(VIEWS),
        "knn_k": Interval(int, 1, None),
        "community": Options(COMMUNITY_METHODS),
        "similarity_scope": Options(("fallback", "all")),
        "similarity_refresh": Interval(int, 1, None),
        "similarity_refresh_ratio": Interval(float, 0, None),
    }
    parameter_symbols: ClassVar[Symbols] = {
        "gap": "Δ_gap",
        "max_osu_size": "S_max",
        "min_osu_size": "f_min",
        "max_memberships": "M_max",
    }

    def _cross_check(self) -> list[str]:
        if self.min_osu_size > self.max_osu_size:
            return ["min_osu_size (f_min) must not exceed max_osu_size (S_max)"]
        return []

    def split_threshold(self, view: str) -> float:
        """Δ_view: consecutive members further apart than this start a new segment."""
        if view == "entity":
            return max(60, 8 * self.gap)
        if view == "tool":
            return max(12, 2 * self.gap)
        if view == "subgoal":
            return max(8, self.gap)
        return math.inf

    def osu_config(self) -> OSUConfig:
        """The construction part of this config (for subclasses that add fields)."""
        return self.part(OSUConfig)
