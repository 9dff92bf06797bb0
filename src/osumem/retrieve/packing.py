"""The one packer: how every method turns ranked candidates into a selection that fits
the token budget.

Policy (shared by all methods): walk candidates in rank order and add each step that
still fits in the remaining budget (first fit); never exceed the budget.

* :func:`pack_first_fit` is the rule itself, over a full ranking.
* :func:`greedy_pack` applies it at every pick when scores depend on what is already
  selected (MMR, coverage); :func:`novelty_pack` is its fast form for OSU-Mem's novelty
  penalty (the same picks and the same floating-point operations).
* :func:`pack_ranked_heads` packs a ranking known only through its heads (the best
  ``k`` candidates for a growing ``k``), stopping once no step outside the head could
  use what is left; :func:`flat_first_fit` and :func:`flat_pack` are the flat cosine
  ranking packed that way (an exact scan), and the HNSW step index
  (:class:`~osumem.retrieve.step_index.StepIndex`) packs its own heads with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.types import IntArray

#: Smallest head (in candidates) that :func:`flat_first_fit` sorts first.
FLAT_HEAD_MIN = 256

#: :func:`pack_first_fit` walks rankings of at most this many candidates in one
#: Python pass (cheaper than its array calls there); longer ones run vectorised.
PACK_LOOP_MAX = 160


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
    if order.shape[0] <= PACK_LOOP_MAX:
        # a short ranking: one pass in Python costs less than the array calls
        picked: list[int] = []
        left = int(budget)
        for p, cost in zip(order.tolist(), c.tolist(), strict=True):
            if cost <= left:
                picked.append(p)
                left -= cost
                if left <= 0:
                    break
        return np.array(picked, dtype=np.int64)
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


def novelty_pack(
    embeddings: NDArray[np.float32],
    costs: NDArray[Any],
    cand: IntArray,
    relevance: NDArray[np.float32],
    budget: int,
    gamma: float,
    rows: NDArray[np.float32] | None = None,
) -> IntArray:
    """Greedy pick of ``cand`` (step positions) by ``relevance`` minus the novelty
    penalty γ·max(0, max cosine to the selected steps), under the first-fit rule.
    ``rows``: ``embeddings[cand]`` when the caller has gathered them already.

    The same picks, and the same floating-point operations on every score that can
    still be picked, as :func:`greedy_pack` with the penalty as its update (tested);
    steps that no longer fit or are taken are set to −inf instead of masked at every
    pick, which halves the NumPy calls per pick, and a pick that leaves less than the
    cheapest candidate costs ends the greedy without computing its penalty.
    """
    if cand.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    H = embeddings[cand] if rows is None else rows
    cost = np.asarray(costs, dtype=np.int64)[cand]
    score = relevance.astype(np.float64)
    score[cost > budget] = -np.inf
    max_sim = np.zeros(cand.shape[0])
    new_max = np.empty_like(max_sim)
    remaining = int(budget)
    top_cost, low_cost = int(cost.max()), int(cost.min())
    picked: list[int] = []
    while True:
        j = int(score.argmax())
        if score[j] == -np.inf:
            break
        picked.append(j)
        remaining -= int(cost[j])
        if remaining < low_cost:
            break  # nothing else fits: the next pick would find none
        score[j] = -np.inf
        # score += -γ·(new_max − max_sim), written as score −= γ·(…): equal bits
        np.maximum(max_sim, H @ H[j], out=new_max)
        penalty = new_max - max_sim
        penalty *= gamma
        score -= penalty
        max_sim, new_max = new_max, max_sim
        if remaining < top_cost:
            score[cost > remaining] = -np.inf
    return cand[np.asarray(picked, dtype=np.int64)]


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


def pack_ranked_heads(
    head: Callable[[int], IntArray],
    costs: NDArray[Any],
    budget: int,
    *,
    n: int,
    first: int,
    min_cost: int,
) -> IntArray:
    """:func:`pack_first_fit` of a ranking of ``n`` candidates read only through its
    heads: ``head(k)`` gives the best ``k`` (or, for an approximate index, about the
    best ``k``, best first). Packs ``head(first)``, then a head four times larger, and
    so on while budget is left that a step outside the head could still use (at least
    ``min_cost``, the cheapest cost a candidate outside the head can have)."""
    k = first
    while True:
        taken = pack_first_fit(head(k), costs, budget)
        if k >= n or budget - int(costs[taken].sum()) < min_cost:
            return taken
        k = min(n, 4 * k)


def flat_first_fit(scores: NDArray[Any], costs: NDArray[Any], budget: int) -> IntArray:
    """First-fit packing of positions by descending score (ties by position), equal to
    ``pack_first_fit(np.argsort(-scores, kind="stable"), costs, budget)``.

    Packs a head of the ranking (:data:`FLAT_HEAD_MIN` candidates first) through
    :func:`pack_ranked_heads`, so a query sorts a few hundred candidates instead of
    every step.
    """
    n = int(scores.shape[0])
    if n == 0:
        return np.empty(0, dtype=np.int64)
    costs = np.asarray(costs, dtype=np.int64)
    return pack_ranked_heads(
        lambda k: top_order(scores, k),
        costs,
        budget,
        n=n,
        first=min(n, FLAT_HEAD_MIN),
        min_cost=int(costs.min()),
    )


def flat_pack(
    scores: NDArray[Any], costs: NDArray[Any], budget: int, exclude: IntArray | None = None
) -> IntArray:
    """:func:`flat_first_fit` of the ranking minus the positions in ``exclude``: those
    are made too expensive to fit, so first fit skips them exactly as if they were
    removed from the ranking."""
    if exclude is not None and exclude.size:
        costs = np.array(costs, copy=True)
        costs[exclude] = budget + 1
    return flat_first_fit(scores, costs, budget)
