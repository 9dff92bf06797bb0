"""Sums of member embeddings: the centroid and coherence arithmetic of the OSU pool.

Batch construction, incremental adds and restored snapshots all compute a group's
float64 member sum the same way (zero, then each member added in increasing position
order), so their centroids agree bit for bit.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from osumem.lazy import lazy_module
from osumem.types import IntArray, segment_bounds

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = lazy_module("scipy.sparse")

#: Groups summed at a time by :func:`member_stats` (bounds its float64 scratch).
STATS_CHUNK = 256


def member_stats(
    members: sp.spmatrix,
    embeddings: NDArray[np.float32],
    groups: IntArray,
    out: NDArray[np.float32] | None = None,
) -> NDArray[np.float64]:
    """The norms of the float64 member sums of the columns ``groups`` of ``members``;
    with ``out`` (``(len(groups), d)``), also the normalised sums (centroids, float32)
    written into it.

    Each group's members are added one after another in increasing position order
    (the order :func:`row_sum` uses, so batch and incremental state agree bit for
    bit), :data:`STATS_CHUNK` groups at a time over just the rows they use, so the
    float64 scratch stays small whatever the memory size, and no centroid is held
    that the caller does not keep.
    """
    mt = sp.csr_matrix(members.T)[groups]
    mt.sort_indices()
    norms = np.empty(groups.shape[0], dtype=np.float64)
    for lo in range(0, groups.shape[0], STATS_CHUNK):
        sub = mt[lo : lo + STATS_CHUNK]
        rows, local = np.unique(sub.indices, return_inverse=True)
        sub = sp.csr_matrix(
            (sub.data, local.reshape(-1), sub.indptr), shape=(sub.shape[0], rows.shape[0])
        )
        sums = np.asarray(sub @ embeddings[rows].astype(np.float64))
        nrm = row_norms(sums)
        norms[lo : lo + sub.shape[0]] = nrm
        if out is not None:
            out[lo : lo + sub.shape[0]] = sums / np.where(nrm > 0, nrm, 1.0)[:, None]
    return norms


def segment_stats(
    embeddings: NDArray[np.float32],
    steps: IntArray,
    bounds: IntArray,
    out: NDArray[np.float32] | None = None,
) -> NDArray[np.float64]:
    """:func:`member_stats` of groups given as consecutive segments of ``steps``
    (group ``i``: ``steps[bounds[i]:bounds[i + 1]]``, increasing, at least one member),
    without a sparse matrix: the same float64 sums (zero plus each member in
    increasing position order, so the same bits), :data:`STATS_CHUNK` groups at a
    time. Within a chunk the groups are visited largest first, so the groups that
    still have a ``k``-th member are a prefix: the chunk's member rows are gathered
    once, ordered by member rank, then added with one vectorised add per rank."""
    n_groups = bounds.shape[0] - 1
    norms = np.empty(n_groups, dtype=np.float64)
    sizes = np.diff(bounds)
    for lo in range(0, n_groups, STATS_CHUNK):
        hi = min(n_groups, lo + STATS_CHUNK)
        size = sizes[lo:hi]
        by_size = np.argsort(-size, kind="stable")
        start = bounds[lo:hi][by_size]
        # active[k]: groups with a k-th member (a prefix of the size-sorted groups)
        active = np.searchsorted(-size[by_size], -np.arange(int(size.max())), side="left")
        offset = segment_bounds(active)
        rank = np.repeat(np.arange(active.shape[0]), active)
        group = np.arange(rank.shape[0]) - offset[rank]
        rows = embeddings[steps[start[group] + rank]]
        sums = np.zeros((hi - lo, embeddings.shape[1]), dtype=np.float64)
        for a, b in itertools.pairwise(offset.tolist()):
            sums[: b - a] += rows[a:b]
        del rows
        nrm = row_norms(sums)
        norms[lo + by_size] = nrm
        if out is not None:
            out[lo + by_size] = sums / np.where(nrm > 0, nrm, 1.0)[:, None]
    return norms


def row_norms(sums: NDArray[np.float64]) -> NDArray[np.float64]:
    """L2 norm of every row (one code path for batch and incremental sums)."""
    return np.sqrt(np.add.reduce(sums * sums, axis=1))


def row_sum(embeddings: NDArray[np.float32], rows: Sequence[int]) -> NDArray[np.float64]:
    """``(1, d)`` float64 sum of ``rows`` added one after another, from 0.0 (NumPy
    reduces a C-ordered matrix along its first axis row after row, adding each row to
    the running sum: the bits, zeros' signs included, of a Python loop of ``+=``)."""
    at = np.asarray(rows, dtype=np.intp)  # a tuple would index dimensions, not rows
    return np.add.reduce(embeddings[at].astype(np.float64), axis=0, initial=0.0, keepdims=True)
