"""Tree Abstraction baseline: RAPTOR-style recursive clustering with
mean-embedding summary nodes and a budgeted coarse-to-fine descent."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from osumem.errors import MissingExtraError
from osumem.frozen import Boolean, Constraints, Interval
from osumem.retrieve.base import Retriever, RetrieverConfig
from osumem.retrieve.groups import (
    budget_prefix,
    group_centroids,
    labels_to_incidence,
    with_fallback,
)
from osumem.retrieve.packing import pack_first_fit
from osumem.types import FloatMatrix, IntArray, MemoryView


@dataclass(frozen=True, kw_only=True)
class TreeConfig(RetrieverConfig):
    """Parameters (all ours; docs/decisions.md).

    * ``branching``: each level clusters the nodes below it into ⌈m / branching⌉
      k-means clusters (seeded with the retriever's seed); levels stop once at most
      ``branching`` nodes remain (they form the top level).
    * ``kmeans_n_init``: k-means restarts per level.
    * ``coarse_ratio``: ρ; at every level the descent keeps the best nodes by cosine
      until their visible leaf cost reaches ρ·B (the beam adapts to the budget).
    * ``fill_leftover``: budget the descent leaves unused is filled from the flat
      cosine ranking.

    Summary nodes carry no tokens: they navigate; only leaf steps are returned.
    """

    branching: int = 8
    kmeans_n_init: int = 3
    coarse_ratio: float = 2.0
    fill_leftover: bool = True

    config_name = "tree"
    parameter_constraints: ClassVar[Constraints] = {
        "branching": Interval(int, 2, None),
        "kmeans_n_init": Interval(int, 1, None),
        "coarse_ratio": Interval(float, 0, None, closed="neither"),
        "fill_leftover": Boolean(),
    }


def build_tree(
    embeddings: FloatMatrix, *, branching: int, n_init: int, seed: int
) -> tuple[list[FloatMatrix], list[IntArray]]:
    """Recursive k-means over unit embeddings.

    Returns ``(node_vectors, parents)``: ``node_vectors[0]`` are the leaves (steps),
    ``node_vectors[l]`` the normalised mean of each level-``l`` node's children, and
    ``parents[l]`` maps every level-``l`` node to its parent at level ``l + 1``.
    """
    try:
        from sklearn.cluster import KMeans
    except ImportError:
        raise MissingExtraError(
            "the 'tree' baseline needs scikit-learn: pip install 'osumem[baselines]'"
        ) from None

    vectors: list[FloatMatrix] = [embeddings]
    parents: list[IntArray] = []
    x = embeddings
    while x.shape[0] > branching:
        k = min(math.ceil(x.shape[0] / branching), np.unique(x, axis=0).shape[0])
        if k < 1 or k >= x.shape[0]:
            break
        labels = KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit_predict(x)
        _, labels = np.unique(labels, return_inverse=True)
        labels = labels.astype(np.int64)
        x = group_centroids(x, labels_to_incidence(labels))
        parents.append(labels)
        vectors.append(x)
    return vectors, parents


class TreeAbstraction(Retriever[TreeConfig]):
    """Tree Abstraction: a k-means tree over step embeddings whose internal nodes are
    mean embeddings of their children; retrieval descends from the top level, keeping
    at each level the best children (by cosine) of the kept nodes until their leaf
    cost covers ρ·B, then ranks the reached steps by cosine and packs them first-fit.
    """

    name = "tree"
    Config = TreeConfig

    def _build(self, view: MemoryView) -> None:
        cfg = self.config
        self.nodes_, self.parents_ = build_tree(
            view.embeddings, branching=cfg.branching, n_init=cfg.kmeans_n_init, seed=self.seed
        )
        # ancestors_[l][i]: the level-l ancestor of step i (level 0: the step itself)
        anc = [np.arange(view.n, dtype=np.int64)]
        for p in self.parents_:
            anc.append(p[anc[-1]])
        self.ancestors_ = anc

    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        view = self.fitted_view
        cfg = self.config
        costs = view.costs
        cos = self._cosines(q, limit)
        vis = costs[:limit].astype(np.float64)
        top = len(self.nodes_) - 1
        allowed = np.ones(self.nodes_[top].shape[0], dtype=bool)
        for level in range(top, 0, -1):
            sub_cost = np.bincount(
                self.ancestors_[level][:limit], weights=vis, minlength=allowed.shape[0]
            )
            idx = np.flatnonzero(allowed & (sub_cost > 0))
            idx = idx[np.argsort(-(self.nodes_[level][idx] @ q), kind="stable")]
            kept = np.zeros(allowed.shape[0], dtype=bool)
            kept[idx[: budget_prefix(sub_cost[idx], cfg.coarse_ratio * budget)]] = True
            allowed = kept[self.parents_[level - 1]]
        cand = np.flatnonzero(allowed[:limit])
        cand = cand[np.argsort(-cos[cand], kind="stable")]
        if cfg.fill_leftover:
            cand = with_fallback(cand, np.argsort(-cos, kind="stable"), limit)
        return pack_first_fit(cand, costs, budget)
