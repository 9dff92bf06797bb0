"""Lexical baselines: BM25 alone and the textbook hybrid (BM25 + dense, reciprocal-rank
fusion), both under the shared first-fit packer.

* :class:`BM25Retriever` (``bm25``): steps by their BM25 score for the query's text
  (:class:`~osumem.retrieve.lexical.LexicalIndex` over the stored step texts, the
  English stoplist, k1 = 1.2, b = 0.75); steps the query's words do not reach follow
  in the dense (cosine) order, so the budget is filled the way Flat fills it.
* :class:`HybridRetriever` (``hybrid``): reciprocal-rank fusion (Cormack et al. 2009)
  of the dense ranking (cosine of the query vector with every step's embedding) and
  the BM25 ranking (steps with a positive score): ``1/(k + rank_dense) + 1/(k +
  rank_bm25)`` with k = 60, ranks from 1; a step BM25 does not reach gets only its dense
  term; ties by dense rank.

Without a query text (a query given as a vector only, or a benchmark whose queries have
no words, like the synthetic one) both rank by cosine alone and select exactly what
``flat`` selects. The index is built from :attr:`MemoryView.texts` at ``fit`` and
extended at each ``update`` (only the new steps are tokenised); ``state_arrays`` and
``load_state`` hold it as plain arrays for a snapshot (the retriever state protocol of
:mod:`osumem.retrieve.base`; nothing is shared between retrievers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np
from numpy.typing import NDArray

from osumem.errors import InvalidInputError
from osumem.frozen import Boolean, Constraints, Interval
from osumem.retrieve.base import ConfigT, Retriever, RetrieverConfig, RetrieverState
from osumem.retrieve.lexical import LEXICAL_STATE_FORMAT, LexicalIndex, fitted_index
from osumem.retrieve.packing import pack_first_fit
from osumem.types import IntArray, MemoryView

#: Prefix of the lexical index's arrays in a retriever's ``state_arrays``.
LEXICAL_KEY = "lexical."


@dataclass(frozen=True, kw_only=True)
class LexicalConfig(RetrieverConfig):
    """The BM25 index's parameters (textbook values: Lucene's k1 and b, the English
    stoplist, no stemming).

    Attributes:
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
        stem: strip plural endings (the "S" stemmer) from every term.
    """

    k1: float = 1.2
    b: float = 0.75
    stem: bool = False

    parameter_constraints: ClassVar[Constraints] = {
        "k1": Interval(float, 0, None),
        "b": Interval(float, 0, 1),
        "stem": Boolean(),
    }


@dataclass(frozen=True, kw_only=True)
class HybridConfig(LexicalConfig):
    """The textbook hybrid: ``rrf_k`` is the reciprocal-rank-fusion constant (60)."""

    rrf_k: float = 60.0

    config_name = "hybrid"
    parameter_constraints: ClassVar[Constraints] = {"rrf_k": Interval(float, 0, None)}


class LexicalMixin(Retriever[ConfigT]):
    """A retriever that keeps a :class:`LexicalIndex` over its view's step texts
    (``lexical_``), built at ``fit``, extended at ``update``, part of its snapshot
    arrays."""

    lexical_: LexicalIndex | None = None

    @property
    def fitted_lexical(self) -> LexicalIndex:
        """The lexical index built by ``fit`` (a :class:`~osumem.errors.NotFittedError`
        before)."""
        return fitted_index(self.lexical_, self)

    def _new_lexical(self) -> LexicalIndex:
        cfg: Any = self.config
        return LexicalIndex(k1=cfg.k1, b=cfg.b, stem=cfg.stem)

    def _build(self, view: MemoryView) -> None:
        self.lexical_ = self._new_lexical()
        self.lexical_.add(list(view.texts))

    def _extend_lexical(self, view: MemoryView) -> None:
        """Index the steps of ``view`` past those already indexed (the index is rebuilt
        when ``view`` is shorter: not an extension)."""
        index = self.lexical_
        if index is None or view.n < index.n:
            self.lexical_ = self._new_lexical()
            index = self.lexical_
        if view.n > index.n:
            index.add(list(view.texts[index.n : view.n]))

    def lexical_state(self) -> dict[str, Any]:
        """The lexical index's arrays under :data:`LEXICAL_KEY`-prefixed names."""
        return {LEXICAL_KEY + k: v for k, v in self.fitted_lexical.state().items()}

    def _load_lexical(self, view: MemoryView, state: Mapping[str, Any]) -> None:
        part = {k[len(LEXICAL_KEY) :]: v for k, v in state.items() if k.startswith(LEXICAL_KEY)}
        index = LexicalIndex.from_state(part)
        if index.n != view.n:
            raise ValueError(f"lexical index holds {index.n} steps, the view {view.n}")
        self.lexical_ = index

    def lexical_scores(
        self, text: str | None, positions: Any, *, limit: int | None = None
    ) -> NDArray[np.float64]:
        """The BM25 score of the steps at ``positions`` for the query ``text`` (what
        the lexical ranking of this retriever saw; 0 for a step the words miss)."""
        return self.fitted_lexical.scores(text, positions, limit=limit)


class _LexicalRetriever(LexicalMixin[ConfigT]):
    """BM25 / hybrid: a view, a lexical index and a ranking over both."""

    def update(self, view: MemoryView) -> Self:
        """Index only the new steps (no rebuild)."""
        if self.view_ is None or self.lexical_ is None:
            return self.fit(view)
        self._extend_lexical(view)
        self.step_index.extend_cost_stats(self.view_, view)
        self.view_ = view
        return self

    def state_format(self) -> tuple[Any, ...]:
        """The lexical index's layout version (it is the whole snapshot)."""
        return (LEXICAL_STATE_FORMAT,)

    def state_arrays(self) -> dict[str, Any]:
        """Everything a restore needs beside the view: the lexical index's arrays."""
        return self.lexical_state()

    def load_state(
        self, view: MemoryView, state: RetrieverState | Mapping[str, NDArray[Any]]
    ) -> Self:
        """Take ``state`` (from :meth:`state_arrays`, over ``view``) as the fitted
        structure."""
        if isinstance(state, RetrieverState):
            raise InvalidInputError(f"{type(self).__name__} shares no state; load its arrays")
        self._load_lexical(view, state)
        self.view_ = view
        self.step_index.reset()
        return self

    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        """No query text: the dense ranking, exactly Flat's selection."""
        return self._flat_pack(q, limit, budget)

    def _select_query(
        self,
        q: NDArray[np.float32],
        text: str | None,
        budget: int,
        limit: int,
        evidence: IntArray | None,
    ) -> IntArray:
        view, lexical = self.fitted_view, self.fitted_lexical
        docs, scores = lexical.ranking(text, limit)
        if docs.shape[0] == 0:
            return self._select(q, budget, limit, evidence)
        order = self._order(self._flat_order(q, limit), docs, scores)
        return pack_first_fit(order, view.costs, budget)

    def _order(self, dense: IntArray, docs: IntArray, scores: NDArray[np.float64]) -> IntArray:
        """The ranking of every visible step from the ``dense`` (cosine) order and the
        lexical matches ``docs`` (best first) with their ``scores``."""
        raise NotImplementedError


class BM25Retriever(_LexicalRetriever[LexicalConfig]):
    """BM25 over the step texts; steps the words miss follow in cosine order."""

    name = "bm25"
    Config = LexicalConfig

    def _order(self, dense: IntArray, docs: IntArray, scores: NDArray[np.float64]) -> IntArray:
        seen = np.zeros(dense.shape[0], dtype=bool)
        seen[docs] = True
        return np.concatenate([docs, dense[~seen[dense]]])


class HybridRetriever(_LexicalRetriever[HybridConfig]):
    """Reciprocal-rank fusion (k = 60) of the dense and the BM25 rankings."""

    name = "hybrid"
    Config = HybridConfig

    def _order(self, dense: IntArray, docs: IntArray, scores: NDArray[np.float64]) -> IntArray:
        k = self.config.rrf_k
        limit = dense.shape[0]
        fused = np.empty(limit, dtype=np.float64)
        fused[dense] = 1.0 / (k + np.arange(1, limit + 1, dtype=np.float64))
        fused[docs] += 1.0 / (k + np.arange(1, docs.shape[0] + 1, dtype=np.float64))
        # a stable sort over the dense order: ties go to the better dense rank
        return dense[np.argsort(-fused[dense], kind="stable")]
