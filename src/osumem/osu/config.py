"""The frozen construction parameters of an OSU pool."""

from __future__ import annotations

import math
from dataclasses import dataclass

from osumem.errors import ConfigError

#: The four views, in the paper's priority order (entity > tool > subgoal > similarity).
VIEWS: tuple[str, ...] = ("entity", "tool", "subgoal", "similarity")

#: Community-detection back ends for the similarity view.
COMMUNITY_METHODS: tuple[str, ...] = ("leiden", "louvain")


@dataclass(frozen=True, kw_only=True)
class OSUConfig:
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

    def __post_init__(self) -> None:
        problems = []
        if self.gap < 0:
            problems.append(f"gap (Δ_gap) must be >= 0, got {self.gap}")
        if self.max_osu_size < 1:
            problems.append(f"max_osu_size (S_max) must be >= 1, got {self.max_osu_size}")
        if self.min_osu_size < 1:
            problems.append(f"min_osu_size (f_min) must be >= 1, got {self.min_osu_size}")
        if self.min_osu_size > self.max_osu_size:
            problems.append("min_osu_size (f_min) must not exceed max_osu_size (S_max)")
        if self.max_memberships < 1:
            problems.append(f"max_memberships (M_max) must be >= 1, got {self.max_memberships}")
        unknown = [v for v in self.views if v not in VIEWS]
        if unknown or not self.views:
            problems.append(f"views must be a non-empty subset of {VIEWS}, got {self.views}")
        if sorted(self.view_priority) != sorted(VIEWS):
            problems.append(f"view_priority must order all of {VIEWS}, got {self.view_priority}")
        if self.knn_k < 1:
            problems.append(f"knn_k must be >= 1, got {self.knn_k}")
        if self.community not in COMMUNITY_METHODS:
            problems.append(f"community must be one of {COMMUNITY_METHODS}, got {self.community}")
        if self.similarity_scope not in ("fallback", "all"):
            problems.append(
                f"similarity_scope must be 'fallback' or 'all', got {self.similarity_scope}"
            )
        if self.similarity_refresh < 1:
            problems.append(f"similarity_refresh must be >= 1, got {self.similarity_refresh}")
        if self.similarity_refresh_ratio < 0:
            problems.append(
                f"similarity_refresh_ratio must be >= 0, got {self.similarity_refresh_ratio}"
            )
        if problems:
            raise ConfigError(f"{type(self).__name__}: " + "; ".join(problems))

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
        return OSUConfig(
            gap=self.gap,
            max_osu_size=self.max_osu_size,
            min_osu_size=self.min_osu_size,
            max_memberships=self.max_memberships,
            views=self.views,
            view_priority=self.view_priority,
            knn_k=self.knn_k,
            community=self.community,
            similarity_scope=self.similarity_scope,
            similarity_refresh=self.similarity_refresh,
            similarity_refresh_ratio=self.similarity_refresh_ratio,
        )
