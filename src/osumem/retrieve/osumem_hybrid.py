"""OSU-Mem hybrid: every signal a step carries, with the adaptive method's safety.

:class:`HybridOSUMem` (``osumem_hybrid``) answers a query with words by a fused ranking
and a query given as a vector only by :class:`~osumem.retrieve.adaptive.AdaptiveOSUMem`
(OSU expansion only when the head of the cosine ranking is bound by entity, tool or
subgoal OSUs):

1. **Lexical score**: BM25 (:class:`~osumem.retrieve.lexical.LexicalIndex`, English
   stoplist, k1 = 1.2, b = 0.75) of the query text against each step's *scoring text*:
   its stored text plus the words of its ``context_fields`` (by default its source,
   e.g. a speaker's name, and its subgoal label, e.g. a dated session). Only scoring
   reads the context: what is returned and charged is the step as stored.
2. **Neighbours**: each step's lexical score adds ``neighbour_weight`` (.5) times the
   better score of the steps just before and after it in the same subgoal segment (a
   reply carries the words of the turn it answers).
3. **Fusion**: reciprocal-rank fusion (k = 60) of the dense ranking (cosine of the
   query vector with the stored embeddings) and that lexical ranking, ties by dense
   rank, packed first fit. From :attr:`ann_min_steps` steps on, the dense ranking's
   head comes from the HNSW step index and the dense rank of a lexical match outside
   it is estimated from a fixed sample of steps (approximate, like Flat's ANN path).
4. **Entities from text** (``entity_source="fallback"``): a step whose tool-call
   arguments name no entity takes the strings its text names
   (:func:`osumem.annotate.extract_text_entities`: names, dates, quantities, codes,
   e-mails; prefixed with the step's source when the memory prefixes its argument
   entities), so the entity view also groups what people say (chat turns, user
   messages); steps with argument entities keep exactly those.

On development data (docs/decisions.md) running the adaptive OSU expansion over the
fused ranking lost on every benchmark whose queries have words (``expand_text=True``
keeps it as an option), so words get the fused ranking and vectors the expansion.
Over a memory whose steps all carry argument entities (the synthetic benchmark) and a
query without text, the selection is exactly ``osumem_adaptive``'s.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self, cast

import numpy as np
from numpy.typing import NDArray

from osumem.annotate import extract_text_entities, prefix_entities
from osumem.frozen import Boolean, Constraints, Interval, Options, Subset
from osumem.osu.pool import OSUPool
from osumem.retrieve.adaptive import AdaptiveConfig, AdaptiveOSUMem
from osumem.retrieve.base import RetrieverState
from osumem.retrieve.hybrid import LEXICAL_KEY
from osumem.retrieve.lexical import LexicalIndex, fitted_index
from osumem.retrieve.packing import pack_first_fit, pack_ranked_heads, top_order
from osumem.retrieve.step_index import ANN_HEAD_MIN
from osumem.types import EntityPrefix, IntArray, MemoryView, distinct

#: Up to this many visible steps the fused ranking is computed over every step (full
#: reciprocal-rank fusion); above, over the heads of both rankings (``_head_fused``).
EXACT_FUSION_MAX = 4096

#: Steps whose cosines estimate the dense rank of a lexical match outside the step
#: index's head (large memories).
RANK_SAMPLE = 2048

#: The step columns whose words may join a step's scoring text.
CONTEXT_FIELDS: tuple[str, ...] = ("sources", "subgoals", "tool_actions")
ENTITY_SOURCES: tuple[str, ...] = ("arguments", "fallback", "text", "both")


@dataclass(frozen=True, kw_only=True)
class HybridOSUMemConfig(AdaptiveConfig):
    """``osumem_adaptive``'s fields plus the lexical view, the fusion and the text
    entities.

    Attributes:
        k1, b, stem: the BM25 index (see :class:`~osumem.retrieve.hybrid.LexicalConfig`).
        fusion: ``"rrf"``: reciprocal-rank fusion of the dense ranking and the
            lexical ranking, ``1/(rrf_k + rank)`` each; ``"scores"``: a convex
            combination of the max-normalised lexical score (``lexical_weight``) and
            the min-max normalised cosine.
        rrf_k: the reciprocal-rank-fusion constant.
        lexical_weight: weight of the lexical score when ``fusion="scores"``.
        context_fields: view columns whose words join each step's scoring text
            (``sources``, ``subgoals``, ``tool_actions``).
        neighbour_weight: share of the better adjacent step's score (same subgoal)
            added to a step's score; 0 turns it off.
        neighbour_on: which score the neighbours share: ``"lexical"`` (the BM25
            score, before fusion) or ``"fused"``.
        entity_source: where the entity view's entities come from: ``"arguments"``
            (tool-call arguments, the paper's rule), ``"fallback"`` (the arguments;
            a step whose arguments name none takes the entities of its text),
            ``"text"`` (the step text only) or ``"both"``.
        expand_text: run the adaptive OSU expansion over the fused ranking for a
            query with text too; off (the default, measured on development data), such
            a query gets the fused ranking packed first fit, and the expansion serves
            queries given as vectors only.
    """

    k1: float = 1.2
    b: float = 0.75
    stem: bool = False
    fusion: str = "rrf"
    rrf_k: float = 60.0
    lexical_weight: float = 0.5
    context_fields: tuple[str, ...] = ("sources", "subgoals")
    neighbour_weight: float = 0.5
    neighbour_on: str = "lexical"
    entity_source: str = "fallback"
    expand_text: bool = False

    config_name = "osumem_hybrid"
    parameter_constraints: ClassVar[Constraints] = {
        "k1": Interval(float, 0, None),
        "b": Interval(float, 0, 1),
        "stem": Boolean(),
        "fusion": Options(("rrf", "scores")),
        "rrf_k": Interval(float, 0, None),
        "lexical_weight": Interval(float, 0, 1),
        "neighbour_on": Options(("lexical", "fused")),
        "context_fields": Subset(CONTEXT_FIELDS, nonempty=False),
        "neighbour_weight": Interval(float, 0, None),
        "entity_source": Options(ENTITY_SOURCES),
        "expand_text": Boolean(),
    }


def scoring_text(view: MemoryView, i: int, fields: tuple[str, ...]) -> str:
    """Step ``i``'s text followed by the words of its ``fields`` columns."""
    parts = [str(view.texts[i])]
    parts += [str(getattr(view, f)[i]) for f in fields]
    return " ".join(p for p in parts if p)


def lexical_head(matched: IntArray, bm: NDArray[np.float64], k: int) -> IntArray:
    """The ``k`` best of the steps ``matched`` (ascending) by their lexical score
    ``bm``, best first, ties by position. Which of several steps tied at the ``k``-th
    score get in is argpartition's choice over ``matched`` in ascending order (what
    the evaluated selections used)."""
    lex, lex_bm = matched, bm
    if lex.shape[0] > k:
        top = np.argpartition(-lex_bm, k - 1)[:k]
        lex, lex_bm = lex[top], lex_bm[top]
    return lex[np.lexsort((lex, -lex_bm))]


class HybridOSUMem(AdaptiveOSUMem):
    """Fused dense + lexical ranking, neighbours, text entities, adaptive expansion."""

    name = "osumem_hybrid"
    Config = HybridOSUMemConfig

    lexical_: LexicalIndex | None = None

    @property
    def fitted_lexical(self) -> LexicalIndex:
        """The lexical index built by ``fit``."""
        return fitted_index(self.lexical_, self)

    _text_entities: list[frozenset[str]]
    _combined: list[frozenset[str]]
    _prefix_state: tuple[bool | None, int] = (None, 0)
    _sample: tuple[int, NDArray[np.float32], int] | None = None
    _same: NDArray[np.bool_] | None = None
    _same_buf: NDArray[np.bool_] | None = None

    @property
    def cfg(self) -> HybridOSUMemConfig:
        """The config, typed."""
        return cast(HybridOSUMemConfig, self.config)

    def pool_variant(self) -> str | None:
        """The entity source, when the pool is built over more than the arguments
        (pools of equal construction settings but other entities are not shared)."""
        mode = self.cfg.entity_source
        return None if mode == "arguments" else f"entities:{mode}"

    # --- the entity view ---------------------------------------------------------------

    def _prefixed(self, view: MemoryView) -> bool:
        """Whether the view's argument entities carry their step's source prefix
        (the memory prefixes them; text entities then follow suit): read from the
        first step that has argument entities and a source (remembered once found;
        the scan resumes where it stopped)."""
        state = self._prefix_state
        if state[0] is not None:
            return state[0]
        for i in range(state[1], view.n):
            ents, src = view.entities[i], view.sources[i]
            if ents and src:
                found = all(str(e).startswith(f"{src}::") for e in ents)
                self._prefix_state = (found, i)
                return found
        self._prefix_state = (None, view.n)
        return False

    def _with_text_entities(self, view: MemoryView) -> MemoryView:
        """``view`` with the entity column the pool should see. Text entities and the
        combined column are kept and extended by the new steps only, so an add costs
        O(new steps)."""
        mode = self.cfg.entity_source
        if mode == "arguments":
            return view
        known = self._text_entities
        if len(known) > view.n:
            self._reset_entities()
            known = self._text_entities
        prefixed = self._prefixed(view)
        combined = self._combined
        start = len(combined)
        for i in range(len(known), view.n):
            found = extract_text_entities(str(view.texts[i]))
            src = str(view.sources[i])
            known.append(prefix_entities(src, found) if prefixed and src else found)
        args = view.entities
        if mode == "text":
            combined.extend(known[start : view.n])
        elif mode == "fallback":
            combined.extend(args[i] or known[i] for i in range(start, view.n))
        else:
            combined.extend(args[i] | known[i] for i in range(start, view.n))
        # the first view.n entries of the growing column, not a copy of them
        column = cast(tuple[frozenset[str], ...], EntityPrefix(combined, view.n))
        return dataclasses.replace(view, entities=column)

    def _reset_entities(self) -> None:
        self._text_entities = []
        self._combined = []
        self._prefix_state = (None, 0)

    # --- fit / update / state ----------------------------------------------------------

    def _build(self, view: MemoryView) -> None:
        self._reset_entities()
        self._sample = None
        super()._build(self._with_text_entities(view))
        self.lexical_ = self._new_lexical()
        self._index_texts(view)

    def _new_lexical(self) -> LexicalIndex:
        cfg = self.cfg
        return LexicalIndex(k1=cfg.k1, b=cfg.b, stem=cfg.stem)

    def _index_texts(self, view: MemoryView) -> None:
        index = self.lexical_
        assert index is not None
        # same[i]: steps i and i + 1 share a subgoal segment (kept incrementally, in a
        # buffer that doubles, so an add costs O(new steps))
        start = max(index.n - 1, 0)
        sg = view.subgoals
        tail = np.asarray(sg[start + 1 : view.n] == sg[start : view.n - 1], dtype=bool)
        buf = self._same_buf if index.n else None
        if buf is None or buf.shape[0] < start + tail.shape[0]:
            grown = np.zeros(max(16, 2 * (start + tail.shape[0])), dtype=bool)
            if buf is not None:
                grown[:start] = buf[:start]
            buf = grown
        buf[start : start + tail.shape[0]] = tail
        self._same_buf = buf
        self._same = buf[: start + tail.shape[0]]
        fields = self.cfg.context_fields
        index.add([scoring_text(view, i, fields) for i in range(index.n, view.n)])

    def update(self, view: MemoryView) -> Self:
        """Add the new steps to the pool (with their text entities) and the index."""
        if self.pool_ is None or self.view_ is None or self.lexical_ is None:
            return self.fit(view)
        if view.n < self.lexical_.n:
            return self.fit(view)
        self._own_refreshes()
        self.pool_.add(self._with_text_entities(view))
        self.step_index.extend_cost_stats(self.view_, view)
        self.view_ = view
        self._index_texts(view)
        return self

    def state_arrays(self) -> dict[str, Any]:
        """The pool's arrays and the lexical index's (``lexical.``-prefixed)."""
        return self.state_arrays_later()()

    def state_arrays_later(self) -> Callable[[], dict[str, Any]]:
        """:meth:`state_arrays` in two parts: the pool's (:meth:`OSUPool.state_later
        <osumem.osu.pool.OSUPool.state_later>`), the lexical index's copied now."""
        pool = self.fitted_pool.state_later()
        lexical = {
            LEXICAL_KEY + k: np.array(v, copy=True) for k, v in self.fitted_lexical.state().items()
        }
        return lambda: {**pool(), **lexical}

    def load_state(
        self, view: MemoryView, state: RetrieverState | Mapping[str, NDArray[Any]]
    ) -> Self:
        """A shared pool (a :class:`RetrieverState`, built over this method's entity
        view of ``view``: the runner shares pools between methods of one
        construction) with the texts indexed again, or :meth:`state_arrays` over
        ``view`` (``ValueError``/``KeyError`` for arrays that do not fit)."""
        if isinstance(state, RetrieverState):
            super().load_state(view, state)
            self._reset_entities()
            self._sample = None
            self._with_text_entities(view)
            self.lexical_ = self._new_lexical()
            self._index_texts(view)
            return self
        pool_state = {k: v for k, v in state.items() if not k.startswith(LEXICAL_KEY)}
        lex = {k[len(LEXICAL_KEY) :]: v for k, v in state.items() if k.startswith(LEXICAL_KEY)}
        index = LexicalIndex.from_state(lex)
        if index.n != view.n:
            raise ValueError(f"lexical index holds {index.n} steps, the view {view.n}")
        self._reset_entities()
        entity_view = self._with_text_entities(view)
        pool = OSUPool.from_state(entity_view, self.config.osu_config(), self.seed, pool_state)
        self._take_pool(view, pool)
        self.lexical_ = index
        self._same_buf = np.asarray(view.subgoals[1:] == view.subgoals[:-1], dtype=bool)
        self._same = self._same_buf
        self._sample = None
        return self

    def lexical_scores(
        self, text: str | None, positions: Any, *, limit: int | None = None
    ) -> NDArray[np.float64]:
        """The BM25 score of the steps at ``positions`` for the query ``text``, over
        their scoring texts (what the fusion read)."""
        return self.fitted_lexical.scores(text, positions, limit=limit)

    # --- retrieval -----------------------------------------------------------------------

    def _neighbours(
        self, score: NDArray[np.float64], limit: int, *, in_place: bool = False
    ) -> NDArray[np.float64]:
        """``score`` plus ``neighbour_weight`` times the better score of the steps
        just before and after (same subgoal segment); only steps next to a positive
        score change (``in_place``: ``score`` itself is updated and returned)."""
        beta = self.cfg.neighbour_weight
        if beta <= 0 or limit < 2:
            return score
        assert self._same is not None
        same = self._same[: limit - 1]
        hit = np.flatnonzero(score[:limit])
        if hit.shape[0] == 0:
            return score
        near = np.zeros(limit + 1, dtype=bool)
        near[hit + 1] = True
        near[hit[hit > 0] - 1] = True
        at = np.flatnonzero(near[:limit])
        best = np.zeros(at.shape[0])
        left = at > 0
        best[left] = np.where(same[at[left] - 1], score[at[left] - 1], 0.0)
        right = at < limit - 1
        best[right] = np.maximum(best[right], np.where(same[at[right]], score[at[right] + 1], 0.0))
        out = score if in_place else score.copy()
        out[at] += beta * best
        return out

    def _neighbours_sparse(
        self, hits: IntArray, score: NDArray[np.float64], limit: int
    ) -> tuple[IntArray, NDArray[np.float64]]:
        """:meth:`_neighbours` of a sparse score: ``hits`` (ascending positions below
        ``limit``) with their nonzero ``score``, every other step 0. Returns the
        positions whose score is nonzero afterwards, ascending, and those scores:
        the nonzero entries of the dense pass, the same floating-point operations on
        the same values, in O(hits) instead of O(limit)."""
        beta = self.cfg.neighbour_weight
        if beta <= 0 or limit < 2 or hits.shape[0] == 0:
            return hits, score
        assert self._same is not None
        same = self._same
        m = hits.shape[0]
        # what hit i offers the step after it and the step before it (same[j]: steps
        # j and j + 1 share a segment); indices clipped where the slot is unused
        to_next = np.where(same[np.minimum(hits, limit - 2)], score, 0.0)
        to_prev = np.where(same[np.maximum(hits - 1, 0)], score, 0.0)
        gap = np.diff(hits)
        following = to_prev[1:]
        # three slots per hit i, ascending where used: h_i, h_i + 1 (used when
        # free), h_(i+1) - 1 (used when free and not h_i + 1)
        pos = np.empty((m, 3), dtype=np.int64)
        pos[:, 0] = hits
        pos[:, 1] = hits + 1
        pos[:-1, 2] = hits[1:] - 1
        pos[-1, 2] = 0
        val = np.zeros((m, 3))
        # the hit: its own score plus beta times the better offer of adjacent hits
        adjacent = gap == 1
        best = np.zeros(m)
        best[1:] = np.where(adjacent, to_next[:-1], 0.0)
        np.maximum(best[:-1], np.where(adjacent, following, 0.0), out=best[:-1])
        val[:, 0] = score + beta * best
        # the step after it: the hit's offer, or the next hit's two steps on
        after = to_next.copy()
        np.maximum(after[:-1], np.where(gap == 2, following, 0.0), out=after[:-1])
        val[:, 1] = beta * after
        # the step before the next hit: that hit's offer
        val[:-1, 2] = beta * following
        keep = val != 0
        keep[:-1, 1] &= gap >= 2
        keep[-1, 1] &= bool(hits[-1] + 1 < limit)
        keep[:-1, 2] &= gap >= 3
        keep[-1, 2] = False
        pos, val = pos[keep], val[keep]
        if hits[0] > 0 and beta * to_prev[0] != 0:  # the step before the first hit
            pos = np.concatenate([hits[:1] - 1, pos])
            val = np.concatenate([beta * to_prev[:1], val])
        return pos, val

    def fused_scores(
        self, q: NDArray[np.float32], text: str | None, limit: int
    ) -> NDArray[np.float64]:
        """The fused score (dense and lexical, with neighbours) of every step before
        ``limit`` (see the module docstring)."""
        cfg = self.cfg
        cos = self._cosines(q, limit).astype(np.float64)
        bm = self.fitted_lexical.score_all(text, limit)
        if cfg.neighbour_on == "lexical":
            bm = self._neighbours(bm, limit, in_place=True)
        if cfg.fusion == "rrf":
            dense = np.argsort(-cos, kind="stable")
            fused = np.empty(limit)
            fused[dense] = 1.0 / (cfg.rrf_k + np.arange(1, limit + 1, dtype=np.float64))
            lex = np.flatnonzero(bm > 0)
            lex = lex[np.lexsort((lex, -bm[lex]))]
            fused[lex] += 1.0 / (cfg.rrf_k + np.arange(1, lex.shape[0] + 1, dtype=np.float64))
        else:
            top = float(bm.max()) if bm.shape[0] else 0.0
            lo, hi = float(cos.min()), float(cos.max())
            fused = (1.0 - cfg.lexical_weight) * (
                (cos - lo) / (hi - lo) if hi > lo else np.zeros_like(cos)
            )
            if top > 0:
                fused += cfg.lexical_weight * (bm / top)
        if cfg.neighbour_on == "fused":
            fused = self._neighbours(fused, limit)
        return fused

    def _select_query(
        self,
        q: NDArray[np.float32],
        text: str | None,
        budget: int,
        limit: int,
        evidence: IntArray | None,
    ) -> IntArray:
        view = self.fitted_view
        if not text or self.fitted_lexical.query_terms(text).shape[0] == 0:
            return self._select(q, budget, limit, evidence)
        if limit > EXACT_FUSION_MAX and not self.cfg.expand_text and self.cfg.fusion == "rrf":
            return self._head_fused(q, text, budget, limit)
        score = self.fused_scores(q, text, limit)
        order = np.argsort(-score, kind="stable").astype(np.int64)
        if not self.cfg.expand_text:
            return pack_first_fit(order, view.costs, budget)
        return self._stages_ranked(q, budget, limit, evidence, order, score).positions

    def _rank_sample(self, n: int) -> NDArray[np.float32]:
        """The embeddings of a fixed, seeded sample of :data:`RANK_SAMPLE` of the first
        ``n`` steps (kept, contiguous, until the memory grows by a quarter)."""
        view = self.fitted_view
        cached = self._sample
        if cached is None or not (cached[0] <= n < 1.25 * cached[0]) or cached[2] != self.seed:
            rng = np.random.default_rng([self.seed, 17])
            k = min(n, RANK_SAMPLE)
            rows = np.sort(rng.choice(n, size=k, replace=False))
            cached = (n, np.ascontiguousarray(view.embeddings[rows]), self.seed)
            self._sample = cached
        return cached[1]

    def _head_fused(self, q: NDArray[np.float32], text: str, budget: int, limit: int) -> IntArray:
        """The fused ranking of a large memory (over :data:`EXACT_FUSION_MAX` steps):
        reciprocal-rank fusion of the dense ranking's top ``k`` (an exact scan, or the
        HNSW step index from :attr:`ann_min_steps` steps on) and the top ``k`` by
        lexical score, a lexical match outside the dense top ranked by an estimate
        (the share of a fixed sample of steps with a higher cosine), packed first
        fit; ``k`` grows (×4) while budget is left that an unseen step could use. No
        step is sorted beyond the candidates."""
        # the lexical score with neighbours, on the steps where it is nonzero only
        hits, hit_scores = self.fitted_lexical.matches(text, limit)
        matched, bm = self._neighbours_sparse(hits, hit_scores, limit)
        return self._pack_fused_heads(q, budget, limit, matched, bm)

    def _pack_fused_heads(
        self,
        q: NDArray[np.float32],
        budget: int,
        limit: int,
        matched: IntArray,
        bm: NDArray[np.float64],
    ) -> IntArray:
        """:meth:`_head_fused` from the lexical score: ``bm`` at the steps
        ``matched`` (ascending), every other step 0."""
        view = self.fitted_view
        costs = view.costs
        rrf_k = self.cfg.rrf_k
        ann = self.step_index.uses_ann(view, limit)
        cos_all = None if ann else self._cosines(q, limit)
        samples: list[NDArray[np.float32]] = []
        mean_cost, min_cost, _ = self.step_index.cost_stats(view)

        def sorted_sample() -> NDArray[np.float32]:
            """The sample's cosines, ascending (computed once, when first needed)."""
            if not samples:
                sample = self._rank_sample(limit) @ q
                sample.sort()
                samples.append(sample)
            return samples[0]

        def fused_head(k: int) -> IntArray:
            """The candidates of the dense and lexical tops ``k``, by fused rank."""
            head = self.step_index.top(view, q, k) if cos_all is None else top_order(cos_all, k)
            lex = lexical_head(matched, bm, k)
            cand = distinct(np.concatenate([head, lex]))
            fused = np.zeros(cand.shape[0])
            dense_rank = np.full(cand.shape[0], limit + 1, dtype=np.float64)
            rows = np.searchsorted(cand, head)
            fused[rows] += 1.0 / (rrf_k + np.arange(1, head.shape[0] + 1))
            dense_rank[rows] = np.arange(1, head.shape[0] + 1)
            out = np.flatnonzero(dense_rank > limit)
            if out.shape[0]:
                sample = sorted_sample()
                cos_out = view.embeddings[cand[out]] @ q
                above = sample.shape[0] - np.searchsorted(sample, cos_out, side="right")
                est = np.maximum(head.shape[0] + 1, np.rint(limit * above / sample.shape[0]))
                order_out = np.lexsort((-cos_out, est))
                ranks = np.maximum.accumulate(est[order_out] + np.arange(out.shape[0]))
                fused[out[order_out]] += 1.0 / (rrf_k + ranks)
                dense_rank[out[order_out]] = ranks
            rows = np.searchsorted(cand, lex)
            fused[rows] += 1.0 / (rrf_k + np.arange(1, lex.shape[0] + 1))
            return cand[np.lexsort((cand, dense_rank, -fused))]

        first = min(limit, max(ANN_HEAD_MIN, 4 * math.ceil(budget / mean_cost)))
        return pack_ranked_heads(fused_head, costs, budget, n=limit, first=first, min_cost=min_cost)
