"""The retriever interface and the one shared packer.

Every method, baselines, ablations and oracles included, is a :class:`Retriever`
subclass plus a frozen config dataclass. ``fit`` builds the method's structure over a
:class:`~osumem.types.MemoryView`; ``retrieve`` validates the query and budget at the
boundary and returns step positions packed under the budget.

Packing policy (shared): walk candidates in rank order and add each step that
still fits in the remaining budget (first fit); never exceed the budget. Greedy methods
whose scores depend on what is already selected (MMR, novelty, coverage) use
:func:`greedy_pack`, which applies the same first-fit rule at every pick.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Self, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

from osumem.errors import BudgetError, ConfigError, DimensionError, InvalidInputError
from osumem.frozen import FrozenConfig
from osumem.osu.views import KnnIndex, hnsw_available
from osumem.types import IntArray, MemoryView


@dataclass(frozen=True, kw_only=True)
class RetrieverConfig(FrozenConfig):
    """Base of every method's frozen, keyword-only parameter set (``replace``,
    ``with_strings``, ``to_dict`` and declared constraints come from
    :class:`~osumem.frozen.FrozenConfig`)."""


#: The config type a :class:`Retriever` subclass takes.
ConfigT = TypeVar("ConfigT", bound=RetrieverConfig)


@dataclass(frozen=True)
class Selection:
    """What a retriever returns: positions in selection order and their total cost."""

    positions: IntArray
    cost: int

    def __len__(self) -> int:
        return int(self.positions.shape[0])


def check_budget(budget: Any) -> int:
    """Validate a token budget: a positive integer."""
    if isinstance(budget, bool) or not isinstance(budget, int | np.integer):
        raise BudgetError(f"budget must be a positive integer, got {budget!r}")
    if budget <= 0:
        raise BudgetError(f"budget must be a positive integer, got {budget}")
    return int(budget)


def pack_first_fit(order: NDArray[Any], costs: NDArray[Any], budget: int) -> IntArray:
    """First-fit packing of ranked candidates.

    Walks ``order`` (step positions, best first) and keeps each step whose cost still
    fits in what is left of ``budget``. Vectorised: each loop iteration takes the
    longest run of consecutive candidates that fits at once (a cumulative sum), then
    jumps to the next candidate small enough for the remainder, so the number of
    iterations is the number of skipped candidates that split runs, not the number of
    steps.
    """
    order = np.asarray(order, dtype=np.int64)
    c = np.asarray(costs, dtype=np.int64)[order]
    taken: list[IntArray] = []
    remaining = int(budget)
    i = 0
    n = order.shape[0]
    while i < n and remaining > 0:
        csum = np.cumsum(c[i:])
        k = int(np.searchsorted(csum, remaining, side="right"))
        if k:
            taken.append(order[i : i + k])
            remaining -= int(csum[k - 1])
            i += k
        if i >= n:
            break
        fits = np.flatnonzero(c[i:] <= remaining)
        if fits.size == 0:
            break
        i += int(fits[0])
    if not taken:
        return np.empty(0, dtype=np.int64)
    return np.concatenate(taken)


def greedy_pack(
    scores: NDArray[Any],
    candidates: NDArray[Any],
    costs: NDArray[Any],
    budget: int,
    on_pick: Callable[[int], NDArray[Any] | None] | None = None,
) -> IntArray:
    """Greedy selection under the shared first-fit rule.

    At each step the best-scoring unpicked candidate among those that still fit is
    taken; ``on_pick(j)`` (``j`` an index into ``candidates``) may return an additive
    update to every candidate's score (e.g. an MMR or novelty penalty). Ties go to the
    earlier candidate. Each iteration is vectorised over the candidates.
    """
    cand = np.asarray(candidates, dtype=np.int64)
    score = np.array(scores, dtype=np.float64, copy=True)
    cost = np.asarray(costs, dtype=np.int64)[cand]
    alive = np.ones(cand.shape[0], dtype=bool)
    remaining = int(budget)
    picked: list[int] = []
    while True:
        alive &= cost <= remaining
        if not alive.any():
            break
        j = int(np.argmax(np.where(alive, score, -np.inf)))
        picked.append(j)
        alive[j] = False
        remaining -= int(cost[j])
        if on_pick is not None:
            delta = on_pick(j)
            if delta is not None:
                score += delta
    return cand[np.asarray(picked, dtype=np.int64)] if picked else np.empty(0, dtype=np.int64)


class Retriever(ABC, Generic[ConfigT]):
    """A retrieval method. Subclasses set ``name`` and ``Config`` (and name the config
    type, ``class FlatMMR(Retriever[MMRConfig])``, so ``self.config`` is typed) and
    implement :meth:`_build` (optional) and :meth:`_select`.

    Learned state lives in attributes ending with ``_`` and is set by :meth:`fit`.
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type[RetrieverConfig]] = RetrieverConfig
    #: True for methods that read ground-truth evidence (oracles); reports label them.
    is_oracle: ClassVar[bool] = False

    def __init__(self, config: ConfigT | None = None, *, seed: int = 0) -> None:
        if config is None:
            config = cast(ConfigT, self.Config())
        if not isinstance(config, self.Config):
            raise ConfigError(
                f"{type(self).__name__} takes a {self.Config.__name__}, got {type(config).__name__}"
            )
        self.config: ConfigT = config
        self.seed = int(seed)
        self.view_: MemoryView | None = None
        self._step_index: KnnIndex | None = None
        self._cost_view: MemoryView | None = None
        # (sum, count, min, count of the min) of the costs of ``_cost_view``
        self._cost_cache = (0, 0, 0, 0)
        #: Memory size from which whole-memory queries use the HNSW indexes (see
        #: :data:`ANN_MIN_STEPS`); the agent memory sets :data:`MEMORY_ANN_MIN_STEPS`.
        self.ann_min_steps = ANN_MIN_STEPS

    def fit(self, view: MemoryView) -> Self:
        """Build this method's structure over ``view`` (the causal prefix it may see)."""
        self.view_ = view
        self._step_index = None
        self._build(view)
        return self

    def update(self, view: MemoryView) -> Self:
        """Bring the structure up to date with ``view``, which extends the fitted view
        by new steps at the end (the agent-facing memory calls this after each add).

        The default rebuilds; methods with incremental structures (OSU-Mem) override
        it to add only the new steps.
        """
        return self.fit(view)

    def _build(self, view: MemoryView) -> None:
        """Build the index; the default keeps nothing but the view."""

    def retrieve(
        self,
        query: NDArray[Any],
        budget: int,
        *,
        before: int | None = None,
        evidence: NDArray[Any] | None = None,
        text: str | None = None,
    ) -> Selection:
        """Select steps for ``query`` under ``budget`` tokens.

        Args:
            query: the query embedding (any scale; normalised here).
            budget: token budget, a positive integer.
            before: only steps at positions ``< before`` may be returned (causality);
                ``None`` means every fitted step.
            evidence: ground-truth evidence positions, read only by oracle methods
                (``is_oracle``); every other method ignores it.
            text: the query's text, when it has one; read only by methods that rank
                by words as well as by the vector (:meth:`_select_query`), ignored by
                the others.
        """
        if self.view_ is None:
            raise InvalidInputError(f"{type(self).__name__}: call fit() before retrieve()")
        b = check_budget(budget)
        q = self.view_.check_query(query)
        return self.retrieve_unit(q, b, before=before, evidence=evidence, text=text)

    def retrieve_unit(
        self,
        query: NDArray[np.float32],
        budget: int,
        *,
        before: int | None = None,
        evidence: NDArray[Any] | None = None,
        text: str | None = None,
    ) -> Selection:
        """:meth:`retrieve` for a query already in the form it uses: the output of
        the fitted view's ``check_query`` (float32, unit length, the memory's
        dimension), taken as given. A caller that asks one query of many methods or
        budgets normalises it once (the evaluation runner does); the answer is the
        one :meth:`retrieve` gives for the raw vector."""
        if self.view_ is None:
            raise InvalidInputError(f"{type(self).__name__}: call fit() before retrieve()")
        view = self.view_
        q = query
        if q.dtype != np.float32 or q.ndim != 1 or (view.n and q.shape[0] != view.dim):
            raise DimensionError(
                f"query: expected a float32 vector of dimension {view.dim} (check_query's "
                f"output), got {q.dtype} of shape {q.shape}"
            )
        b = check_budget(budget)
        limit = view.n if before is None else max(0, min(int(before), view.n))
        if limit == 0:
            return Selection(np.empty(0, dtype=np.int64), 0)
        ev = None if evidence is None else np.asarray(evidence, dtype=np.int64)
        positions = self._select_query(q, text, b, limit, ev)
        cost = int(view.costs[positions].sum()) if positions.size else 0
        return Selection(positions, cost)

    def _select_query(
        self,
        q: NDArray[np.float32],
        text: str | None,
        budget: int,
        limit: int,
        evidence: IntArray | None,
    ) -> IntArray:
        """:meth:`_select` for a query that may carry its text. Methods that read the
        query's words (lexical rankers, fusions) override this; the default ignores
        ``text`` and calls :meth:`_select`."""
        return self._select(q, budget, limit, evidence)

    @abstractmethod
    def _select(
        self, q: NDArray[np.float32], budget: int, limit: int, evidence: IntArray | None
    ) -> IntArray:
        """Return positions ``< limit`` whose total cost is at most ``budget``."""

    # Shared helpers -------------------------------------------------------------

    def _cosines(self, q: NDArray[np.float32], limit: int) -> NDArray[np.float32]:
        """Cosine of every visible step with the query (rows are unit length)."""
        assert self.view_ is not None
        return self.view_.embeddings[:limit] @ q

    def _flat_order(self, q: NDArray[np.float32], limit: int) -> IntArray:
        """Visible positions by descending cosine (stable: ties keep position order)."""
        return np.argsort(-self._cosines(q, limit), kind="stable").astype(np.int64)

    def _use_ann(self, limit: int) -> bool:
        """Whether the flat ranking comes from the HNSW step index: a memory of at
        least :attr:`ann_min_steps` steps (:data:`ANN_MIN_STEPS` unless set), queried
        over all of it, with hnswlib installed (the ``scale`` extra; without it the
        exact scan answers)."""
        assert self.view_ is not None
        return self.view_.n >= self.ann_min_steps and limit >= self.view_.n and hnsw_available()

    def _ann_top(self, q: NDArray[np.float32], k: int) -> IntArray:
        """About the ``k`` most similar steps, best first, from the step index (built
        at fit or at the first query, extended with the steps added since)."""
        assert self.view_ is not None
        view = self.view_
        if self._step_index is None:
            self._step_index = self._new_step_index(view.n)
        index = self._step_index
        if index.size < view.n:
            index.add(view.embeddings[index.size : view.n])
        return index.query(q, k)

    def _new_step_index(self, capacity: int) -> KnnIndex:
        """An empty step index with room for ``capacity`` steps."""
        assert self.view_ is not None
        return KnnIndex(
            self.view_.dim,
            seed=self.seed,
            ef_construction=STEP_INDEX_EF_CONSTRUCTION,
            capacity=capacity,
        )

    def _start_step_index(self, view: MemoryView) -> Callable[[], None] | None:
        """Start building the step index over ``view`` in a background thread when
        queries over it will use one (:meth:`_use_ann`); returns the call that waits
        for it (``None`` when nothing was started).

        hnswlib releases the GIL while it inserts, so the build runs on a second core
        while the caller builds its own structure. Insertion stays on one thread, so
        the graph is the one a sequential build makes.
        """
        if not (view.n >= self.ann_min_steps and hnsw_available()):
            return None
        index = self._new_step_index(view.n)
        failed: list[BaseException] = []

        def work() -> None:
            try:
                index.add(view.embeddings)
            except BaseException as exc:  # re-raised in the caller's thread
                failed.append(exc)

        thread = threading.Thread(target=work, name="osumem-step-index", daemon=True)
        thread.start()

        def wait() -> None:
            thread.join()
            if failed:
                raise failed[0]
            self._step_index = index

        return wait

    def _flat_head(
        self, q: NDArray[np.float32], limit: int, tokens: float, min_count: int = 1
    ) -> IntArray:
        """The head of :meth:`_flat_order` holding at least ``tokens`` tokens and at
        least ``min_count`` steps (all visible steps when they hold fewer), without
        sorting the rest."""
        assert self.view_ is not None
        if self._use_ann(limit):
            costs = self.view_.costs
            k = max(FLAT_HEAD_MIN, min_count)
            while True:
                head = self._ann_top(q, k)
                if k >= limit or int(costs[head].sum()) >= tokens:
                    return head
                k = min(limit, 4 * k)
        cos = self._cosines(q, limit)
        costs = self.view_.costs[:limit]
        k = max(1, min_count, math.ceil(tokens / max(float(costs.mean()), 1.0)))
        k = min(limit, k)
        while True:
            head = top_order(cos, k)
            if k >= limit or int(costs[head].sum()) >= tokens:
                return head
            k = min(limit, 2 * k)

    def _flat_pack(
        self,
        q: NDArray[np.float32],
        limit: int,
        budget: int,
        exclude: IntArray | None = None,
    ) -> IntArray:
        """``pack_first_fit`` of the flat ranking (minus the steps in ``exclude``):
        exact (a growing head of the cosine ranking, no full sort) below
        :data:`ANN_MIN_STEPS` steps or under a causal limit; from the HNSW step index
        above."""
        assert self.view_ is not None
        if self._use_ann(limit):
            return self._ann_pack(q, budget, exclude)
        costs = self.view_.costs[:limit]
        if exclude is not None and exclude.size:
            # excluded steps are made too expensive to fit: first fit then skips them
            # exactly as if they were removed from the ranking
            costs = costs.copy()
            costs[exclude] = budget + 1
        return flat_first_fit(self._cosines(q, limit), costs, budget)

    def _ann_pack(self, q: NDArray[np.float32], budget: int, exclude: IntArray | None) -> IntArray:
        """:meth:`_flat_pack` over the whole memory from the step index: heads of the
        index's ranking, minus ``exclude``, packed first fit, grown (×4) while budget
        is left that an unseen step could use. Reads only the head's costs."""
        assert self.view_ is not None
        view = self.view_
        costs = view.costs
        mean_cost, min_cost, n_min = self._cost_stats()
        if exclude is not None and exclude.size:
            exclude = np.sort(exclude)
            if int(np.count_nonzero(costs[exclude] == min_cost)) >= n_min:
                # every cheapest step is excluded: the smallest cost left is higher
                rest = costs.copy()
                rest[exclude] = np.iinfo(np.int64).max
                min_cost = int(rest.min())
        else:
            exclude = None
        n = view.n
        # ask the index for a few times the steps the budget holds on average
        k = min(n, max(ANN_HEAD_MIN, 4 * math.ceil(budget / mean_cost)))
        while True:
            head = self._ann_top(q, k)
            if exclude is not None:
                at = np.minimum(np.searchsorted(exclude, head), exclude.shape[0] - 1)
                head = head[exclude[at] != head]
            taken = pack_first_fit(head, costs, budget)
            if k >= n or budget - int(costs[taken].sum()) < min_cost:
                return taken
            k = min(n, 4 * k)

    def _cost_stats(self) -> tuple[float, int, int]:
        """``(mean, min, count of the min)`` of the fitted steps' costs, cached per view
        (:meth:`_extend_cost_stats` carries the cache over to an extended view)."""
        view = self.view_
        assert view is not None
        if self._cost_view is not view:
            costs = view.costs
            low = int(costs.min()) if costs.shape[0] else 0
            self._cost_cache = (
                int(costs.sum()),
                int(costs.shape[0]),
                low,
                int(np.count_nonzero(costs == low)),
            )
            self._cost_view = view
        total, n, low, n_low = self._cost_cache
        # integer sum / count: the float64 mean NumPy gives for these integer costs
        return total / max(n, 1), low, n_low

    def _extend_cost_stats(self, old: MemoryView | None, view: MemoryView) -> None:
        """Carry the cached cost statistics of ``old`` over to ``view``, which extends
        it by new steps at the end (what ``update`` is given), reading only the new
        steps' costs: an add then costs O(new steps), not O(n)."""
        if old is None or self._cost_view is not old or view.n < old.n:
            return
        total, n, low, n_low = self._cost_cache
        tail = view.costs[n : view.n]
        if tail.shape[0]:
            t_low = int(tail.min())
            t_count = int(np.count_nonzero(tail == t_low))
            if n == 0 or t_low < low:
                low, n_low = t_low, t_count
            elif t_low == low:
                n_low += t_count
            total += int(tail.sum())
        self._cost_cache = (total, int(view.n), low, n_low)
        self._cost_view = view


#: Smallest head (in candidates) that :func:`flat_first_fit` sorts first.
FLAT_HEAD_MIN = 256

#: From this many steps on, a query over the whole memory takes the flat ranking's
#: head from an HNSW index over the steps (approximate); smaller memories and causal
#: queries (``before``) scan exactly (docs/decisions.md).
ANN_MIN_STEPS = 20_000

#: Smallest head asked of the step index by a packing query.
ANN_HEAD_MIN = 32

#: Build beam of the step index (a lighter build than the similarity view's).
STEP_INDEX_EF_CONSTRUCTION = 64


def top_order(scores: NDArray[Any], k: int) -> IntArray:
    """The ``k`` best indices by descending score, ties by increasing index: exactly
    ``np.argsort(-scores, kind="stable")[:k]``, in O(n + k log k) (``argpartition``
    then a sort of the head)."""
    n = int(scores.shape[0])
    if k >= n:
        return np.argsort(-scores, kind="stable").astype(np.int64)
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    kth = scores[np.argpartition(-scores, k - 1)[k - 1]]
    above = np.flatnonzero(scores > kth)
    ties = np.flatnonzero(scores == kth)[: k - above.shape[0]]
    idx = np.concatenate([above, ties]).astype(np.int64)
    return idx[np.lexsort((idx, -scores[idx]))]


def flat_first_fit(scores: NDArray[Any], costs: NDArray[Any], budget: int) -> IntArray:
    """First-fit packing of positions by descending score (ties by position), equal to
    ``pack_first_fit(np.argsort(-scores, kind="stable"), costs, budget)``.

    Packs a head of the ranking and grows it (×4) only while budget is left that a
    step outside the head could still use, so a query sorts a few hundred candidates
    instead of every step.
    """
    n = int(scores.shape[0])
    if n == 0:
        return np.empty(0, dtype=np.int64)
    costs = np.asarray(costs, dtype=np.int64)
    min_cost = int(costs.min())
    k = min(n, FLAT_HEAD_MIN)
    while True:
        head = top_order(scores, k)
        taken = pack_first_fit(head, costs, budget)
        left = budget - int(costs[taken].sum())
        if k >= n or left < min_cost:
            return taken
        k = min(n, 4 * k)
