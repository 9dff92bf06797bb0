"""OSU-Mem retrieval and its variants, all configurations of the same code.

* :class:`OSUMem`: budgeted coarse-to-fine expansion. Coarse: OSU centroids by cosine,
  keep the top K = ceil(ρ·B / mean OSU token cost). Fine: the kept OSUs' members by
  step cosine, with a budget-gated novelty penalty (B ≥ 192). Leftover budget is filled
  from the flat cosine ranking. Disjoint (``max_memberships=1``), sim-only
  (``views=("similarity",)``), no-novelty (``novelty=False``) and the M_max sweep are
  config overrides.
* :class:`OSUMemGF`: + ground-truth filtering, an ORACLE (``is_oracle = True``): the
  coarse stage keeps only OSUs that contain evidence.
* :class:`OSUMemCoverage`: coverage-guided greedy: cosine + β per newly covered OSU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from osumem.frozen import Boolean, Constraints, Interval, Options, Symbols
from osumem.osu.config import OSUConfig
from osumem.osu.pool import OSUPool, release_free_memory
from osumem.osu.views import HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH, HNSW_M
from osumem.retrieve.base import Retriever, RetrieverConfig, greedy_pack, pack_first_fit
from osumem.retrieve.explain import SelectionParts, best_unit, unit_ranks
from osumem.types import IntArray, MemoryView

#: Extra centroids asked of the HNSW centroid index beyond K (re-scored exactly).
CENTROID_MARGIN = 8

#: Up to this many candidate OSUs, the top K is taken by one full sort.
SMALL_SORT = 64


@dataclass(frozen=True, kw_only=True)
class PoolRetrieverConfig(OSUConfig, RetrieverConfig):
    """The construction fields of :class:`~osumem.osu.config.OSUConfig` as a retriever
    config: the base of every method that retrieves over an OSU pool (its
    ``osu_config()`` is the construction part, read field by field)."""


#: The config type of a retriever over an OSU pool.
PoolConfigT = TypeVar("PoolConfigT", bound=PoolRetrieverConfig)


@dataclass(frozen=True, kw_only=True)
class OSUMemConfig(PoolRetrieverConfig):
    """OSU-Mem: the construction fields of :class:`~osumem.osu.config.OSUConfig`
    (Δ_gap, S_max, f_min, M_max, views, view priority, k) plus retrieval:

    Attributes:
        coarse_ratio: ρ, K = ceil(ρ·B / mean OSU token cost) OSUs kept by the coarse
            stage.
        novelty: whether the novelty penalty is used at all.
        novelty_weight: γ, a candidate's fine score is cos(q, h_i) − γ·max(0, max_j
            cos(h_i, h_j)) over already-selected steps j.
        novelty_min_budget: the penalty is active only when B ≥ this (paper: 192).
        fill_from_flat: fill leftover budget from the flat cosine ranking.
        coarse_k_rule: how K follows the budget. ``"mean_cost"`` (default, the paper's rule):
            K = ceil(ρ·B / mean OSU token cost). ``"union_cost"``: keep OSUs in centroid
            order until their *distinct* members hold ρ·B tokens, so K does not shrink
            relative to the pool when overlapping OSUs share members (a post-hoc
            sensitivity variant, docs/decisions.md).
    """

    coarse_ratio: float = 2.0
    novelty: bool = True
    novelty_weight: float = 0.2
    novelty_min_budget: int = 192
    fill_from_flat: bool = True
    coarse_k_rule: str = "mean_cost"

    config_name = "osumem"
    parameter_constraints: ClassVar[Constraints] = {
        "coarse_ratio": Interval(float, 0, None, closed="neither"),
        "novelty": Boolean(),
        "novelty_weight": Interval(float, 0, None),
        "novelty_min_budget": Interval(int, 0, None),
        "fill_from_flat": Boolean(),
        "coarse_k_rule": Options(("mean_cost", "union_cost")),
    }
    parameter_symbols: ClassVar[Symbols] = {"coarse_ratio": "ρ", "novelty_weight": "γ"}


@dataclass(frozen=True, kw_only=True)
class OSUMemCoverageConfig(PoolRetrieverConfig):
    """Coverage-guided OSU-Mem: construction fields plus ``beta`` β (paper
    .12, swept over .04–.20): a step scores cos(q, h_i) + β per OSU it belongs to that no
    selected step covers yet.

    ``candidates`` says which steps the greedy runs over: ``"all"`` (default, the paper's rule:
    every visible step) or ``"flat_top"`` (the head of the flat cosine ranking holding
    ``candidate_ratio``·B tokens, so the bonus only reorders relevant steps; a post-hoc
    sensitivity variant, docs/decisions.md)."""

    beta: float = 0.12
    candidates: str = "all"
    candidate_ratio: float = 2.0

    config_name = "osumem_coverage"
    parameter_constraints: ClassVar[Constraints] = {
        "beta": Interval(float, 0, None),
        "candidates": Options(("all", "flat_top")),
        "candidate_ratio": Interval(float, 0, None, closed="neither"),
    }
    parameter_symbols: ClassVar[Symbols] = {"beta": "β"}


@dataclass(frozen=True)
class CoarseResult:
    """What the coarse stage decided for one query: the visible membership matrix
    (steps < limit), each OSU's score, the kept OSUs (best first) and K."""

    members: sp.csc_matrix
    scores: NDArray[np.float64]
    kept: IntArray
    k: int


class CentroidIndex:
    """An HNSW index (hnswlib, inner product) over the live OSU centroids of a pool,
    labelled by slot and kept in step with the pool's change log: a changed centroid
    is updated in place, a dead OSU marked deleted, a full derivation rebuilds it."""

    def __init__(self, pool: OSUPool, seed: int) -> None:
        self.pool = pool
        self.seed = seed
        self.epoch = -1
        self.position = 0
        self._index: Any = None
        self._deleted: set[int] = set()
        self._known: set[int] = set()
        self._ef = -1

    def _rebuild(self) -> None:
        import hnswlib

        slots, cents = self.pool.live_arrays()
        self._index = hnswlib.Index(space="ip", dim=cents.shape[1])
        # capacity for the live OSUs plus an eighth (grown by doubling in sync): hnswlib
        # keeps a lock and a level per element of capacity, resident even when unused
        self._index.init_index(
            max_elements=max(1024, slots.size + slots.size // 8),
            M=HNSW_M,
            ef_construction=HNSW_EF_CONSTRUCTION,
            random_seed=self.seed,
        )
        self._index.set_num_threads(1)
        self._ef = -1
        if slots.size:
            self._index.add_items(cents, slots)
        self._known = set(slots.tolist())
        self._deleted = set()

    def sync(self) -> None:
        """Apply the pool's changes since the last sync."""
        pool = self.pool
        if (
            self._index is not None
            and self.epoch == pool.epoch
            and self.position == pool.change_log_position
        ):
            return
        changes = pool.changes_since(self.epoch, self.position) if self._index else None
        if changes is None:
            self._rebuild()
        else:
            rows, _, sizes = pool.slot_arrays()
            _, cents = pool.live_arrays()
            changed = list(dict.fromkeys(changes))
            fresh = [g for g in changed if sizes[g] > 0 and g not in self._known]
            need = len(self._known) + len(fresh)
            if need > self._index.get_max_elements():
                self._index.resize_index(max(need, 2 * self._index.get_max_elements()))
            for g in changed:
                if sizes[g] > 0:
                    if g in self._deleted:
                        self._index.unmark_deleted(g)
                        self._deleted.discard(g)
                    self._index.add_items(cents[rows[g] : rows[g] + 1], np.array([g]))
                    self._known.add(g)
                elif g in self._known and g not in self._deleted:
                    self._index.mark_deleted(g)
                    self._deleted.add(g)
        self.epoch, self.position = pool.epoch, pool.change_log_position

    def query(self, q: NDArray[np.float32], k: int) -> IntArray | None:
        """About the ``k`` best slots by centroid cosine (``None`` when the index
        cannot answer ``k``; the caller then scans)."""
        self.sync()
        ef = max(HNSW_EF_SEARCH, 2 * k)
        if ef != self._ef:
            self._index.set_ef(ef)
            self._ef = ef
        try:
            labels, _ = self._index.knn_query(q[None, :], k=k)
        except RuntimeError:
            return None
        return labels[0].astype(np.int64)


def _top_slots(pool: OSUPool, slots: IntArray, scores: NDArray[Any], k: int) -> IntArray:
    """The ``k`` of ``slots`` with the best ``scores``, ties by the pool's canonical
    order (as a set: the caller takes the union of their members). Sorting by key
    in Python happens only when scores tie at the k-th place."""
    m = int(slots.shape[0])
    if k >= m:
        return slots
    sc = np.asarray(scores, dtype=np.float64)
    if m <= SMALL_SORT:
        # a few candidates (the centroid index's): one sort, the tie check on two
        order = np.argsort(-sc)
        if sc[order[k - 1]] > sc[order[k]]:
            return slots[order[:k]]
        kth = sc[order[k - 1]]
    else:
        top = np.argpartition(-sc, k - 1)[:k]
        kth = sc[top].min()
        if int(np.count_nonzero(sc >= kth)) == k:
            return slots[top]
    head = np.flatnonzero(sc >= kth).tolist()
    best = sorted(head, key=lambda i: (-sc[i], pool.canonical_key(int(slots[i]))))[:k]
    return slots[np.asarray(best, dtype=np.int64)]


class _PoolRetriever(Retriever[PoolConfigT]):
    """Shared fit/update over an :class:`OSUPool`."""

    pool_: OSUPool | None = None
    _centroid_index: CentroidIndex | None = None
    _mean_cost_state: tuple[Any, ...] | None = None
    _mean_cost = 0.0

    def _build(self, view: MemoryView) -> None:
        """Build the pool; for a memory whose queries use the HNSW indexes, also the
        step index (on a second thread, while the pool builds) and the centroid index
        (while the step index finishes), so the first query builds nothing."""
        wait = self._start_step_index(view)
        try:
            self.pool_ = OSUPool.build(view, self.config.osu_config(), self.seed)
            if wait is not None:
                self._centroid_index = CentroidIndex(self.pool_, self.seed)
                self._centroid_index.sync()
        finally:
            if wait is not None:
                wait()
        if wait is not None:
            release_free_memory()

    def pool_variant(self) -> Any:
        """What, besides the construction settings (``config.osu_config()``), shapes
        this method's pool (``None``: nothing; pools of equal settings and variant are
        the same pool, and the evaluation runner shares them between methods)."""
        return None

    def update(self, view: MemoryView) -> Self:
        """Add the new tail steps of ``view`` to the OSU pool incrementally."""
        if self.pool_ is None or self.view_ is None:
            return self.fit(view)
        self.pool_.add(view)
        self._extend_cost_stats(self.view_, view)
        self.view_ = view
        return self

    def restore(self, view: MemoryView, pool: OSUPool) -> Self:
        """Take ``pool`` (this method's pool over ``view``, e.g. loaded from a stored
        snapshot) as the fitted structure, as ``fit``/``update`` would have left it."""
        self.view_ = view
        self._step_index = None
        self._centroid_index = None
        self.pool_ = pool
        return self

    def _visible(self, limit: int) -> tuple[sp.csc_matrix, NDArray[np.float32], IntArray]:
        """Membership, centroids and costs restricted to steps < ``limit``: later members
        are dropped and centroids/costs recomputed from the visible ones (OSUs left
        empty get a zero centroid and cost 0)."""
        pool = self.pool_
        assert pool is not None and self.view_ is not None
        if limit >= pool.n_steps:
            return pool.members, pool.centroids, pool.costs
        members = pool.members[:limit].tocsc()
        sums = np.asarray(members.T @ self.view_.embeddings[:limit].astype(np.float64))
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        centroids = (sums / np.where(norms > 0, norms, 1.0)).astype(np.float32)
        costs = np.asarray(members.T @ self.view_.costs[:limit].astype(np.float64)).astype(np.int64)
        return members, centroids, costs


#: The config type of OSU-Mem and the methods built on it.
OSUMemConfigT = TypeVar("OSUMemConfigT", bound=OSUMemConfig)


class OSUMem(_PoolRetriever[OSUMemConfigT]):
    """OSU-Mem default: budgeted coarse-to-fine expansion over the OSU pool."""

    name = "osumem"
    Config = OSUMemConfig

    def coarse(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None = None
    ) -> CoarseResult:
        """The coarse stage: score visible OSUs by centroid cosine, keep the top K."""
        cfg = self.config
        members, centroids, costs = self._visible(limit)
        sizes = np.diff(members.indptr)
        scores = (centroids @ q).astype(np.float64)
        eligible = sizes > 0
        if self.is_oracle:
            ev = np.zeros(members.shape[0])
            if evidence is not None and evidence.size:
                ev[evidence[(evidence >= 0) & (evidence < limit)]] = 1.0
            eligible &= np.asarray(members.T @ ev) > 0
        if not eligible.any():
            return CoarseResult(members, scores, np.empty(0, dtype=np.int64), 0)
        n_eligible = int(eligible.sum())
        ranked = np.argsort(-np.where(eligible, scores, -np.inf), kind="stable")[:n_eligible]
        if cfg.coarse_k_rule == "union_cost":
            k = self._union_k(members[:, ranked], cfg.coarse_ratio * budget, limit)
        else:
            k = math.ceil(cfg.coarse_ratio * budget / float(costs[eligible].mean()))
        kept = ranked[: min(k, n_eligible)].astype(np.int64)
        return CoarseResult(members, scores, kept, k)

    def _union_k(self, ranked_members: sp.csc_matrix, target: float, limit: int) -> int:
        """Smallest K whose first K OSUs (in rank order) cover ``target`` tokens of
        distinct steps (all of them when the pool holds fewer)."""
        assert self.view_ is not None
        n_cols = ranked_members.shape[1]
        col_of = np.repeat(np.arange(n_cols), np.diff(ranked_members.indptr))
        first = np.full(limit, n_cols, dtype=np.int64)
        np.minimum.at(first, ranked_members.indices, col_of)
        covered = first < n_cols
        gained = np.bincount(
            first[covered], weights=self.view_.costs[:limit][covered], minlength=n_cols
        )
        return int(np.searchsorted(np.cumsum(gained), target, side="left")) + 1

    def _coarse_positions(self, q: NDArray[np.float32], budget: int) -> IntArray:
        """The coarse stage over the whole pool from its slot-level state: the same
        K OSUs as :meth:`coarse` (ties by canonical order), without assembling the
        pool; returns the distinct positions they keep, increasing."""
        pool = self.pool_
        assert pool is not None
        cfg = self.config
        slots, cents = pool.live_arrays()
        if slots.size == 0:
            return np.empty(0, dtype=np.int64)
        k = min(math.ceil(cfg.coarse_ratio * budget / self._mean_osu_cost()), slots.size)
        found = None
        if self._use_ann(pool.n_steps) and k + CENTROID_MARGIN < slots.size:
            if self._centroid_index is None or self._centroid_index.pool is not pool:
                self._centroid_index = CentroidIndex(pool, self.seed)
            found = self._centroid_index.query(q, k + CENTROID_MARGIN)
        if found is not None:
            # approximate: the index's candidates, re-scored exactly
            live_row = pool.slot_arrays()[0]
            best = _top_slots(pool, found, cents[live_row[found]] @ q, k)
        else:
            best = _top_slots(pool, slots, cents @ q, k)
        return pool.kept_union(best)

    def _mean_osu_cost(self) -> float:
        """Mean token cost of the live OSUs (cached until the pool changes)."""
        pool = self.pool_
        assert pool is not None
        state = (pool, pool.epoch, pool.change_log_position)
        if self._mean_cost_state != state:
            slots, _ = pool.live_arrays()
            self._mean_cost = float(pool.slot_arrays()[1][slots].sum()) / slots.size
            self._mean_cost_state = state
        return self._mean_cost

    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        assert self.view_ is not None and self.pool_ is not None
        cfg = self.config
        costs = self.view_.costs
        if limit >= self.pool_.n_steps and not self.is_oracle and cfg.coarse_k_rule == "mean_cost":
            cand = self._coarse_positions(q, budget)
        else:
            coarse = self.coarse(q, budget, limit, evidence)
            cand = np.unique(coarse.members[:, coarse.kept].indices).astype(np.int64)
        if self._use_ann(limit):
            cos_cand = self.view_.embeddings[cand] @ q
        else:
            cos_cand = self._cosines(q, limit)[cand]
        order = np.argsort(-cos_cand, kind="stable")
        cand, rel = cand[order], cos_cand[order]
        if cfg.novelty and budget >= cfg.novelty_min_budget and cand.size:
            chosen = self._novelty_pack(cand, rel, budget, cfg.novelty_weight)
        else:
            chosen = pack_first_fit(cand, costs, budget)
        if not cfg.fill_from_flat:
            return chosen
        left = budget - int(costs[chosen].sum())
        if left < self._cost_stats()[1]:
            # no step is cheap enough for what is left: the fill would add nothing
            return chosen
        extra = self._flat_pack(q, limit, left, exclude=chosen)
        return np.concatenate([chosen, extra])

    def explain_selection(
        self,
        q: NDArray[np.float32],
        text: str | None,
        budget: int,
        limit: int,
        positions: IntArray,
    ) -> SelectionParts:
        """How each selected step got in: through a unit the coarse stage kept (the
        best-ranked kept unit holding it brought it in) or from the flat fill; the
        candidates are the kept units' members by cosine, then the flat ranking (see
        :mod:`osumem.retrieve.explain`)."""
        assert self.view_ is not None
        cfg = self.config
        coarse = self.coarse(q, budget, limit)
        sizes = np.diff(coarse.members.indptr)
        ranks = unit_ranks(coarse.scores, sizes > 0)
        kept = np.zeros(coarse.members.shape[1], dtype=bool)
        kept[coarse.kept] = True
        cand = np.unique(coarse.members[:, coarse.kept].indices).astype(np.int64)
        cos = self._cosines(q, limit)
        cand = cand[np.argsort(-cos[cand], kind="stable")]
        rows = coarse.members.tocsr()
        in_cand = np.zeros(limit, dtype=bool)
        in_cand[cand] = True
        stages: dict[int, str] = {}
        brought: dict[int, int] = {}
        for p in np.asarray(positions, dtype=np.int64).tolist():
            if in_cand[p]:
                stages[p] = "unit"
                unit = best_unit(rows.indices[rows.indptr[p] : rows.indptr[p + 1]], ranks, kept)
                if unit is not None:
                    brought[p] = unit
            else:
                stages[p] = "flat fill"
        flat = np.argsort(-cos, kind="stable").astype(np.int64)
        novelty = bool(cfg.novelty and budget >= cfg.novelty_min_budget)
        return SelectionParts(
            stages=stages,
            brought_by=brought,
            candidates=np.concatenate([cand, flat[~in_cand[flat]]]),
            candidates_label="members of the kept units by cosine, then the flat ranking",
            kept_units=coarse.kept,
            summary={
                "coarse_k": int(coarse.k),
                "kept_units": int(coarse.kept.shape[0]),
                "unit_candidates": int(cand.shape[0]),
                "novelty_penalty": novelty,
            },
        )

    def _novelty_pack(
        self, cand: IntArray, relevance: NDArray[np.float32], budget: int, gamma: float
    ) -> IntArray:
        """Greedy fine stage with the penalty γ·max(0, max cosine to selected steps).

        The same picks, and the same floating-point operations on every score that
        can still be picked, as :func:`greedy_pack` with the penalty as its update
        (tested); steps that no longer fit or are taken are set to −inf instead of
        masked at every pick, which halves the NumPy calls per pick.
        """
        assert self.view_ is not None
        if cand.shape[0] == 0:
            return np.empty(0, dtype=np.int64)
        H = self.view_.embeddings[cand]
        cost = np.asarray(self.view_.costs, dtype=np.int64)[cand]
        score = relevance.astype(np.float64)
        score[cost > budget] = -np.inf
        max_sim = np.zeros(cand.shape[0])
        new_max = np.empty_like(max_sim)
        remaining = int(budget)
        top_cost = int(cost.max())
        picked: list[int] = []
        while True:
            j = int(score.argmax())
            if score[j] == -np.inf:
                break
            picked.append(j)
            score[j] = -np.inf
            remaining -= int(cost[j])
            # score += -γ·(new_max − max_sim), written as score −= γ·(…): equal bits
            np.maximum(max_sim, H @ H[j], out=new_max)
            penalty = new_max - max_sim
            penalty *= gamma
            score -= penalty
            max_sim, new_max = new_max, max_sim
            if remaining < top_cost:
                score[cost > remaining] = -np.inf
        return cand[np.asarray(picked, dtype=np.int64)]


class OSUMemGF(OSUMem[OSUMemConfig]):
    """OSU-Mem + GF (ground-truth filtering). ORACLE: reads the query's evidence and
    keeps only OSUs that contain some; an upper bound, never a deployable method."""

    name = "osumem_gf"
    is_oracle = True


class OSUMemCoverage(_PoolRetriever[OSUMemCoverageConfig]):
    """Coverage-guided greedy over the visible steps (or the flat head, see
    ``candidates``): score = cos(q, h_i) + β · (number of the step's OSUs not yet
    covered by a selected step)."""

    name = "osumem_coverage"
    Config = OSUMemCoverageConfig

    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        assert self.view_ is not None
        cfg = self.config
        beta = cfg.beta
        members, _, _ = self._visible(limit)
        cos = self._cosines(q, limit).astype(np.float64)
        if cfg.candidates == "flat_top":
            order = self._flat_head(q, limit, cfg.candidate_ratio * budget)
            csum = np.cumsum(self.view_.costs[order])
            head = int(np.searchsorted(csum, cfg.candidate_ratio * budget, side="right"))
            cand = order[: max(head, 1)]
        else:
            cand = np.arange(limit, dtype=np.int64)
        n_osus = np.bincount(members.indices, minlength=limit)[:limit]
        score = cos[cand] + beta * n_osus[cand]
        covered = np.zeros(members.shape[1], dtype=bool)
        csr = members.tocsr()

        def on_pick(j: int) -> NDArray[np.float64] | None:
            step = int(cand[j])
            osus = csr.indices[csr.indptr[step] : csr.indptr[step + 1]]
            new = osus[~covered[osus]]
            if new.size == 0:
                return None
            covered[new] = True
            hit = np.concatenate(
                [members.indices[members.indptr[u] : members.indptr[u + 1]] for u in new]
            )
            return -beta * np.bincount(hit, minlength=limit)[cand].astype(np.float64)

        return greedy_pack(score, cand, self.view_.costs, budget, on_pick)

    def explain_selection(
        self,
        q: NDArray[np.float32],
        text: str | None,
        budget: int,
        limit: int,
        positions: IntArray,
    ) -> SelectionParts:
        """Each step's starting score: cosine + β per unit it sits in (the bonus shrinks
        as selected steps cover its units); the candidates in that order."""
        assert self.view_ is not None
        beta = self.config.beta
        members, _, _ = self._visible(limit)
        n_units = np.bincount(members.indices, minlength=limit)[:limit]
        score = self._cosines(q, limit).astype(np.float64) + beta * n_units
        parts = {
            int(p): {"units": int(n_units[p]), "start_bonus": float(beta * n_units[p])}
            for p in np.asarray(positions, dtype=np.int64).tolist()
        }
        return SelectionParts(
            stages=dict.fromkeys(parts, "coverage greedy"),
            parts=parts,
            candidates=np.argsort(-score, kind="stable").astype(np.int64),
            candidates_label="steps by cosine + beta per unit",
            summary={"beta": float(beta), "candidates": self.config.candidates},
        )
