"""Candidate groups of each view: keyed grouping, temporal-gap splitting,
S_max chunking, and the similarity view's k-NN communities.

Everything here produces *raw* groups (before the f_min filter and the M_max cap,
which :mod:`osumem.osu.pool` applies across views).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import MissingExtraError
from osumem.osu.background import native_call
from osumem.osu.config import OSUConfig
from osumem.types import IntArray, MemoryView, segment_bounds

#: A raw group: (view, key, member positions in increasing order).
RawGroup = tuple[str, str, IntArray]

#: Raw groups of one view as flat arrays: ``(keys, positions, bounds)``, group ``i``
#: being key ``keys[i]`` with members ``positions[bounds[i]:bounds[i + 1]]``
#: (increasing).
GroupArrays = tuple[list[str], IntArray, IntArray]


def split_segments(positions: NDArray[np.int64], max_gap: float, max_size: int) -> list[IntArray]:
    """Split sorted ``positions`` wherever consecutive members are more than ``max_gap``
    apart (a gap of exactly ``max_gap`` does not split), then cut each segment into
    consecutive chunks of at most ``max_size`` (S_max) members."""
    pos = np.asarray(positions, dtype=np.int64)
    if pos.size == 0:
        return []
    if math.isinf(max_gap):
        segments = [pos]
    else:
        cuts = np.flatnonzero(np.diff(pos) > max_gap) + 1
        segments = np.split(pos, cuts)
    out: list[IntArray] = []
    for seg in segments:
        out.extend(seg[i : i + max_size] for i in range(0, seg.shape[0], max_size))
    return out


def step_keys(view: MemoryView, name: str, start: int = 0) -> Iterable[tuple[int, str]]:
    """``(position, key)`` pairs of annotation view ``name`` for steps ``start..n-1``.

    Entity: one pair per entity string of the step; tool: the (non-empty) tool
    signature; subgoal: the (non-empty) subgoal label.
    """
    if name == "entity":
        for p in range(start, view.n):
            for e in sorted(view.entities[p]):
                yield p, e
        return
    column = view.tool_signatures if name == "tool" else view.subgoals
    for p in range(start, view.n):
        key = column[p]
        if key:
            yield p, str(key)


def annotation_group_arrays(view: MemoryView, name: str, config: OSUConfig) -> GroupArrays:
    """:func:`annotation_groups` as flat arrays (see :data:`GroupArrays`): the same
    groups in the same order, without an array per group."""
    n_steps = view.n
    if name == "entity":
        ents = view.entities[:n_steps]
        lens = np.fromiter(map(len, ents), dtype=np.int64, count=n_steps)
        vals: list[Any] = list(itertools.chain.from_iterable(map(sorted, ents)))
        at = np.repeat(np.arange(n_steps, dtype=np.int64), lens)
    else:
        column = view.tool_signatures if name == "tool" else view.subgoals
        col = np.asarray(column[:n_steps], dtype=object)
        at = np.flatnonzero(col.astype(bool)).astype(np.int64)
        vals = list(map(str, col[at].tolist()))  # str(s) is s itself for a str
    if not vals:
        return [], np.empty(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    # keys numbered in order of first appearance (each key's first string object)
    code_of = dict(zip(dict.fromkeys(vals), itertools.count()))
    code = np.fromiter(map(code_of.__getitem__, vals), dtype=np.int64, count=len(vals))
    del vals
    order = np.argsort(code, kind="stable")
    pos = at[order]
    code = code[order]
    n = pos.shape[0]
    # a segment starts at a new key or after a gap over Δ_view; a group every S_max
    # members of a segment
    seg_start = np.ones(n, dtype=bool)
    seg_start[1:] = code[1:] != code[:-1]
    delta = config.split_threshold(name)
    if not math.isinf(delta):
        seg_start[1:] |= np.diff(pos) > delta
    first = np.flatnonzero(seg_start)
    within = np.arange(n) - first[np.cumsum(seg_start) - 1]
    starts = np.flatnonzero(within % config.max_osu_size == 0)
    keys = list(code_of)
    group_keys = list(map(keys.__getitem__, code[starts].tolist()))
    return group_keys, pos, np.append(starts, n)


def annotation_groups(view: MemoryView, name: str, config: OSUConfig) -> list[RawGroup]:
    """Raw groups of annotation view ``name`` (entity, tool or subgoal) over ``view``:
    every key's steps, split at gaps over Δ_view and chunked at S_max (keys in order of
    first appearance, each key's groups in time order: :func:`split_segments` of every
    key's positions, computed for all keys at once)."""
    keys, pos, bounds = annotation_group_arrays(view, name, config)
    cuts = bounds.tolist()
    return [(name, k, pos[lo:hi]) for k, lo, hi in zip(keys, cuts, cuts[1:], strict=False)]


def annotated_mask(view: MemoryView, views: tuple[str, ...]) -> NDArray[np.bool_]:
    """True for steps carrying an entity (when the entity view is enabled) or a tool
    signature (when the tool view is enabled): the steps the similarity view's
    fallback scope leaves out."""
    out = np.zeros(view.n, dtype=bool)
    if "entity" in views:
        out |= np.fromiter(map(bool, view.entities[: view.n]), dtype=bool, count=view.n)
    if "tool" in views:
        out |= view.tool_signatures != ""
    return out


#: Up to this many steps the similarity view's k-NN graph is exact (one dense product,
#: the paper's construction); above it an HNSW index answers it (docs/decisions.md).
EXACT_KNN_MAX = 4096

#: Rows inserted into an HNSW index per call of hnswlib: a background build checks
#: between them whether the interpreter is exiting (:func:`~osumem.osu.background.native_call`).
INSERT_CHUNK = 1024

#: HNSW parameters of the similarity view's index (graph degree, build beam, query beam).
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 100
HNSW_EF_SEARCH = 40


@functools.cache
def hnsw_available() -> bool:
    """Whether hnswlib (the ``scale`` extra) is installed; without it every path is
    exact (correct, but quadratic for the similarity view of large memories)."""
    import importlib.util

    # found, not imported: a cold query asks this of a snapshot before it knows
    # whether any index will be used (importing hnswlib costs about 1 ms)
    return importlib.util.find_spec("hnswlib") is not None


def knn_edges(embeddings: NDArray[np.float32], k: int) -> tuple[IntArray, IntArray]:
    """Edges ``(src, dst)`` of the cosine k-NN graph (each node to its k most similar
    other nodes; rows are unit length so cosine is a dot product). Exact for up to
    :data:`EXACT_KNN_MAX` nodes, approximate (HNSW) above."""
    n = embeddings.shape[0]
    k = min(k, n - 1)
    if k < 1:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    if n > EXACT_KNN_MAX and hnsw_available():
        index = KnnIndex(embeddings.shape[1], capacity=n)
        index.add(embeddings)
        return index.edges(k, lambda lo, hi: embeddings[lo:hi])
    nn = np.empty((n, k), dtype=np.int64)
    for lo in range(0, n, EXACT_KNN_MAX):
        # one block of rows at a time: O(block × n) memory (a single block up to
        # EXACT_KNN_MAX nodes, the construction the benchmarks use)
        sims = embeddings[lo : lo + EXACT_KNN_MAX] @ embeddings.T
        rows = np.arange(sims.shape[0])
        sims[rows, lo + rows] = -np.inf
        nn[lo : lo + sims.shape[0]] = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    src = np.repeat(np.arange(n, dtype=np.int64), k)
    return src, nn.reshape(-1)


class KnnIndex:
    """An append-only HNSW index (hnswlib, inner product on unit rows) over the steps
    the similarity view covers, labelled ``0..size-1`` in insertion order.

    Insertion is single-threaded so the graph, and hence the communities, are the same
    for the same inputs; :meth:`edges` uses every core (its answers do not depend on it).

    hnswlib keeps the search beam (``ef``) on the index, not on the call: each search
    sets it and searches under one lock, so a query on another thread (a server's
    readers) never searches with a beam set for someone else's.
    """

    def __init__(
        self,
        dim: int,
        seed: int = 0,
        *,
        ef_construction: int = HNSW_EF_CONSTRUCTION,
        capacity: int = 1024,
    ) -> None:
        import hnswlib

        self.dim = int(dim)
        self._index = hnswlib.Index(space="ip", dim=self.dim)
        self._index.init_index(
            max_elements=max(1024, int(capacity)),
            M=HNSW_M,
            ef_construction=ef_construction,
            random_seed=seed,
        )
        self.size = 0
        self._ef = -1
        #: Held from setting the beam to the end of the search that uses it.
        self._beam = threading.Lock()

    def _search(self, vectors: NDArray[np.float32], k: int, ef: int, threads: int) -> IntArray:
        """hnswlib's ``knn_query`` of ``vectors`` with beam ``ef`` (set only when it
        changes) on ``threads`` threads (``-1``: every core): the labels."""
        with self._beam:
            if ef != self._ef:
                self._index.set_ef(ef)
                self._ef = ef
            with native_call():
                labels, _ = self._index.knn_query(vectors, k=k, num_threads=threads)
        return labels

    @property
    def capacity(self) -> int:
        """How many rows the index holds before it must grow (a copy of it whole)."""
        return int(self._index.get_max_elements())

    def add(self, vectors: NDArray[np.float32]) -> None:
        """Insert ``vectors`` (unit rows) as the next labels."""
        m = int(vectors.shape[0])
        if m == 0:
            return
        need = self.size + m
        cap = self._index.get_max_elements()
        if need > cap:
            with self._beam:  # hnswlib moves the graph's memory: no search meanwhile
                self._index.resize_index(max(need, 2 * cap))
        rows = np.ascontiguousarray(vectors, dtype=np.float32)
        # in pieces, the exit checked between them (one thread inserting in label
        # order either way: the same graph as one call)
        for lo in range(0, m, INSERT_CHUNK):
            hi = min(m, lo + INSERT_CHUNK)
            with native_call():
                self._index.add_items(
                    rows[lo:hi], np.arange(self.size, self.size + hi - lo), num_threads=1
                )
            self.size += hi - lo

    def query(self, q: NDArray[np.float32], k: int, ef: int | None = None) -> IntArray:
        """Labels of the (approximately) ``k`` nearest indexed rows to ``q``, most
        similar first (search beam ``ef``; default ``max(HNSW_EF_SEARCH, 2k)``)."""
        k = min(k, self.size)
        if k < 1:
            return np.empty(0, dtype=np.int64)
        beam = max(HNSW_EF_SEARCH, 2 * k) if ef is None else max(int(ef), k)
        return self._search(q[None, :], k, beam, 1)[0].astype(np.int64)

    def edges(
        self,
        k: int,
        rows: Callable[[int, int], NDArray[np.float32]] | None = None,
        batch: int = 4096,
    ) -> tuple[IntArray, IntArray]:
        """Each indexed node to its (approximately) ``k`` most similar other nodes.

        ``rows(lo, hi)`` returns the vectors of labels ``lo..hi-1`` (the rows that were
        inserted); without it they are read back from the index, which hnswlib does
        through Python lists (about 8× the vectors' size in transient memory).
        """
        n = self.size
        k = min(k, n - 1)
        if k < 1:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        beam = max(HNSW_EF_SEARCH, 2 * (k + 1))
        dst = np.empty((n, k), dtype=np.int64)
        for lo in range(0, n, batch):
            hi = min(n, lo + batch)
            if rows is None:
                vecs = self._index.get_items(np.arange(lo, hi), return_type="numpy")
            else:
                vecs = np.ascontiguousarray(rows(lo, hi), dtype=np.float32)
            labels = self._search(vecs, k + 1, beam, -1)
            own = np.arange(lo, hi, dtype=np.int64)[:, None]
            # drop each node itself (or, when it is absent, the last neighbour)
            not_self = labels != own
            drop = np.where(not_self.all(axis=1), k, np.argmin(not_self, axis=1))
            keep = np.ones_like(not_self)
            keep[np.arange(hi - lo), drop] = False
            dst[lo:hi] = labels[keep].reshape(hi - lo, k)
        src = np.repeat(np.arange(n, dtype=np.int64), k)
        return src, dst.reshape(-1)


def _igraph() -> Any:
    """igraph, imported without its plotting back end: igraph's drawing module imports
    matplotlib.pyplot whenever matplotlib is installed (about 0.4 s, twice the rest of
    a warm ``osumem query``), and nothing here draws a graph. A matplotlib that is
    already imported is left alone."""
    import sys

    if "igraph" in sys.modules or "matplotlib" in sys.modules:
        import igraph

        return igraph
    sys.modules["matplotlib"] = None  # type: ignore[assignment]  # import fails: no plotting
    try:
        import igraph
    finally:
        del sys.modules["matplotlib"]
    return igraph


#: The memo of :func:`shared_communities` (``None``: no memo is active).
_COMMUNITY_MEMO: ContextVar[dict[tuple[Any, ...], list[IntArray]] | None] = ContextVar(
    "osumem_community_memo", default=None
)


@contextmanager
def shared_communities() -> Iterator[None]:
    """Within this block, :func:`communities` of a graph it has already partitioned
    (the same nodes, edges, method and seed; no starting partition) returns the
    communities found the first time instead of running the detection again.

    The detection is deterministic, so the answer is the same; what is saved is the
    time. The evaluation runner uses it per episode: constructions that differ only
    in the membership cap M_max (e.g. the M_max sweep, or the similarity-only
    ablations at M_max 1 and 5) see the same similarity graph. Memory: the memo
    lives until the block ends."""
    token = _COMMUNITY_MEMO.set({})
    try:
        yield
    finally:
        _COMMUNITY_MEMO.reset(token)


def communities(
    n: int,
    src: IntArray,
    dst: IntArray,
    method: str,
    seed: int,
    initial: IntArray | None = None,
) -> list[IntArray]:
    """Communities of the undirected graph on ``n`` nodes, with a fixed seed:
    Leiden (leidenalg, modularity) or Louvain (networkx). ``initial`` (Leiden only) is a
    starting membership per node, e.g. the previous partition with new nodes as
    singletons, so a refresh refines instead of starting over. Inside
    :func:`shared_communities`, a graph seen before is not partitioned again."""
    if n == 0:
        return []
    memo = _COMMUNITY_MEMO.get()
    if memo is None or initial is not None:
        return _communities(n, src, dst, method, seed, initial)
    s, d = np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64)
    key = (
        int(n),
        method,
        int(seed),
        s.shape[0],
        hashlib.blake2b(s.tobytes() + d.tobytes(), digest_size=20).digest(),
    )
    found = memo.get(key)
    if found is None:
        found = _communities(n, s, d, method, seed, None)
        for c in found:  # shared by every caller of the block: read-only
            c.flags.writeable = False
        memo[key] = found
    return list(found)


def _communities(
    n: int,
    src: IntArray,
    dst: IntArray,
    method: str,
    seed: int,
    initial: IntArray | None,
) -> list[IntArray]:
    if method == "leiden":
        ig = _igraph()
        import leidenalg

        lo, hi = np.minimum(src, dst), np.maximum(src, dst)
        pairs = np.unique(lo[lo != hi] * np.int64(n) + hi[lo != hi])
        edges = np.column_stack([pairs // n, pairs % n])
        graph = ig.Graph(n=n, edges=edges, directed=False)
        membership = None if initial is None else [int(c) for c in initial]
        part = leidenalg.find_partition(
            graph, leidenalg.ModularityVertexPartition, initial_membership=membership, seed=seed
        )
        return [np.sort(np.asarray(c, dtype=np.int64)) for c in part]
    try:
        import networkx as nx
    except ImportError:
        raise MissingExtraError(
            "community='louvain' needs networkx: pip install 'osumem[baselines]' "
            "(or keep community='leiden')"
        ) from None

    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(src.tolist(), dst.tolist(), strict=True))
    comms = nx.community.louvain_communities(g, seed=seed)
    return sorted((np.sort(np.fromiter(c, dtype=np.int64)) for c in comms), key=lambda a: a[0])


def warm_community_imports() -> None:
    """Import igraph and leidenalg now (what the first Leiden run would import: about
    70 ms), e.g. before a server answers, so no refresh pays for it."""
    _igraph()
    import leidenalg  # noqa: F401


def similarity_scope(view: MemoryView, config: OSUConfig) -> IntArray:
    """Positions the similarity view covers (``similarity_scope``): every step, or the
    steps without an entity or tool annotation of the enabled views."""
    if config.similarity_scope == "all":
        return np.arange(view.n, dtype=np.int64)
    return np.flatnonzero(~annotated_mask(view, config.views)).astype(np.int64)


def community_group_arrays(
    scope: IntArray, comms: list[IntArray], config: OSUConfig
) -> GroupArrays:
    """:func:`community_groups` as flat arrays (see :data:`GroupArrays`): each
    community's positions chunked at S_max in time order, communities in order."""
    lens = np.fromiter(map(len, comms), dtype=np.int64, count=len(comms))
    n = int(lens.sum())
    if n == 0:
        return [], np.empty(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    pos = scope[np.concatenate(comms)].astype(np.int64, copy=False)
    first = segment_bounds(lens)[:-1]
    comm = np.repeat(np.arange(lens.shape[0], dtype=np.int64), lens)
    within = np.arange(n) - first[comm]
    starts = np.flatnonzero(within % config.max_osu_size == 0)
    keys = [f"community{c}" for c in comm[starts].tolist()]  # one string per group
    return keys, pos, np.append(starts, n)


def community_groups(scope: IntArray, comms: list[IntArray], config: OSUConfig) -> list[RawGroup]:
    """Raw groups of the similarity view from communities over ``scope`` (indices into
    it): each community's positions chunked at S_max in time order."""
    keys, pos, bounds = community_group_arrays(scope, comms, config)
    cuts = bounds.tolist()
    return [("similarity", k, pos[lo:hi]) for k, lo, hi in zip(keys, cuts, cuts[1:], strict=False)]


def similarity_group_arrays(
    view: MemoryView,
    config: OSUConfig,
    seed: int,
    *,
    detect: Callable[..., list[IntArray]] | None = None,
) -> GroupArrays:
    """:func:`similarity_groups` as flat arrays (see :data:`GroupArrays`); ``detect``
    finds the communities (default :func:`communities`; the same arguments)."""
    scope = similarity_scope(view, config)
    if scope.size < 2:
        return [], np.empty(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    src, dst = knn_edges(view.embeddings[scope], config.knn_k)
    comms = (detect or communities)(scope.size, src, dst, config.community, seed)
    return community_group_arrays(scope, comms, config)


def similarity_groups(view: MemoryView, config: OSUConfig, seed: int) -> list[RawGroup]:
    """Raw groups of the similarity view: communities of the cosine k-NN graph (k =
    ``knn_k``) over the steps in scope (``similarity_scope``), each chunked at S_max in
    time order."""
    keys, pos, bounds = similarity_group_arrays(view, config, seed)
    cuts = bounds.tolist()
    return [("similarity", k, pos[lo:hi]) for k, lo, hi in zip(keys, cuts, cuts[1:], strict=False)]
