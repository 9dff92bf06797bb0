"""OSU-Mem hybrid: every signal a step carries, with the adaptive method's safety.

:class:`HybridOSUMem` (``osumem_hybrid``) ranks the visible steps by a fused score and
then runs :class:`~osumem.retrieve.adaptive.AdaptiveOSUMem`'s per-query logic over that
ranking (OSU expansion only when the head of the ranking is bound by entity, tool or
subgoal OSUs; otherwise the ranking itself, packed first fit):

1. **Lexical score**: BM25 (:class:`~osumem.retrieve.lexical.LexicalIndex`, English
   stoplist, k1 = 1.2, b = 0.75) of the query text against each step's *scoring text*:
   its stored text plus the words of its ``context_fields`` (by default its source,
   e.g. a speaker's name, and its subgoal label, e.g. a dated session). Only scoring
   reads the context: what is returned and charged is the step as stored.
2. **Fusion**: ``lexical_weight · bm25 / max bm25 + (1 − lexical_weight) · (cos − min
   cos) / (max cos − min cos)`` over the visible steps (both parts in [0, 1]).
3. **Neighbours**: each step adds ``neighbour_weight`` times the better fused score of
   the steps just before and after it in the same subgoal segment (a reply carries the
   relevance of the turn it answers).
4. **Entities from text** (``entity_source``): the entity view of the OSU pool also
   takes the strings a step's text names (:func:`osumem.annotate.extract_text_entities`:
   names, dates, quantities, codes, e-mails; prefixed with the step's source when the
   memory prefixes its argument entities), so people's and tools' words form OSUs.

A query without text (a vector only) has no lexical score: the ranking is the cosine
one, and the rest is ``osumem_adaptive``'s; over steps without text (the synthetic
benchmark) there are no text entities either, and the selection is exactly
``osumem_adaptive``'s.
Defaults and their development-data measurements: docs/decisions.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Self, cast

import numpy as np
from numpy.typing import NDArray

from osumem.annotate import extract_text_entities, prefix_entities
from osumem.frozen import Boolean, Constraints, Interval, Options, Subset
from osumem.osu.pool import OSUPool
from osumem.retrieve.adaptive import AdaptiveConfig, AdaptiveOSUMem
from osumem.retrieve.hybrid import LEXICAL_KEY
from osumem.retrieve.lexical import LexicalIndex
from osumem.types import IntArray, MemoryView

#: The step columns whose words may join a step's scoring text.
CONTEXT_FIELDS: tuple[str, ...] = ("sources", "subgoals", "tool_actions")
ENTITY_SOURCES: tuple[str, ...] = ("arguments", "text", "both")


@dataclass(frozen=True, kw_only=True)
class HybridOSUMemConfig(AdaptiveConfig):
    """``osumem_adaptive``'s fields plus the lexical view, the fusion and the text
    entities.

    Attributes:
        k1, b, stem: the BM25 index (see :class:`~osumem.retrieve.hybrid.LexicalConfig`).
        lexical_weight: weight of the max-normalised BM25 score in the fusion (the
            min-max normalised cosine gets the rest).
        context_fields: view columns whose words join each step's scoring text
            (``sources``, ``subgoals``, ``tool_actions``).
        neighbour_weight: share of the better adjacent step's fused score (same
            subgoal) added to a step's score; 0 turns it off.
        entity_source: where the entity view's entities come from: ``"arguments"``
            (tool-call arguments, the paper's rule), ``"text"`` (the step text) or
            ``"both"``.
        expand: run the adaptive OSU expansion over the fused ranking; off, the
            fused ranking is packed first fit.
    """

    k1: float = 1.2
    b: float = 0.75
    stem: bool = False
    lexical_weight: float = 0.5
    context_fields: tuple[str, ...] = ("sources", "subgoals")
    neighbour_weight: float = 0.5
    entity_source: str = "both"
    expand: bool = True

    config_name = "osumem_hybrid"
    parameter_constraints: ClassVar[Constraints] = {
        "k1": Interval(float, 0, None),
        "b": Interval(float, 0, 1),
        "stem": Boolean(),
        "lexical_weight": Interval(float, 0, 1),
        "context_fields": Subset(CONTEXT_FIELDS, nonempty=False),
        "neighbour_weight": Interval(float, 0, None),
        "entity_source": Options(ENTITY_SOURCES),
        "expand": Boolean(),
    }


def scoring_text(view: MemoryView, i: int, fields: tuple[str, ...]) -> str:
    """Step ``i``'s text followed by the words of its ``fields`` columns."""
    parts = [str(view.texts[i])]
    parts += [str(getattr(view, f)[i]) for f in fields]
    return " ".join(p for p in parts if p)


class HybridOSUMem(AdaptiveOSUMem):
    """Fused dense + lexical ranking, neighbours, text entities, adaptive expansion."""

    name = "osumem_hybrid"
    Config = HybridOSUMemConfig

    lexical_: LexicalIndex | None = None
    _text_entities: list[frozenset[str]]

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
        (the memory prefixes them; text entities then follow suit)."""
        for ents, src in zip(view.entities, view.sources, strict=True):
            if ents and src:
                return all(str(e).startswith(f"{src}::") for e in ents)
        return False

    def _with_text_entities(self, view: MemoryView) -> MemoryView:
        """``view`` with the entity column the pool should see (text entities of the
        steps not yet extracted are computed once and kept)."""
        mode = self.cfg.entity_source
        if mode == "arguments":
            return view
        known = getattr(self, "_text_entities", None)
        if known is None or len(known) > view.n:
            known = self._text_entities = []
        prefixed = self._prefixed(view)
        for i in range(len(known), view.n):
            ents = extract_text_entities(str(view.texts[i]))
            src = str(view.sources[i])
            known.append(prefix_entities(src, ents) if prefixed and src else ents)
        if mode == "text":
            ents = tuple(known[: view.n])
        else:
            ents = tuple(a | t for a, t in zip(view.entities, known[: view.n], strict=True))
        return dataclasses.replace(view, entities=ents)

    # --- fit / update / state ----------------------------------------------------------

    def _build(self, view: MemoryView) -> None:
        self._text_entities = []
        super()._build(self._with_text_entities(view))
        self.lexical_ = self._new_lexical()
        self._index_texts(view)

    def _new_lexical(self) -> LexicalIndex:
        cfg = self.cfg
        return LexicalIndex(k1=cfg.k1, b=cfg.b, stem=cfg.stem)

    def _index_texts(self, view: MemoryView) -> None:
        index = self.lexical_
        assert index is not None
        fields = self.cfg.context_fields
        index.add([scoring_text(view, i, fields) for i in range(index.n, view.n)])

    def update(self, view: MemoryView) -> Self:
        """Add the new steps to the pool (with their text entities) and the index."""
        if self.pool_ is None or self.view_ is None or self.lexical_ is None:
            return self.fit(view)
        if view.n < self.lexical_.n:
            return self.fit(view)
        self.pool_.add(self._with_text_entities(view))
        self._extend_cost_stats(self.view_, view)
        self.view_ = view
        self._index_texts(view)
        return self

    def restore(self, view: MemoryView, pool: OSUPool) -> Self:
        """Take ``pool`` (built over this method's entity view of ``view``) and index
        the texts (the runner shares pools between methods of one construction)."""
        super().restore(view, pool)
        self._text_entities = []
        self._with_text_entities(view)
        self.lexical_ = self._new_lexical()
        self._index_texts(view)
        return self

    def state(self) -> dict[str, Any]:
        """The pool's state and the lexical index's arrays (``lexical.``-prefixed)."""
        assert self.pool_ is not None and self.lexical_ is not None
        out = dict(self.pool_.state())
        out.update({LEXICAL_KEY + k: v for k, v in self.lexical_.state().items()})
        return out

    def load_state(self, view: MemoryView, state: dict[str, Any]) -> Self:
        """Restore from :meth:`state` over ``view`` (``ValueError``/``KeyError`` for
        a state that does not fit)."""
        pool_state = {k: v for k, v in state.items() if not k.startswith(LEXICAL_KEY)}
        lex = {k[len(LEXICAL_KEY) :]: v for k, v in state.items() if k.startswith(LEXICAL_KEY)}
        index = LexicalIndex.from_state(lex)
        if index.n != view.n:
            raise ValueError(f"lexical index holds {index.n} steps, the view {view.n}")
        self._text_entities = []
        entity_view = self._with_text_entities(view)
        pool = OSUPool.from_state(entity_view, self.config.osu_config(), self.seed, pool_state)
        AdaptiveOSUMem.restore(self, view, pool)
        self.lexical_ = index
        return self

    def lexical_scores(
        self, text: str | None, positions: Any, *, limit: int | None = None
    ) -> NDArray[np.float64]:
        """The BM25 score of the steps at ``positions`` for the query ``text``, over
        their scoring texts (what the fusion read)."""
        if self.lexical_ is None:
            raise ValueError(f"{type(self).__name__}: call fit() first")
        return self.lexical_.scores(text, positions, limit=limit)

    # --- retrieval -----------------------------------------------------------------------

    def fused_scores(
        self, q: NDArray[np.float32], text: str | None, limit: int
    ) -> NDArray[np.float64]:
        """The fused score (lexical + dense, then neighbours) of every step before
        ``limit`` (see the module docstring)."""
        assert self.view_ is not None and self.lexical_ is not None
        cfg = self.cfg
        cos = self._cosines(q, limit).astype(np.float64)
        bm = self.lexical_.score_all(text, limit)
        top = float(bm.max()) if bm.shape[0] else 0.0
        lo, hi = float(cos.min()), float(cos.max())
        dense = (cos - lo) / (hi - lo) if hi > lo else np.zeros_like(cos)
        fused = (1.0 - cfg.lexical_weight) * dense
        if top > 0:
            fused += cfg.lexical_weight * (bm / top)
        if cfg.neighbour_weight > 0 and limit > 1:
            sg = self.view_.subgoals[:limit]
            same = sg[1:] == sg[:-1]
            prev = np.full(limit, -np.inf)
            nxt = np.full(limit, -np.inf)
            prev[1:] = np.where(same, fused[:-1], -np.inf)
            nxt[:-1] = np.where(same, fused[1:], -np.inf)
            best = np.maximum(prev, nxt)
            fused = fused + cfg.neighbour_weight * np.where(np.isfinite(best), best, 0.0)
        return fused

    def _select_query(
        self,
        q: NDArray[np.float32],
        text: str | None,
        budget: int,
        limit: int,
        evidence: IntArray | None,
    ) -> IntArray:
        assert self.lexical_ is not None and self.view_ is not None
        if not text or self.lexical_.query_terms(text).shape[0] == 0:
            return self._select(q, budget, limit, evidence)
        score = self.fused_scores(q, text, limit)
        order = np.argsort(-score, kind="stable").astype(np.int64)
        if not self.cfg.expand:
            from osumem.retrieve.base import pack_first_fit

            return pack_first_fit(order, self.view_.costs, budget)
        return self._select_ranked(q, budget, limit, evidence, order, score)
