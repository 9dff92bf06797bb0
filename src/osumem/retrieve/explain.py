"""What a retriever can say about one of its selections (the parts of an explanation).

:func:`osumem.memory.explain.explain` builds the explanation of a retrieval from what
every method has (each step's cosine with the query and its rank in the flat cosine
ranking; for methods over an OSU pool, the units a step sits in and each unit's rank by
centroid cosine, the coarse-stage rank). A method adds its own parts through an
optional hook on the retriever::

    def explain_selection(self, q, text, budget, limit, positions) -> SelectionParts

called with the query vector (as :meth:`Retriever.retrieve_unit` takes it), the query
text (or ``None``), the budget, the visible limit and the positions the method selected
for exactly these arguments. It returns a :class:`SelectionParts`: how each step got in
(its stage), the unit that brought it in, numbers of its own, the candidates in the
order the method considered them (so the explanation can say what the budget left out)
and method-level facts. The hook only reads; it must not change the retriever.

A method with a lexical index contributes each step's lexical score through
:func:`lexical_scores`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from osumem.types import IntArray

#: A value of a method's own part: a number, a flag or a short label.
Part = float | int | bool | str


@dataclass(frozen=True)
class SelectionParts:
    """A method's account of one selection (all fields optional).

    Attributes:
        stages: position -> how the step got in (e.g. ``"unit"``, ``"flat fill"``).
        brought_by: position -> the pool OSU (public id, a column of ``pool_.members``)
            that brought the step in.
        parts: position -> the method's own numbers for the step (name -> value).
        candidates: positions in the order the method considered them; those not
            selected are what the budget (or the method) left out.
        candidates_label: what ``candidates`` are, in words.
        kept_units: pool OSUs the method's coarse stage kept (``None``: no such stage).
        summary: method-level facts (K, the binding decision, a weight), name -> value.
    """

    stages: Mapping[int, str] = field(default_factory=dict)
    brought_by: Mapping[int, int] = field(default_factory=dict)
    parts: Mapping[int, Mapping[str, Part]] = field(default_factory=dict)
    candidates: IntArray | None = None
    candidates_label: str = ""
    kept_units: IntArray | None = None
    summary: Mapping[str, Part] = field(default_factory=dict)


def unit_ranks(scores: Any, eligible: Any) -> IntArray:
    """1-based rank of every unit by descending ``scores`` among the ``eligible`` ones
    (ties by unit order, as the coarse stage breaks them); 0 for an ineligible unit."""
    s = np.asarray(scores, dtype=np.float64)
    ok = np.asarray(eligible, dtype=bool)
    order = np.argsort(-np.where(ok, s, -np.inf), kind="stable")[: int(ok.sum())]
    ranks = np.zeros(s.shape[0], dtype=np.int64)
    ranks[order] = np.arange(1, order.shape[0] + 1)
    return ranks


def best_unit(units: IntArray, ranks: IntArray, allowed: Any = None) -> int | None:
    """Of ``units``, the one with the best (lowest positive) rank, restricted to
    ``allowed`` (a boolean mask over units) when given; ``None`` when none qualifies."""
    best, best_rank = None, 0
    for u in np.asarray(units, dtype=np.int64).tolist():
        r = int(ranks[u])
        if r <= 0 or (allowed is not None and not allowed[u]):
            continue
        if best is None or r < best_rank:
            best, best_rank = u, r
    return best


def lexical_scores(retriever: Any, text: str | None, positions: IntArray) -> list[float] | None:
    """The lexical (BM25) score of ``positions`` for the query ``text`` from the
    retriever's lexical index, or ``None`` when it has none or the query has no text.

    A retriever with a lexical index offers ``lexical_scores(text, positions)``
    returning one score per position; every other retriever gets ``None`` here.
    """
    score = getattr(retriever, "lexical_scores", None)
    if text is None or not callable(score):
        return None
    values = score(text, np.asarray(positions, dtype=np.int64))
    return [float(v) for v in np.asarray(values, dtype=np.float64).tolist()]
