"""Adaptive OSU-Mem: act on structure only when the query's evidence looks bound.

The paper's conclusion is conditional: OSUs pay when a query's evidence is bound by a
shared entity or tool, and cost when it is not. :class:`AdaptiveOSUMem` decides this per
query, from what a retriever can see (never the evidence):

1. **Binding test** (``gate="coverage"``, the default). Take the head of the flat cosine
   ranking (``seed_steps`` = 4 steps). The query *binds* when at least
   ``min_head_coverage`` (3 of 4) of those steps lie in some OSU of a binding view
   (entity, tool or subgoal): the best matches carry the keys that OSUs are built from,
   so OSU structure can say something about them. (``gate="shared"`` asks instead that
   one binding OSU hold ``min_shared`` head steps.)
2. **No binding: Flat.** The selection is exactly Flat Vector's, so on unbound queries
   the method cannot differ from Flat.
3. **Binding: coarse-to-fine inside the flat head.** Selected first: the top
   ``keep_head`` flat steps (none by default), then, when at least ``orphan_share`` of
   the steps Flat itself would select lie in no binding OSU, those steps
   (``protect_orphans``: structure cannot rank them, so expansion must not displace
   them), then the members of the OSUs the OSU-Mem coarse stage keeps
   (K = ceil(ρ·B / mean OSU cost)) that also lie in the head of the flat ranking holding
   ``head_ratio``·B tokens, by cosine (at most ``expand_share``·B tokens); the rest of
   the budget is filled from the flat ranking. ``expand_from="seeds"`` expands the OSUs
   that hold ``min_shared`` head steps instead of the coarse stage's.

The first version (``osumem_adaptive_v1``) protected every orphan (``orphan_share = 0``).

The pool is built like OSU-Mem's (same construction code and incremental ``update``)
but disjoint by default (``max_memberships = 1``), which measured better on the
development data; packing is the shared first-fit. Defaults and their development-data
measurements: docs/decisions.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from osumem.frozen import Boolean, Constraints, Interval, Options, Subset
from osumem.osu.config import VIEWS
from osumem.retrieve.explain import Part, SelectionParts, best_unit, unit_ranks
from osumem.retrieve.osumem import OSUMem, OSUMemConfig
from osumem.retrieve.packing import pack_first_fit
from osumem.types import IntArray, distinct

#: The large-memory path's head (``head_ratio``·B tokens, far past the query's cluster)
#: comes from one step-index query of beam (and width) this many times its steps, kept
#: unless the recall safeguard scans (docs/decisions.md, "osumem_adaptive at 100,000
#: steps").
HEAD_BEAM_PER_K = 2


@dataclass(frozen=True, kw_only=True)
class AdaptiveConfig(OSUMemConfig):
    """Adaptive OSU-Mem: the OSU-Mem fields (construction, disjoint by default, and the
    coarse stage used by ``expand_from="coarse"``) plus the binding test and the
    expansion.

    Attributes:
        seed_steps: how many top flat steps the binding test looks at.
        min_shared: a binding OSU holds at least this many of those head steps.
        binding_views: the views whose OSUs count as binding (entity, tool, subgoal;
            the similarity view groups by embedding alone, which says nothing the
            cosine ranking does not).
        keep_head: top flat steps always selected first when the query binds.
        expand_share: at most this share of the budget goes to expansion members.
        shared_bonus: score bonus per extra head step an expansion member's binding OSU
            holds (its cosine stays the main term).
        expand_from: ``"seeds"`` (members of the binding OSUs) or ``"coarse"`` (members of
            the OSUs OSU-Mem's coarse stage keeps).
        head_ratio: when > 0, expansion candidates must also lie in the head of the flat
            ranking holding ``head_ratio``·B tokens (expansion only reorders steps Flat
            already ranks high); 0 means no such restriction.
        gate: which test decides expansion: ``"shared"`` (some binding OSU holds
            ``min_shared`` head steps), ``"coverage"`` (at least ``min_head_coverage`` of
            the head steps lie in some binding OSU), ``"both"``, or ``"none"`` (always
            expand; an ablation).
        min_head_coverage: the coverage threshold of the ``"coverage"`` gate.
        protect_orphans: when expanding, the steps Flat itself would select that lie in
            no binding OSU are kept first (structure says nothing about them, so
            expansion must not displace them).
        orphan_share: the protection applies only when at least this share of the steps
            Flat would select lie in no binding OSU (0 = always, the first version's
            rule): a few stray orphans are left to compete with the expansion, a flat
            selection made largely of orphans (ToolBench-like memories) is kept.
    """

    max_memberships: int = 1
    seed_steps: int = 4
    min_shared: int = 2
    binding_views: tuple[str, ...] = ("entity", "tool", "subgoal")
    keep_head: int = 0
    expand_share: float = 1.0
    shared_bonus: float = 0.0
    expand_from: str = "coarse"
    head_ratio: float = 12.0
    gate: str = "coverage"
    min_head_coverage: float = 0.75
    protect_orphans: bool = True
    orphan_share: float = 0.25

    config_name = "osumem_adaptive"
    parameter_constraints: ClassVar[Constraints] = {
        "seed_steps": Interval(int, 2, None),
        "min_shared": Interval(int, 2, None),
        "binding_views": Subset(VIEWS),
        "keep_head": Interval(int, 0, None),
        "expand_share": Interval(float, 0, 1),
        "shared_bonus": Interval(float, 0, None),
        "expand_from": Options(("seeds", "coarse")),
        "head_ratio": Interval(float, 0, None),
        "gate": Options(("shared", "coverage", "both", "none")),
        "min_head_coverage": Interval(float, 0, 1),
        "protect_orphans": Boolean(),
        "orphan_share": Interval(float, 0, 1),
    }

    def _cross_check(self) -> list[str]:
        problems = super()._cross_check()
        if self.min_shared > max(self.seed_steps, 2):
            problems.append(
                f"min_shared must be in [2, seed_steps], got {self.min_shared} "
                f"with seed_steps {self.seed_steps}"
            )
        return problems


@dataclass(frozen=True)
class BindingDecision:
    """What the binding test saw for one query: the flat head, the binding OSUs (pool
    indices) and how many head steps each holds."""

    head: IntArray
    osus: IntArray
    shared: IntArray
    covered: NDArray[np.bool_]
    binds: bool


class AdaptiveOSUMem(OSUMem[AdaptiveConfig]):
    """Flat Vector unless the flat head is bound by OSUs; then coarse-to-fine inside it."""

    name = "osumem_adaptive"
    Config = AdaptiveConfig

    def binding(self, q: NDArray[np.float32], limit: int) -> BindingDecision:
        """Run the binding test for query ``q`` over the steps before ``limit``."""
        cfg = self.config
        cos = self._cosines(q, limit)
        head = np.argsort(-cos, kind="stable")[: cfg.seed_steps].astype(np.int64)
        return self._binding_from_head(head, limit)

    def _binding_from_head(self, head: IntArray, limit: int) -> BindingDecision:
        cfg = self.config
        pool = self.fitted_pool
        members, _, _ = self._visible(limit)
        codes = np.asarray(pool.view_codes)[: members.shape[1]]
        allowed = np.isin(codes, [VIEWS.index(v) for v in cfg.binding_views])
        bmembers = members[:, np.flatnonzero(allowed)]
        cols = np.flatnonzero(allowed).astype(np.int64)
        indicator = np.zeros(members.shape[0])
        indicator[head] = 1.0
        shared = np.rint(bmembers.T @ indicator).astype(np.int64)
        keep = shared >= cfg.min_shared
        osus, shared = cols[keep], shared[keep]
        covered = np.asarray(bmembers[head].sum(axis=1)).ravel() > 0
        coverage = float(covered.mean()) if head.size else 0.0
        shared_ok = bool(osus.size)
        cover_ok = head.size > 0 and coverage >= cfg.min_head_coverage
        binds = {
            "shared": shared_ok,
            "coverage": cover_ok,
            "both": shared_ok and cover_ok,
            "none": True,
        }[cfg.gate]
        return BindingDecision(head, osus, shared, covered, binds)

    def _in_binding_osu(self, limit: int) -> NDArray[np.bool_]:
        """Which of the steps before ``limit`` belong to some OSU of a binding view."""
        cfg = self.config
        pool = self.fitted_pool
        members, _, _ = self._visible(limit)
        codes = np.asarray(pool.view_codes)[: members.shape[1]]
        allowed = np.isin(codes, [VIEWS.index(v) for v in cfg.binding_views]).astype(np.float64)
        return np.asarray(members @ allowed).ravel()[:limit] > 0

    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        return self._stages(q, budget, limit, evidence).positions

    def _stages(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> AdaptiveStages:
        """The selection in its three parts (what ``_select`` returns, concatenated)."""
        if self._ann_path(limit):
            return self._stages_ann(q, budget)
        cos = self._cosines(q, limit)
        flat = np.argsort(-cos, kind="stable").astype(np.int64)
        return self._stages_ranked(q, budget, limit, evidence, flat, cos.astype(np.float64))

    def _stages_ranked(
        self,
        q: NDArray[np.float32],
        budget: int,
        limit: int,
        evidence: IntArray | None,
        flat: IntArray,
        cos: NDArray[np.float64],
    ) -> AdaptiveStages:
        """The method over a given ranking of the visible steps, in its three parts:
        ``flat`` (every step before ``limit``, best first) and the score ``cos`` it
        sorts by (Flat's cosine here; a subclass may rank by another score). The
        binding test reads the head of ``flat``, expansion candidates are ordered by
        ``cos``, orphans and the fill come from ``flat``."""
        view = self.fitted_view
        cfg = self.config
        costs = view.costs
        decision = self._binding_from_head(flat[: cfg.seed_steps], limit)
        none = np.empty(0, dtype=np.int64)
        if not decision.binds:
            return AdaptiveStages(decision, flat, none, none, pack_first_fit(flat, costs, budget))
        kept = None
        if cfg.expand_from == "coarse":
            coarse = self.coarse(q, budget, limit, evidence)
            kept = coarse.kept
            cand = distinct(coarse.members[:, coarse.kept].indices).astype(np.int64)
            score = cos[cand]
        else:
            members, _, _ = self._visible(limit)
            sub = members[:, decision.osus]
            bonus = np.zeros(limit)
            col_of = np.repeat(np.arange(sub.shape[1]), np.diff(sub.indptr))
            extra = (decision.shared - (cfg.min_shared - 1)).astype(np.float64)
            np.maximum.at(bonus, sub.indices, extra[col_of])
            cand = distinct(sub.indices).astype(np.int64)
            score = cos[cand] + cfg.shared_bonus * bonus[cand]
        if cfg.head_ratio > 0:
            csum = np.cumsum(costs[flat])
            n_head = int(np.searchsorted(csum, cfg.head_ratio * budget, side="right"))
            in_head = np.zeros(limit, dtype=bool)
            in_head[flat[: max(n_head, 1)]] = True
            keep = in_head[cand]
            cand, score = cand[keep], score[keep]
        cand = cand[np.argsort(-score, kind="stable")]
        head = flat[: cfg.keep_head]
        if cfg.protect_orphans:
            own = pack_first_fit(flat, costs, budget)
            orphans = own[~self._in_binding_osu(limit)[own]]
            if own.size and orphans.size >= cfg.orphan_share * own.size:
                head = np.concatenate([head, orphans[~np.isin(orphans, head)]])
        first = pack_first_fit(head, costs, budget)
        taken = np.zeros(limit, dtype=bool)
        taken[first] = True
        spent = int(costs[first].sum())
        expand_budget = min(int(cfg.expand_share * budget), budget - spent)
        expand = pack_first_fit(cand[~taken[cand]], costs, expand_budget)
        taken[expand] = True
        chosen = np.concatenate([first, expand])
        left = budget - int(costs[chosen].sum())
        fill = pack_first_fit(flat[~taken[flat]], costs, left) if left > 0 else chosen[:0]
        return AdaptiveStages(decision, flat, first, expand, fill, kept)

    def _ann_path(self, limit: int) -> bool:
        """Whether a query over the steps before ``limit`` takes the large-memory path
        (:meth:`_stages_ann`): the whole memory, from the step index's ranking, with
        the default coarse expansion (other settings scan exactly)."""
        cfg = self.config
        return (
            limit >= self.fitted_pool.n_steps
            and not self.is_oracle
            and cfg.expand_from == "coarse"
            and cfg.coarse_k_rule == "mean_cost"
            and self.step_index.uses_ann(self.fitted_view, limit)
        )

    def _binding_slots(self, steps: IntArray) -> list[list[int]]:
        """Per step, the live slots of a binding view it belongs to (read from the
        pool's row-ordered state: no membership matrix is assembled)."""
        slots = self.fitted_pool.slots
        codes = {VIEWS.index(v) for v in self.config.binding_views}
        kept, view_code, size = slots.kept.a, slots.view_code.a, slots.k_size.a
        return [
            [int(g) for g in kept[int(p)] if g >= 0 and size[g] > 0 and int(view_code[g]) in codes]
            for p in steps.tolist()
        ]

    def _stages_ann(self, q: NDArray[np.float32], budget: int) -> AdaptiveStages:
        """:meth:`_stages` of a large memory queried whole: the same rules over the
        head of the flat ranking the step index gives (HNSW, with its recall
        safeguard) instead of a sort of every step. The head holds the
        ``head_ratio``·B tokens expansion is restricted to and comes from one index
        query (:meth:`~osumem.retrieve.step_index.StepIndex.top_wide`, beam
        :data:`HEAD_BEAM_PER_K` times its steps); Flat's own selection and the fill
        are first fits of the index's growing heads (what
        :meth:`~osumem.retrieve.step_index.StepIndex.pack` does), read from that
        query's answer while they fit in it; the coarse stage is OSU-Mem's slot-level
        one. With an exact ranking the selection is the exact path's
        (tests/retrieve/test_step_index_ann_recall.py)."""
        cfg = self.config
        view = self.fitted_view
        costs = view.costs
        n = view.n
        head = self.step_index.head(
            view, q, n, max(cfg.head_ratio, 1.0) * budget, cfg.seed_steps, HEAD_BEAM_PER_K
        )
        hcos = (view.embeddings[head] @ q).astype(np.float64)
        order = np.lexsort((head, -hcos))
        head, hcos = head[order], hcos[order]
        seeds = head[: cfg.seed_steps]
        per_step = self._binding_slots(seeds)
        counts: dict[int, int] = {}
        for own_slots in per_step:
            for g in set(own_slots):
                counts[g] = counts.get(g, 0) + 1
        shared_slots = sorted(g for g, c in counts.items() if c >= cfg.min_shared)
        osus = np.asarray(shared_slots, dtype=np.int64)
        shared = np.asarray([counts[g] for g in shared_slots], dtype=np.int64)
        covered = np.asarray([bool(x) for x in per_step], dtype=bool)
        cover_ok = seeds.size > 0 and float(covered.mean()) >= cfg.min_head_coverage
        binds = {
            "shared": bool(osus.size),
            "coverage": cover_ok,
            "both": bool(osus.size) and cover_ok,
            "none": True,
        }[cfg.gate]
        decision = BindingDecision(seeds, osus, shared, covered, binds)
        none = np.empty(0, dtype=np.int64)
        if not binds:
            return AdaptiveStages(decision, head, none, none, self._flat_pack(q, n, budget))
        cand = self._coarse_positions(q, budget)
        if cfg.head_ratio > 0:
            csum = np.cumsum(costs[head])
            n_head = int(np.searchsorted(csum, cfg.head_ratio * budget, side="right"))
            cand = np.intersect1d(cand, head[: max(n_head, 1)]).astype(np.int64)
        score = view.embeddings[cand] @ q
        cand = cand[np.argsort(-score, kind="stable")]
        first_head = head[: cfg.keep_head]
        if cfg.protect_orphans:
            own = self._flat_pack(q, n, budget)
            orphans = own[[not x for x in self._binding_slots(own)]]
            if own.size and orphans.size >= cfg.orphan_share * own.size:
                first_head = np.concatenate([first_head, orphans[~np.isin(orphans, first_head)]])
        first = pack_first_fit(first_head, costs, budget)
        spent = int(costs[first].sum())
        expand_budget = min(int(cfg.expand_share * budget), budget - spent)
        expand = pack_first_fit(cand[~np.isin(cand, first)], costs, expand_budget)
        chosen = np.concatenate([first, expand]).astype(np.int64)
        left = budget - int(costs[chosen].sum())
        fill = self._flat_pack(q, n, left, exclude=chosen) if left > 0 else chosen[:0]
        return AdaptiveStages(decision, head, first, expand, fill)

    def explain_selection(
        self,
        q: NDArray[np.float32],
        text: str | None,
        budget: int,
        limit: int,
        positions: IntArray,
    ) -> SelectionParts:
        """The binding decision, and per step the part that took it: the flat ranking
        (a query that does not bind), the protected flat head, the unit expansion (the
        best-ranked kept unit holding the step brought it in) or the flat fill."""
        stages = self._stages(q, budget, limit, None)
        d = stages.decision
        summary: dict[str, Part] = {
            "binds": bool(d.binds),
            "head_coverage": float(d.covered.mean()) if d.head.size else 0.0,
            "gate": self.config.gate,
        }
        if not d.binds:
            return SelectionParts(
                stages=dict.fromkeys(np.asarray(positions).tolist(), "flat ranking"),
                candidates=stages.flat,
                candidates_label="the flat ranking (the query does not bind)",
                summary=summary,
            )
        members, centroids, _ = self._visible(limit)
        ranks = unit_ranks(centroids @ q, np.diff(members.indptr) > 0)
        allowed = None
        if stages.kept is not None:
            allowed = np.zeros(members.shape[1], dtype=bool)
            allowed[stages.kept] = True
        rows = members.tocsr()
        label: dict[int, str] = {}
        brought: dict[int, int] = {}
        for name, part in (
            ("flat head", stages.first),
            ("unit expansion", stages.expand),
            ("flat fill", stages.fill),
        ):
            for p in part.tolist():
                label[int(p)] = name
                if name == "unit expansion":
                    own = rows.indices[rows.indptr[p] : rows.indptr[p + 1]]
                    unit = best_unit(own, ranks, allowed)
                    if unit is not None:
                        brought[int(p)] = unit
        head = np.concatenate([stages.first, stages.expand])
        rest = stages.flat[~np.isin(stages.flat, head)]
        return SelectionParts(
            stages=label,
            brought_by=brought,
            candidates=np.concatenate([head, rest]),
            candidates_label="the protected head and the unit expansion, then the flat ranking",
            kept_units=stages.kept,
            summary=summary,
        )


@dataclass(frozen=True)
class AdaptiveStages:
    """One selection of :class:`AdaptiveOSUMem` in its parts: the binding decision, the
    flat ranking, the protected head taken first, the unit expansion, the flat fill
    (the whole selection when the query does not bind) and the OSUs the coarse stage
    kept (``None`` unless it ran)."""

    decision: BindingDecision
    flat: IntArray
    first: IntArray
    expand: IntArray
    fill: IntArray
    kept: IntArray | None = None

    @property
    def positions(self) -> IntArray:
        """The selection, in selection order."""
        return np.concatenate([self.first, self.expand, self.fill])
