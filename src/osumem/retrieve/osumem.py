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
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar

import numpy as np
from numpy.typing import NDArray

from osumem.errors import InvalidInputError, NotFittedError
from osumem.frozen import Boolean, Constraints, Interval, Options, Symbols
from osumem.lazy import lazy_module
from osumem.osu.config import OSUConfig
from osumem.osu.heap import release_free_memory
from osumem.osu.pool import OSUPool
from osumem.osu.views import HNSW_EF_SEARCH
from osumem.retrieve.base import Retriever, RetrieverConfig, RetrieverState
from osumem.retrieve.centroids import CentroidIndex, top_slots
from osumem.retrieve.explain import SelectionParts, best_unit, unit_ranks
from osumem.retrieve.packing import greedy_pack, novelty_pack, pack_first_fit
from osumem.retrieve.step_index import RAISED_EF_PER_K, SPREAD_SAMPLE, SampleMean, ann_unsure
from osumem.types import IntArray, MemoryView, distinct

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = lazy_module("scipy.sparse")

#: Extra centroids asked of the HNSW centroid index beyond K (re-scored exactly).
CENTROID_MARGIN = 8


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


#: The construction part of each pool config, made once per process (a config is
#: immutable; the evaluation makes one retriever per method and episode).
_CONSTRUCTION_PARTS: dict[PoolRetrieverConfig, OSUConfig] = {}


def _construction_part(config: PoolRetrieverConfig) -> OSUConfig:
    try:
        part = _CONSTRUCTION_PARTS.get(config)
    except TypeError:  # a config with unhashable values is not cached
        return config.osu_config()
    if part is None:
        part = _CONSTRUCTION_PARTS[config] = config.osu_config()
    return part


class _PoolRetriever(Retriever[PoolConfigT]):
    """Shared fit/update over an :class:`OSUPool`, and the state protocol for it: the
    state is the pool (:meth:`OSUPool.state` as arrays), keyed by the construction
    part of the config (methods that build the same pool share one)."""

    pool_: OSUPool | None = None
    _centroid_index: CentroidIndex | None = None
    #: ``(pool state, mean)``: the live centroids the coarse safeguard samples, summed
    _centroid_sample: tuple[tuple[Any, ...], SampleMean] | None = None
    _osu_part: OSUConfig | None = None

    @property
    def fitted_pool(self) -> OSUPool:
        """The OSU pool built by ``fit`` (a :class:`~osumem.errors.NotFittedError`
        before)."""
        if self.pool_ is None:
            raise NotFittedError(f"{type(self).__name__}: call fit() before retrieve()")
        return self.pool_

    def osu_pool(self) -> OSUPool | None:
        return self.pool_

    def state_key(self) -> Hashable:
        """The construction part of the config and the :meth:`pool_variant` (with the
        seed, they fix the pool): retrievers with equal keys share one pool."""
        if self._osu_part is None:
            self._osu_part = _construction_part(self.config)
        variant = self.pool_variant()
        return self._osu_part if variant is None else (self._osu_part, variant)

    def state_format(self) -> tuple[Any, ...]:
        """The pool state's layout version, whether the similarity view may use HNSW
        and the size up to which its k-NN graph is exact."""
        from osumem.osu import construct
        from osumem.osu.pool_state import POOL_STATE_FORMAT
        from osumem.osu.views import hnsw_available

        return (POOL_STATE_FORMAT, hnsw_available(), construct.EXACT_KNN_MAX)

    def state(self) -> RetrieverState:
        pool = self.fitted_pool
        return RetrieverState(key=self.state_key(), n_steps=pool.n_steps, structure=pool)

    def state_arrays_later(self) -> Callable[[], dict[str, NDArray[Any]]]:
        """The pool's arrays in two parts (:meth:`OSUPool.state_later
        <osumem.osu.pool.OSUPool.state_later>`): the member lists and keys, which
        later adds only extend, are written by the returned function."""
        return self.fitted_pool.state_later()

    def load_state(
        self, view: MemoryView, state: RetrieverState | Mapping[str, NDArray[Any]]
    ) -> Self:
        if isinstance(state, RetrieverState):
            if state.key != self.state_key() or not isinstance(state.structure, OSUPool):
                raise InvalidInputError(
                    f"{type(self).__name__}: the state was built with other settings"
                )
            pool = state.structure
        else:
            pool = OSUPool.from_state(view, self.config.osu_config(), self.seed, dict(state))
        return self._take_pool(view, pool)

    def _take_pool(self, view: MemoryView, pool: OSUPool) -> Self:
        """Take ``pool`` (over ``view``) as the fitted structure."""
        self.view_ = view
        self.step_index.reset()
        self._centroid_index = None
        self.pool_ = pool
        return self

    def _build(self, view: MemoryView) -> None:
        """Build the pool; for a memory whose queries use the HNSW indexes, also the
        step index (on a second thread, while the pool builds) and the centroid index
        (while the step index finishes), so the first query builds nothing."""
        wait = self.step_index.start_build(view)
        try:
            # each pool holds its own construction config, as fit always made it (the
            # efficiency tables measure the pool's bytes, its config included)
            self.pool_ = OSUPool.build(view, self.config.osu_config(), self.seed)
            if wait is not None:
                self._centroid_index = CentroidIndex(self.pool_, self.seed)
                self._centroid_index.sync()
                self._centroid_index.background = self.step_index.background
        finally:
            if wait is not None:
                wait()
        if wait is not None:
            release_free_memory()

    def wait_ready(self) -> None:
        """Wait for the background work: the pool's similarity refresh (applied here)
        and the step and centroid index builds."""
        super().wait_ready()
        if self.pool_ is not None:
            self.pool_.finish_refresh()
        pool, view = self.pool_, self.view_
        if pool is None or view is None or not self.step_index.uses_ann(view, pool.n_steps):
            if self._centroid_index is not None:
                self._centroid_index.wait()
            return
        index = self._centroid_index
        if index is None or index.pool is not pool:
            index = self._centroid_index = CentroidIndex(
                pool, self.seed, background=self.step_index.background
            )
        index.wait()
        background, index.background = index.background, False
        try:
            index.sync()  # built or brought up to date here
        finally:
            index.background = background

    def pool_variant(self) -> Any:
        """What, besides the construction settings (``config.osu_config()``), shapes
        this method's pool (``None``: nothing; pools of equal settings and variant are
        the same pool, and the evaluation runner shares them between methods)."""
        return None

    def update_waits(self, n_steps: int) -> bool:
        """Whether :meth:`update` to ``n_steps`` steps would wait for the pool's
        background similarity refresh (see :meth:`OSUPool.refresh_blocks
        <osumem.osu.pool.OSUPool.refresh_blocks>`)."""
        return self.pool_ is not None and self.pool_.refresh_blocks(n_steps)

    def _own_refreshes(self) -> None:
        """A memory's retriever (background index builds) refreshes its pool in the
        background too, and its updates never wait for a refresh past the pool's
        :data:`~osumem.osu.construct.DEFER_MIN_STEPS` (see ``OSUPool.defer_refresh``)."""
        assert self.pool_ is not None
        background = self.step_index.background
        self.pool_.background_refresh = background
        self.pool_.defer_refresh = background and self.defer_refresh

    def apply_ready(self) -> None:
        """Apply the pool's similarity refresh that an update went past without, once it
        is built (see :meth:`OSUPool.apply_ready_refresh
        <osumem.osu.pool.OSUPool.apply_ready_refresh>`); never waits."""
        if self.pool_ is not None:
            self.pool_.apply_ready_refresh()

    def update(self, view: MemoryView) -> Self:
        """Add the new tail steps of ``view`` to the OSU pool incrementally."""
        if self.pool_ is None or self.view_ is None:
            return self.fit(view)
        self._own_refreshes()
        self.pool_.add(view)
        self.step_index.extend_cost_stats(self.view_, view)
        self.step_index.keep_up(view)
        self.view_ = view
        return self

    def _visible(self, limit: int) -> tuple[sp.csc_matrix, NDArray[np.float32], IntArray]:
        """Membership, centroids and costs restricted to steps < ``limit``: later members
        are dropped and centroids/costs recomputed from the visible ones (OSUs left
        empty get a zero centroid and cost 0)."""
        pool, view = self.fitted_pool, self.fitted_view
        if limit >= pool.n_steps:
            return pool.members, pool.centroids, pool.costs
        members = pool.members[:limit].tocsc()
        sums = np.asarray(members.T @ view.embeddings[:limit].astype(np.float64))
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        centroids = (sums / np.where(norms > 0, norms, 1.0)).astype(np.float32)
        costs = np.asarray(members.T @ view.costs[:limit].astype(np.float64)).astype(np.int64)
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
        n_cols = ranked_members.shape[1]
        col_of = np.repeat(np.arange(n_cols), np.diff(ranked_members.indptr))
        first = np.full(limit, n_cols, dtype=np.int64)
        np.minimum.at(first, ranked_members.indices, col_of)
        covered = first < n_cols
        gained = np.bincount(
            first[covered], weights=self.fitted_view.costs[:limit][covered], minlength=n_cols
        )
        return int(np.searchsorted(np.cumsum(gained), target, side="left")) + 1

    def _coarse_positions(self, q: NDArray[np.float32], budget: int) -> IntArray:
        """The coarse stage over the whole pool from its slot-level state: the same
        K OSUs as :meth:`coarse` (ties by canonical order), without assembling the
        pool; returns the distinct positions they keep, increasing."""
        pool = self.fitted_pool
        slots, cents = pool.live_arrays()
        if slots.size == 0:
            return np.empty(0, dtype=np.int64)
        k = self._whole_pool_k(budget, int(slots.size))
        found = None
        if self._coarse_uses_index(k, int(slots.size)):
            index = self._centroid_index_of(pool)
            if not (index.background and index.unsure.skip()):
                found = index.query(q, k + CENTROID_MARGIN)
        scores = None
        if found is not None and self._centroid_index is not None:
            # approximate: the index's candidates, re-scored exactly; asked again with
            # a wider beam, then answered by a full scan, when their scores do not
            # stand out (the recall safeguard)
            live_row = pool.slot_arrays()[0]
            background = self._centroid_sample_mean(pool, cents).cosine(q)
            index = self._centroid_index
            # the second search's beam: 4 · max(40, 2(K + margin)), wider than the
            # first one's (CENTROID_BEAM_PER_K · (K + margin)) and never below 160
            wide = RAISED_EF_PER_K * max(HNSW_EF_SEARCH, 2 * (k + CENTROID_MARGIN))
            fell_back = False
            for ef in (None, wide):
                if ef is not None:
                    found = index.query(q, k + CENTROID_MARGIN, ef=ef)
                    if found is None:
                        break
                scores = cents[live_row[found]] @ q
                ranked = np.argsort(-scores)
                if not ann_unsure(scores[ranked[:k]], background, k, int(slots.size)):
                    if ef is not None:
                        index.raised += 1
                    break
            else:
                index.fallbacks += 1
                found, fell_back = None, True
            if index.background:
                index.unsure.record(fell_back)
        if found is not None and scores is not None:
            best = top_slots(pool, found, scores, k, ranked)
        else:
            best = top_slots(pool, slots, cents @ q, k)
        return pool.kept_union(best)

    def _whole_pool_k(self, budget: int, n_live: int) -> int:
        """The K of the whole-pool coarse stage at ``budget`` (``coarse_ratio`` times
        the budget over the live OSUs' mean cost; at most the ``n_live`` OSUs)."""
        return min(math.ceil(self.config.coarse_ratio * budget / self._mean_osu_cost()), n_live)

    def _centroid_sample_mean(self, pool: OSUPool, cents: NDArray[np.float32]) -> SampleMean:
        """Every ``len(cents) // SPREAD_SAMPLE``-th live centroid (the background the
        centroid index's answer is compared with), summed once per pool state: each
        query of that state then takes their mean cosine from one dot product."""
        state = (pool, pool.epoch, pool.change_log_position)
        cached = self._centroid_sample
        if cached is None or cached[0] != state:
            rows = cents[:: max(1, cents.shape[0] // SPREAD_SAMPLE)]
            cached = self._centroid_sample = (state, SampleMean(rows))
        return cached[1]

    def _centroid_index_of(self, pool: OSUPool) -> CentroidIndex:
        """The coarse stage's centroid index over ``pool`` (made when missing or over
        another pool)."""
        if self._centroid_index is None or self._centroid_index.pool is not pool:
            self._centroid_index = CentroidIndex(
                pool, self.seed, background=self.step_index.background
            )
        return self._centroid_index

    def _coarse_uses_index(self, k: int, n_live: int) -> bool:
        """Whether the whole-pool coarse stage asks the centroid index for its ``k``
        units (a memory on the step index's ANN path with more live units than ``k``
        and the margin), rather than scanning every live centroid."""
        ann = self.step_index.uses_ann(self.fitted_view, self.fitted_pool.n_steps)
        return ann and k + CENTROID_MARGIN < n_live

    def _mean_osu_cost(self) -> float:
        """Mean token cost of the live OSUs (the pool keeps their total)."""
        pool = self.fitted_pool
        return float(pool.live_cost()) / pool.live_arrays()[0].size

    def warm_up(self) -> None:
        """What a whole-memory query of OSU-Mem builds lazily: the coarse stage's state
        (the live units' total cost; above ``ann_min_steps`` the centroid index, built or
        brought up to date) and the step costs' statistics the fill reads, without the
        cosine scans (of every step, of the live centroids or of the centroid index's
        candidates) that a probe query would pay. A subclass whose
        selection differs, the oracle, and the ``union_cost`` rule (whose coarse stage
        assembles the pool) are warmed by a query, as any method."""
        cls = type(self)
        if (
            cls._select is not OSUMem._select
            or cls._select_query is not Retriever._select_query
            or self.is_oracle
            or self.config.coarse_k_rule != "mean_cost"
        ):
            super().warm_up()
            return
        view = self.fitted_view
        if not view.n:
            return
        n_live = int(self.fitted_pool.live_arrays()[0].size)
        if n_live:
            # what _select asks of the whole pool at the smallest budget: the live
            # units' total cost counted, and the centroid index built or caught up
            # where it answers (no query: a probe's outcome would count in the index's
            # unsure memo); the exact scan builds nothing, so it is not run
            k = self._whole_pool_k(1, n_live)
            if self._coarse_uses_index(k, n_live):
                self._centroid_index_of(self.fitted_pool).catch_up()
        self.step_index.cost_stats(view)

    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        view, pool = self.fitted_view, self.fitted_pool
        cfg = self.config
        costs = view.costs
        if limit >= pool.n_steps and not self.is_oracle and cfg.coarse_k_rule == "mean_cost":
            cand = self._coarse_positions(q, budget)
        else:
            coarse = self.coarse(q, budget, limit, evidence)
            cand = distinct(coarse.members[:, coarse.kept].indices).astype(np.int64)
        rows = None
        if self.step_index.uses_ann(view, limit):
            rows = view.embeddings[cand]  # gathered once: the cosines, then the greedy's rows
            cos_cand = rows @ q
        else:
            cos_cand = self._cosines(q, limit)[cand]
        order = np.argsort(-cos_cand, kind="stable")
        cand, rel = cand[order], cos_cand[order]
        if cfg.novelty and budget >= cfg.novelty_min_budget and cand.size:
            chosen = novelty_pack(
                view.embeddings,
                costs,
                cand,
                rel,
                budget,
                cfg.novelty_weight,
                None if rows is None else rows[order],
            )
        else:
            chosen = pack_first_fit(cand, costs, budget)
        if not cfg.fill_from_flat:
            return chosen
        left = budget - int(costs[chosen].sum())
        if left < self.step_index.cost_stats(view)[1]:
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
        cfg = self.config
        coarse = self.coarse(q, budget, limit)
        sizes = np.diff(coarse.members.indptr)
        ranks = unit_ranks(coarse.scores, sizes > 0)
        kept = np.zeros(coarse.members.shape[1], dtype=bool)
        kept[coarse.kept] = True
        cand = distinct(coarse.members[:, coarse.kept].indices).astype(np.int64)
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
        cfg, view = self.config, self.fitted_view
        beta = cfg.beta
        members, _, _ = self._visible(limit)
        cos = self._cosines(q, limit).astype(np.float64)
        if cfg.candidates == "flat_top":
            order = self._flat_head(q, limit, cfg.candidate_ratio * budget)
            csum = np.cumsum(view.costs[order])
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

        return greedy_pack(score, cand, view.costs, budget, on_pick)

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
