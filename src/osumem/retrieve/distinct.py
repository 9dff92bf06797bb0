"""Equal rows indexed once: digests of float32 rows, and an append-only HNSW index over
the distinct rows of a growing matrix (the step index's), each answer expanded to every
row that holds it.

A memory can hold the same steps many times over (an agent repeating a tool call and
getting the same observation, a log ingested twice under other sources). HNSW with many
equal points fills their neighbour lists with each other, and a search misses much of
the top k without the recall safeguard noticing (measured in docs/decisions.md); one
point per distinct row avoids that.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.osu.views import INSERT_CHUNK, KnnIndex
from osumem.types import IntArray

#: Rows digested and grouped per piece of one :meth:`DistinctKnn.add` (the digests of a
#: piece are held at once).
KEY_CHUNK = 16_384

#: Keys of distinct rows added since the sorted key arrays were last merged, kept in a
#: dict up to this many (an agent's adds: a few rows each) ...
RECENT_MAX = 4096

#: ... and an add bringing more new keys than this merges them into the sorted arrays
#: at once (a bulk).
RECENT_BATCH_MAX = 256


def row_key(row: memoryview) -> bytes:
    """A 16-byte BLAKE2b digest of a row's float32 bytes: equal rows, equal keys (a
    digest, not the bytes: 16 bytes a key instead of 4 per dimension)."""
    return hashlib.blake2b(row, digest_size=16).digest()


def row_keys(rows: NDArray[np.float32]) -> list[bytes]:
    """:func:`row_key` of each row of ``rows``."""
    arr = np.ascontiguousarray(rows, dtype=np.float32)
    if arr.shape[0] == 0:
        return []
    data = arr.data.cast("B")
    width = arr.shape[1] * arr.itemsize
    return [row_key(data[i : i + width]) for i in range(0, len(data), width)]


class DistinctKnn:
    """An append-only HNSW index (inner product on unit rows) over rows ``0..size-1``
    of a growing matrix, holding each distinct row once: the graph's labels are
    *groups* of equal rows (numbered in the order their first row came), and a query
    answers the rows of the groups it finds, best first, the rows of one group by
    position, cut to the ``k`` asked for (what an exact scan answers for rows of equal
    score). When every row is distinct, each group is its row and the graph is the one
    :class:`~osumem.osu.views.KnnIndex` builds over the rows.

    Rows are keyed by :func:`row_key` (equal digests taken as equal rows, as the
    centroid index does); the keys are a sorted array plus a dict of those added since
    it was last merged: with each group's first row and flag, about 33 bytes a
    distinct row (2% of a 384-d float32 row).

    Thread use: one thread adds at a time (the caller's lock); queries on other threads
    read the groups of every label the graph can answer, published before the label
    enters the graph.
    """

    def __init__(
        self, dim: int, seed: int = 0, *, ef_construction: int, capacity: int = 1024
    ) -> None:
        #: The HNSW index over the distinct rows, labelled by group.
        self.knn = KnnIndex(dim, seed, ef_construction=ef_construction, capacity=capacity)
        #: Rows added (positions ``0..size-1``).
        self.size = 0
        self._keys: NDArray[Any] = np.empty(0, dtype="V16")
        self._key_groups: IntArray = np.empty(0, dtype=np.int64)
        self._recent: dict[bytes, int] = {}
        #: What a query reads to turn labels into rows, as one tuple: per group its
        #: first row and whether it holds more than one, and the rows of each group of
        #: more than one (a tuple, replaced at each change).
        self._expand: tuple[IntArray, NDArray[np.bool_], dict[int, tuple[int, ...]]] = (
            np.empty(0, dtype=np.int64),
            np.empty(0, dtype=bool),
            {},
        )
        #: Whether any row has joined another's group; until one has, every group is
        #: its row and a label is the row's position.
        self._repeats = False

    @property
    def capacity(self) -> int:
        """How many rows the index holds before the graph must grow (a copy of it
        whole), when every row still to come is distinct."""
        return self.size + self.knn.capacity - self.knn.size

    @property
    def n_groups(self) -> int:
        """Distinct rows (points of the graph)."""
        return self.knn.size

    def members(self, g: int) -> tuple[int, ...]:
        """The rows of group ``g``, by position."""
        first, _, shared = self._expand
        return shared.get(g, (int(first[g]),))

    def groups(self) -> dict[int, tuple[int, ...]]:
        """Every group and its rows (a copy)."""
        return {g: self.members(g) for g in range(self.n_groups)}

    def add(self, vectors: NDArray[np.float32]) -> None:
        """Append ``vectors`` (unit rows) as rows ``size..size+m-1``: each joins the
        group of an equal row, or opens a group whose point enters the graph."""
        rows = np.ascontiguousarray(vectors, dtype=np.float32)
        for lo in range(0, rows.shape[0], KEY_CHUNK):
            self._add(rows[lo : lo + KEY_CHUNK])

    def _add(self, rows: NDArray[np.float32]) -> None:
        m = int(rows.shape[0])
        if m == 0:
            return
        keys = row_keys(rows)
        found = self._in_sorted(keys)
        recent = self._recent
        n0 = self.n_groups
        opened: dict[bytes, int] = {}  # the groups this add opens, by key, in order
        openers: list[int] = []
        joins: dict[int, list[int]] = {}  # rows joining a group, by group
        for i, key in enumerate(keys):
            g = found[i]
            if g < 0:
                g = recent.get(key, -1)
            if g < 0:
                g = opened.get(key, -1)
            if g < 0:
                opened[key] = n0 + len(openers)
                openers.append(i)
            else:
                joins.setdefault(g, []).append(self.size + i)
        self._publish(openers, joins, n0)
        whole = len(openers) == m  # every row opens a group: no gather
        for lo in range(0, len(openers), INSERT_CHUNK):  # labels n0.. in order
            piece = openers[lo : lo + INSERT_CHUNK]
            self.knn.add(rows[lo : lo + len(piece)] if whole else rows[piece])
        self._remember(opened)
        self.size += m

    def _in_sorted(self, keys: list[bytes]) -> list[int]:
        """The group of each key found in the sorted key arrays (-1: not there)."""
        if not self._keys.size:
            return [-1] * len(keys)
        arr = np.frombuffer(b"".join(keys), dtype="V16")
        at = np.minimum(np.searchsorted(self._keys, arr), self._keys.size - 1)
        return np.where(self._keys[at] == arr, self._key_groups[at], -1).tolist()

    def _publish(self, openers: list[int], joins: dict[int, list[int]], n0: int) -> None:
        """Record the groups of this add's rows (before their labels enter the graph)."""
        first, multi, shared = self._expand
        need = n0 + len(openers)
        if need > first.shape[0]:
            size = max(need, 2 * first.shape[0], 1024)
            grown_first = np.full(size, -1, dtype=np.int64)
            grown_multi = np.zeros(size, dtype=bool)
            grown_first[:n0] = first[:n0]
            grown_multi[:n0] = multi[:n0]
            first, multi = grown_first, grown_multi
        first[n0:need] = np.asarray(openers, dtype=np.int64) + self.size
        self._expand = (first, multi, shared)
        for g, rows in joins.items():
            shared[g] = (*self.members(g), *rows)
            multi[g] = True
        if joins:
            self._repeats = True

    def _remember(self, opened: dict[bytes, int]) -> None:
        """Key the groups this add opened: into the dict, or (a bulk, or the dict full)
        merged with it into the sorted arrays."""
        recent = self._recent
        if len(opened) <= RECENT_BATCH_MAX and len(recent) + len(opened) <= RECENT_MAX:
            recent.update(opened)
            return
        merged = recent | opened
        keys = np.frombuffer(b"".join(merged), dtype="V16")
        groups = np.fromiter(merged.values(), dtype=np.int64, count=len(merged))
        order = np.argsort(keys, kind="stable")
        keys, groups = keys[order], groups[order]
        at = np.searchsorted(self._keys, keys)
        self._keys = np.insert(self._keys, at, keys)
        self._key_groups = np.insert(self._key_groups, at, groups)
        self._recent = {}

    def query(self, q: NDArray[np.float32], k: int, ef: int | None = None) -> IntArray:
        """About the ``k`` rows most similar to ``q``, best first: the rows of the
        (about) ``k`` best groups the graph finds with beam ``ef`` (default as
        :meth:`KnnIndex.query <osumem.osu.views.KnnIndex.query>`), cut to ``k``."""
        labels = self.knn.query(q, k, ef)
        if not self._repeats:  # every group one row, numbered by position
            return labels
        first, multi, shared = self._expand
        if not multi[labels].any():
            return first[labels]
        rows = itertools.chain.from_iterable(
            shared.get(g, (int(first[g]),)) for g in labels.tolist()
        )
        return np.fromiter(itertools.islice(rows, k), dtype=np.int64)
