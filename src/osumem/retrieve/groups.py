"""Shared pieces for group-based retrieval (partitions, chunks, tree nodes, OSUs).

A *group* is a set of step positions. A collection of groups is held as a sparse
``incidence`` matrix of shape ``(n_groups, n_steps)`` (``scipy.sparse.csr_matrix``, 1.0
where step ``j`` belongs to group ``g``); groups may overlap (OSUs) or form a partition
(Disjoint Hierarchy, Periodic Summary chunks). Everything here is vectorised numpy /
scipy and knows nothing about a particular method; the group-based baselines (Disjoint
Hierarchy, Periodic Summary, Tree, Coverage-Aware, the recency methods) use it, while
OSU-Mem keeps its OSUs in :class:`osumem.osu.pool.OSUPool`:

* :func:`incidence` builds the matrix from lists of member positions,
  :func:`labels_to_incidence` from one group id per step (a partition);
* :func:`group_centroids` gives the normalised mean embedding of every group,
  :func:`group_costs` their token costs;
* :func:`group_argmax` picks, per group, the member with the largest value (e.g. the
  most central step);
* :func:`budget_prefix` and :func:`coarse_k` size a coarse stage in proportion to the
  budget (K = ⌈ρ·B / mean group cost⌉);
* :func:`coarse_to_fine` selects groups by centroid cosine and ranks their members by
  step cosine; :func:`with_fallback` appends the rest of a fallback ranking (the
  flat cosine order) so the shared first-fit packer can fill leftover budget;
* :func:`recency_order` is the most-recent-first walk.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from osumem.lazy import lazy_module
from osumem.types import FloatMatrix, IntArray, segment_bounds

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = lazy_module("scipy.sparse")


def incidence(groups: Sequence[Sequence[int] | NDArray[Any]], n_steps: int) -> sp.csr_matrix:
    """The ``(len(groups), n_steps)`` 0/1 incidence matrix of ``groups`` (member lists).

    Duplicate members within a group count once.
    """
    lengths = np.fromiter((len(g) for g in groups), dtype=np.int64, count=len(groups))
    cols = (
        np.concatenate([np.asarray(g, dtype=np.int64) for g in groups])
        if lengths.sum()
        else np.empty(0, dtype=np.int64)
    )
    rows = np.repeat(np.arange(len(groups), dtype=np.int64), lengths)
    mat = sp.csr_matrix(
        (np.ones(cols.shape[0], dtype=np.float32), (rows, cols)),
        shape=(len(groups), int(n_steps)),
    )
    mat.sum_duplicates()
    mat.data[:] = 1.0
    return mat


def labels_to_incidence(labels: NDArray[Any]) -> sp.csr_matrix:
    """Incidence of a partition given one group id per step (ids ``0..G-1``; a negative
    id leaves the step in no group)."""
    lab = np.asarray(labels, dtype=np.int64).reshape(-1)
    cols = np.flatnonzero(lab >= 0)
    rows = lab[cols]
    n_groups = int(rows.max()) + 1 if rows.size else 0
    # CSR arrays directly (rows grouped, positions increasing within each row)
    indptr = segment_bounds(np.bincount(rows, minlength=n_groups))
    return sp.csr_matrix(
        (
            np.ones(cols.shape[0], dtype=np.float32),
            cols[np.argsort(rows, kind="stable")],
            indptr,
        ),
        shape=(n_groups, lab.shape[0]),
    )


def group_centroids(embeddings: FloatMatrix, members: sp.csr_matrix) -> FloatMatrix:
    """Normalised mean embedding of every group (rows of unit length; an empty group or
    one whose members cancel gets a zero row)."""
    sums = np.asarray(members @ embeddings, dtype=np.float32)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    return (sums / np.where(norms > 0, norms, 1.0)).astype(np.float32, copy=False)


def group_costs(costs: NDArray[Any], members: sp.csr_matrix) -> IntArray:
    """Total token cost of every group's members."""
    return np.rint(members @ np.asarray(costs, dtype=np.float64)).astype(np.int64)


def group_argmax(values: NDArray[Any], group_ids: NDArray[Any], n_groups: int) -> IntArray:
    """For each group ``g`` in ``0..n_groups-1``, the position ``i`` with
    ``group_ids[i] == g`` maximising ``values[i]`` (ties: the earliest position);
    ``-1`` for a group with no members."""
    vals = np.asarray(values, dtype=np.float64)
    gid = np.asarray(group_ids, dtype=np.int64)
    out = np.full(int(n_groups), -1, dtype=np.int64)
    if gid.size == 0:
        return out
    order = np.lexsort((-vals, gid))  # by group, then value descending; stable
    g_sorted = gid[order]
    first = np.ones(order.shape[0], dtype=bool)
    first[1:] = g_sorted[1:] != g_sorted[:-1]
    out[g_sorted[first]] = order[first]
    return out


def coarse_k(budget: int, mean_group_cost: float, ratio: float) -> int:
    """K = ⌈ρ·B / mean group cost⌉ (ρ = ``ratio``), at least 1."""
    if mean_group_cost <= 0:
        return 1
    return max(1, math.ceil(ratio * budget / mean_group_cost))


def budget_prefix(ranked_costs: NDArray[Any], target: float) -> int:
    """Length of the shortest prefix of ``ranked_costs`` whose sum reaches ``target``
    (the whole array when it never does); at least 1 when the array is non-empty."""
    c = np.asarray(ranked_costs, dtype=np.float64)
    if c.size == 0:
        return 0
    k = int(np.searchsorted(np.cumsum(c), target, side="left")) + 1
    return min(max(k, 1), c.shape[0])


def coarse_to_fine(
    step_cos: NDArray[Any],
    centroid_cos: NDArray[Any],
    members: sp.csr_matrix,
    k: int,
    *,
    group_ok: NDArray[np.bool_] | None = None,
) -> tuple[IntArray, IntArray]:
    """Coarse-to-fine ranking: the top ``k`` groups by ``centroid_cos`` (among those with
    ``group_ok``), then their members by descending ``step_cos``.

    ``step_cos`` holds the cosine of the *visible* steps (positions ``< len(step_cos)``);
    members at or beyond that are dropped, which keeps the result causal. Returns
    ``(candidates, chosen_groups)``: member positions best first (ties keep position
    order; a step in several chosen groups appears once) and the chosen group ids in
    rank order.
    """
    limit = int(np.asarray(step_cos).shape[0])
    gc = np.asarray(centroid_cos, dtype=np.float64)
    if group_ok is not None:
        gc = np.where(group_ok, gc, -np.inf)
    n_ok = int(np.isfinite(gc).sum())
    order = np.argsort(-gc, kind="stable")[: min(int(k), n_ok)]
    if order.size == 0 or limit == 0:
        return np.empty(0, dtype=np.int64), order.astype(np.int64)
    hit = _column_sums(members, order, limit) > 0
    cand = np.flatnonzero(hit)
    cand = cand[np.argsort(-np.asarray(step_cos)[cand], kind="stable")]
    return cand.astype(np.int64), order.astype(np.int64)


def _column_sums(members: sp.spmatrix, rows: IntArray, limit: int) -> NDArray[Any]:
    """Sums over ``rows`` of ``members``' columns ``< limit`` (``members[rows][:,
    :limit].sum(axis=0)`` as a flat array: the same additions in the same order, read
    straight from the CSR arrays)."""
    if not sp.isspmatrix_csr(members) and not isinstance(members, sp.csr_array):
        return np.asarray(members[rows][:, :limit].sum(axis=0)).ravel()
    indptr = members.indptr
    starts = indptr[rows].astype(np.int64)
    lens = indptr[rows + 1].astype(np.int64) - starts
    total = int(lens.sum())
    entry = np.arange(total, dtype=np.int64) + np.repeat(starts - segment_bounds(lens)[:-1], lens)
    cols = members.indices[entry]
    sel = cols < limit
    acc = np.result_type(members.dtype, np.float32) if members.dtype.kind == "f" else None
    weights = members.data[entry][sel]
    if acc is not None:
        sums = np.zeros(limit, dtype=acc)
        np.add.at(sums, cols[sel], weights)
        return sums
    return np.bincount(cols[sel], weights=weights, minlength=limit)


def with_fallback(primary: NDArray[Any], fallback: NDArray[Any], n_steps: int) -> IntArray:
    """``primary`` followed by the entries of ``fallback`` not in it (both position
    arrays < ``n_steps``): first-fit packing of the result fills leftover budget from
    the fallback ranking."""
    prim = np.asarray(primary, dtype=np.int64)
    seen = np.zeros(int(n_steps), dtype=bool)
    seen[prim] = True
    fb = np.asarray(fallback, dtype=np.int64)
    return np.concatenate([prim, fb[~seen[fb]]])


def recency_order(limit: int, start: int = 0) -> IntArray:
    """Positions ``limit-1, limit-2, …, start`` (most recent first)."""
    return np.arange(int(limit) - 1, int(start) - 1, -1, dtype=np.int64)


def label_codes(labels: NDArray[Any], *, empty: Any = "") -> IntArray:
    """Integer codes ``0..L-1`` for the distinct labels (in sorted label order); steps
    whose label equals ``empty`` get ``-1``."""
    lab = np.asarray(labels, dtype=object)
    codes = np.full(lab.shape[0], -1, dtype=np.int64)
    known = lab != empty
    if known.any():
        _, inv = np.unique(lab[known].astype(str), return_inverse=True)
        codes[known] = inv
    return codes
