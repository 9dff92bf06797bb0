"""Why a retrieval returned what it returned: :meth:`Retrieved.explain
<osumem.memory.Retrieved.explain>`.

For every returned step: its cosine with the query, its rank in the flat cosine
ranking, its lexical score (methods with a lexical index), how it got in (the method's
stage), the unit and view that brought it in, every unit it sits in with that unit's
centroid cosine and coarse-stage rank; for the whole answer: the budget used and left,
and the best candidates the budget (or the method) left out, each with the reason.

Every method gets the generic parts (cosine, flat rank; for methods over an OSU pool,
the units and their ranks by centroid cosine); a method adds its own through the
optional hook described in :mod:`osumem.retrieve.explain` (OSU-Mem, its coverage
variant and the adaptive method have one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import InvalidInputError, StaleResultError
from osumem.retrieve.explain import Part, SelectionParts, lexical_scores, unit_ranks
from osumem.types import IntArray

#: How many left-out candidates an explanation lists.
MAX_LEFT_OUT = 10


@dataclass(frozen=True)
class UnitWhy:
    """One unit (OSU) a returned step sits in.

    Attributes:
        view, key, first, last, size: the unit (as :class:`~osumem.memory.OSUHandle`).
        cosine: its centroid's cosine with the query.
        coarse_rank: its rank by centroid cosine among all units (1 = best), the order
            in which a coarse stage considers units.
        kept: whether the method's coarse stage kept it (``None``: no such stage).
    """

    view: str
    key: str
    first: int
    last: int
    size: int
    cosine: float
    coarse_rank: int
    kept: bool | None = None

    def __str__(self) -> str:
        return f"{self.view}:{self.key}@{self.first}-{self.last}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (``unit`` is the handle as text)."""
        return {
            "unit": str(self),
            "view": self.view,
            "key": self.key,
            "first": self.first,
            "last": self.last,
            "size": self.size,
            "cosine": self.cosine,
            "coarse_rank": self.coarse_rank,
            "kept": self.kept,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UnitWhy:
        """The inverse of :meth:`to_dict`."""
        return cls(**{k: data[k] for k in _UNIT_FIELDS if k in data})


_UNIT_FIELDS = ("view", "key", "first", "last", "size", "cosine", "coarse_rank", "kept")


@dataclass(frozen=True)
class StepWhy:
    """Why one step was returned.

    Attributes:
        position, rank, cost: the step, its selection order, its token cost.
        cosine: cosine of its embedding with the query.
        flat_rank: its rank in the flat cosine ranking of the visible steps (1 = best).
        lexical: its lexical (BM25) score for the query text; ``None`` for methods
            without a lexical index.
        stage: how it got in (the method's words: ``"unit"``, ``"flat fill"``, ...;
            ``""`` when the method does not say).
        via: the unit that brought it in (``None``: none did).
        units: every unit it sits in.
        parts: the method's own numbers for it.
    """

    position: int
    rank: int
    cost: int
    cosine: float
    flat_rank: int
    lexical: float | None = None
    stage: str = ""
    via: UnitWhy | None = None
    units: tuple[UnitWhy, ...] = ()
    parts: Mapping[str, Part] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {
            "position": self.position,
            "rank": self.rank,
            "cost": self.cost,
            "cosine": self.cosine,
            "flat_rank": self.flat_rank,
            "lexical": self.lexical,
            "stage": self.stage,
            "via": None if self.via is None else self.via.to_dict(),
            "units": [u.to_dict() for u in self.units],
            "parts": dict(self.parts),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepWhy:
        """The inverse of :meth:`to_dict`."""
        via = data.get("via")
        return cls(
            position=int(data["position"]),
            rank=int(data["rank"]),
            cost=int(data["cost"]),
            cosine=float(data["cosine"]),
            flat_rank=int(data["flat_rank"]),
            lexical=None if data.get("lexical") is None else float(data["lexical"]),
            stage=str(data.get("stage", "")),
            via=None if via is None else UnitWhy.from_dict(via),
            units=tuple(UnitWhy.from_dict(u) for u in data.get("units", ())),
            parts=dict(data.get("parts", {})),
        )


@dataclass(frozen=True)
class LeftOut:
    """A candidate the answer does not hold.

    Attributes:
        position, cost, cosine, flat_rank: the step (as in :class:`StepWhy`).
        reason: ``"budget"`` (its cost is more than the budget left) or ``"method"``
            (it would fit; the method chose others).
    """

    position: int
    cost: int
    cosine: float
    flat_rank: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {
            "position": self.position,
            "cost": self.cost,
            "cosine": self.cosine,
            "flat_rank": self.flat_rank,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Explanation:
    """Why a retrieval returned what it returned (see the module doc).

    Attributes:
        method, budget: as in the result.
        cost: tokens used; ``budget - cost`` were left.
        steps: one :class:`StepWhy` per returned step, in selection order.
        left_out: the first :data:`MAX_LEFT_OUT` candidates (in the method's order)
            that the answer does not hold.
        candidates: what the candidates are, in words.
        summary: method-level facts (the coarse stage's K, the binding decision, ...).
    """

    method: str
    budget: int
    cost: int
    steps: tuple[StepWhy, ...] = ()
    left_out: tuple[LeftOut, ...] = ()
    candidates: str = ""
    summary: Mapping[str, Part] = field(default_factory=dict)

    @property
    def left(self) -> int:
        """Tokens of the budget left unused."""
        return self.budget - self.cost

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {
            "method": self.method,
            "budget": self.budget,
            "cost": self.cost,
            "left": self.left,
            "steps": [s.to_dict() for s in self.steps],
            "left_out": [s.to_dict() for s in self.left_out],
            "candidates": self.candidates,
            "summary": dict(self.summary),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Explanation:
        """The inverse of :meth:`to_dict` (e.g. an explanation sent by a server)."""
        try:
            return cls(
                method=str(data["method"]),
                budget=int(data["budget"]),
                cost=int(data["cost"]),
                steps=tuple(StepWhy.from_dict(s) for s in data.get("steps", ())),
                left_out=tuple(
                    LeftOut(**{k: s[k] for k in _LEFT_FIELDS}) for s in data.get("left_out", ())
                ),
                candidates=str(data.get("candidates", "")),
                summary=dict(data.get("summary", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"explanation: malformed ({exc})") from None

    def render(self) -> str:
        """The explanation as plain text, one line per step and per left-out step."""
        lines = [f"# Why these steps ({self.method}; {self.cost}/{self.budget} tokens used)"]
        for s in self.steps:
            lex = "" if s.lexical is None else f" lexical {s.lexical:.3f}"
            via = "" if s.via is None else f" via {s.via} (coarse #{s.via.coarse_rank})"
            stage = f" [{s.stage}]" if s.stage else ""
            lines.append(
                f"[step {s.position}] rank {s.rank}, cosine {s.cosine:.3f} "
                f"(flat #{s.flat_rank}){lex}, {s.cost} tokens{stage}{via}"
            )
        if self.summary:
            facts = ", ".join(f"{k} {v}" for k, v in self.summary.items())
            lines.append(f"# Method: {facts}")
        if self.left_out:
            lines.append(
                f"# Left out ({self.left} tokens left; candidates: {self.candidates or 'flat'})"
            )
            for o in self.left_out:
                why = (
                    f"needs {o.cost} tokens, {self.left} left"
                    if o.reason == "budget"
                    else f"{o.cost} tokens would fit; the method chose others"
                )
                lines.append(
                    f"[step {o.position}] cosine {o.cosine:.3f} (flat #{o.flat_rank}): {why}"
                )
        return "\n".join(lines)


_LEFT_FIELDS = ("position", "cost", "cosine", "flat_rank", "reason")


def explain(
    retriever: Any,
    q: NDArray[np.float32],
    text: str | None,
    budget: int,
    positions: IntArray,
    *,
    method: str,
    limit: int | None = None,
) -> Explanation:
    """The explanation of ``positions``, the selection ``retriever`` made for query
    vector ``q`` (unit length, as the retriever used it), ``text`` and ``budget`` over
    the steps before ``limit`` (default: all)."""
    view = retriever.view_
    n = view.n if limit is None else int(limit)
    pos = np.asarray(positions, dtype=np.int64)
    cos = (view.embeddings[:n] @ q).astype(np.float64)
    order = np.argsort(-cos, kind="stable")
    flat_rank = np.empty(n, dtype=np.int64)
    flat_rank[order] = np.arange(1, n + 1)
    hook = getattr(retriever, "explain_selection", None)
    parts = hook(q, text, budget, n, pos) if callable(hook) else SelectionParts()
    units = _units(retriever, q, n, pos, parts.kept_units)
    lexical = lexical_scores(retriever, text, pos)
    costs = view.costs
    steps = []
    for rank, p in enumerate(pos.tolist()):
        mine = units.get(p, {})
        via_id = parts.brought_by.get(p)
        steps.append(
            StepWhy(
                position=p,
                rank=rank,
                cost=int(costs[p]),
                cosine=float(cos[p]),
                flat_rank=int(flat_rank[p]),
                lexical=None if lexical is None else lexical[rank],
                stage=parts.stages.get(p, ""),
                via=mine.get(via_id) if via_id is not None else None,
                units=tuple(mine.values()),
                parts=dict(parts.parts.get(p, {})),
            )
        )
    used = int(costs[pos].sum()) if pos.size else 0
    left = budget - used
    candidates = parts.candidates if parts.candidates is not None else order
    chosen = np.zeros(n, dtype=bool)
    chosen[pos] = True
    out = []
    for p in np.asarray(candidates, dtype=np.int64).tolist():
        if chosen[p]:
            continue
        reason = "budget" if int(costs[p]) > left else "method"
        out.append(LeftOut(p, int(costs[p]), float(cos[p]), int(flat_rank[p]), reason))
        if len(out) >= MAX_LEFT_OUT:
            break
    return Explanation(
        method=method,
        budget=int(budget),
        cost=used,
        steps=tuple(steps),
        left_out=tuple(out),
        candidates=parts.candidates_label or "the flat cosine ranking",
        summary=dict(parts.summary),
    )


def remap_positions(why: Explanation, place: Callable[[int], int]) -> Explanation:
    """``why`` with every position it names (steps, their units' spans, the left-out
    candidates) passed through ``place``: the explanation of a filtered retrieval,
    made over the passing steps, in the namespace's positions."""
    from dataclasses import replace

    def unit(u: UnitWhy | None) -> UnitWhy | None:
        return None if u is None else replace(u, first=place(u.first), last=place(u.last))

    steps = tuple(
        replace(
            s,
            position=place(s.position),
            via=unit(s.via),
            units=tuple(replace(u, first=place(u.first), last=place(u.last)) for u in s.units),
        )
        for s in why.steps
    )
    left = tuple(replace(o, position=place(o.position)) for o in why.left_out)
    return replace(why, steps=steps, left_out=left)


def explainer(
    retriever: Any,
    q: NDArray[Any],
    text: str | None,
    budget: int,
    positions: IntArray,
    method: str,
) -> Callable[[], Explanation]:
    """A call that explains this selection later, while the retriever still holds the
    steps it answered from (a later add makes it raise :class:`StaleResultError`)."""
    seen = retriever.view_

    def run() -> Explanation:
        if retriever.view_ is not seen:
            raise StaleResultError(
                "the namespace was written after this retrieval; retrieve again to explain it"
            )
        unit = seen.check_query(q)  # what retrieve() used: float32, unit length
        return explain(retriever, unit, text, budget, positions, method=method)

    return run


def _units(
    retriever: Any, q: NDArray[np.float32], n: int, positions: IntArray, kept: IntArray | None
) -> dict[int, dict[int, UnitWhy]]:
    """Per returned step, its units (pool OSU id -> :class:`UnitWhy`), for a retriever
    over an OSU pool (``osu_pool()``) covering the ``n`` visible steps; empty otherwise."""
    pool = retriever.osu_pool()
    if pool is None or pool.n_steps != n or not positions.size:
        return {}
    scores = (pool.centroids @ q).astype(np.float64)
    ranks = unit_ranks(scores, pool.sizes > 0)
    kept_mask = None
    if kept is not None:
        kept_mask = np.zeros(pool.n_osus, dtype=bool)
        kept_mask[np.asarray(kept, dtype=np.int64)] = True
    names, keys, spans, sizes = pool.view_names(), pool.keys, pool.spans, pool.sizes
    out: dict[int, dict[int, UnitWhy]] = {}
    for p in positions.tolist():
        out[p] = {
            int(u): UnitWhy(
                view=str(names[u]),
                key=str(keys[u]),
                first=int(spans[u, 0]),
                last=int(spans[u, 1]),
                size=int(sizes[u]),
                cosine=float(scores[u]),
                coarse_rank=int(ranks[u]),
                kept=None if kept_mask is None else bool(kept_mask[u]),
            )
            for u in pool.osus_of(int(p)).tolist()
        }
    return out
