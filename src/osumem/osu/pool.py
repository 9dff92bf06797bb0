"""The OSU pool shared by the retrievers and the analysis (SPEC §4).

Construction keeps *raw groups* per view (keyed grouping, Δ_view splitting, S_max
chunks) and derives the pool from them: prune groups under f_min, cap every step at
M_max memberships by view priority (ties: higher centroid coherence), re-apply f_min.
The derivation is vectorised over (step, group) pairs, so :meth:`OSUPool.add` only
extends the raw groups with the new tail steps (appending to each key's open segment or
opening a new one) and re-derives; the similarity view is recomputed in batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from osumem.errors import DimensionError, InvalidInputError
from osumem.osu.config import VIEWS, OSUConfig
from osumem.osu.views import (
    EXACT_KNN_MAX,
    KnnIndex,
    RawGroup,
    annotation_groups,
    communities,
    community_groups,
    similarity_groups,
    similarity_scope,
    step_keys,
)
from osumem.types import IntArray, MemoryView

ANNOTATION_VIEWS: tuple[str, ...] = ("entity", "tool", "subgoal")

#: Embedding columns converted to float64 at a time by :func:`member_sums`.
SUM_COLUMNS = 16


def member_sums(members: sp.spmatrix, embeddings: NDArray[np.float32]) -> NDArray[np.float64]:
    """``members.T @ embeddings`` in float64, a block of embedding columns at a time, so
    the float64 copy is ``n × SUM_COLUMNS`` instead of ``n × d`` (each entry is summed
    in the same order as one full product, so the result is identical)."""
    mt = members.T.tocsr()
    d = embeddings.shape[1]
    out = np.empty((mt.shape[0], d), dtype=np.float64)
    for lo in range(0, d, SUM_COLUMNS):
        hi = min(d, lo + SUM_COLUMNS)
        out[:, lo:hi] = np.asarray(mt @ embeddings[:, lo:hi].astype(np.float64))
    return out


@dataclass
class _OpenGroups:
    """Raw groups of the annotation views plus, per (view, key), the index of the
    key's most recent group (the one a new step may join)."""

    groups: list[RawGroup] = field(default_factory=list)
    last: dict[tuple[str, str], int] = field(default_factory=dict)


class OSUPool:
    """A pool of OSUs over ``n_steps`` steps.

    Attributes (``m`` OSUs, in canonical order: view priority, first member, key):
        members: ``(n_steps, m)`` CSC 0/1 step × OSU membership matrix.
        view_codes: ``(m,)`` index into :data:`~osumem.osu.config.VIEWS` of each OSU.
        keys: ``(m,)`` the OSU's key (entity string, tool signature, subgoal label,
            or ``communityN``).
        centroids: ``(m, d)`` float32 normalised mean member embedding.
        costs: ``(m,)`` int64 total token cost of the members.
        spans: ``(m, 2)`` first and last member position.
        sizes: ``(m,)`` member counts.
        coherence: ``(m,)`` mean cosine of the members to the centroid.
    """

    def __init__(self, config: OSUConfig, seed: int = 0) -> None:
        self.config = config
        self.seed = int(seed)
        self.view_: MemoryView | None = None
        self._open = _OpenGroups()
        self._similarity: list[RawGroup] = []
        self._similarity_upto = 0
        self._knn: KnnIndex | None = None
        self._partition: IntArray | None = None
        self._dirty = False
        self._set_empty(0, 0)

    # -- construction ----------------------------------------------------------------

    @classmethod
    def build(cls, view: MemoryView, config: OSUConfig, seed: int = 0) -> OSUPool:
        """Build the pool over every step of ``view`` at once (batch construction)."""
        pool = cls(config, seed)
        pool.view_ = view
        for name in ANNOTATION_VIEWS:
            if name not in config.views:
                continue
            for group in annotation_groups(view, name, config):
                pool._open.last[(name, group[1])] = len(pool._open.groups)
                pool._open.groups.append(group)
        pool._refresh_similarity(view)
        pool._derive()
        return pool

    def add(self, view: MemoryView) -> OSUPool:
        """Extend the pool to ``view``, which must extend the current view by new steps
        at the end. New steps join their key's open group when within Δ_view of its
        last member and under S_max, else open a new group; the similarity view is
        recomputed once ``max(similarity_refresh, similarity_refresh_ratio × covered)``
        steps have arrived since its last refresh. Returns ``self``."""
        old = self.view_
        start = 0 if old is None else old.n
        if view.n < start:
            raise InvalidInputError(
                f"OSUPool.add: the new view has {view.n} steps, fewer than the {start} built"
            )
        if old is not None and old.n and view.dim != old.dim:
            raise DimensionError(
                f"OSUPool.add: embeddings of dimension {view.dim}, the pool has {old.dim}"
            )
        cfg = self.config
        groups, last = self._open.groups, self._open.last
        for name in ANNOTATION_VIEWS:
            if name not in cfg.views:
                continue
            delta = cfg.split_threshold(name)
            for p, key in step_keys(view, name, start):
                gi = last.get((name, key))
                if gi is not None:
                    members = groups[gi][2]
                    if p - members[-1] <= delta and members.shape[0] < cfg.max_osu_size:
                        groups[gi] = (name, key, np.append(members, p))
                        continue
                last[(name, key)] = len(groups)
                groups.append((name, key, np.array([p], dtype=np.int64)))
        self.view_ = view
        due = max(cfg.similarity_refresh, cfg.similarity_refresh_ratio * self._similarity_upto)
        if view.n - self._similarity_upto >= due:
            self._refresh_similarity(view)
        # The derivation (f_min, M_max cap, centroids) runs lazily at the next read, so
        # a burst of adds (or a store replaying its adds) derives once.
        self._dirty = True
        return self

    def _refresh_similarity(self, view: MemoryView) -> None:
        """Recompute the similarity view's groups over ``view``.

        Up to :data:`~osumem.osu.views.EXACT_KNN_MAX` steps in scope: the exact k-NN
        graph and a cold Leiden run (the paper's construction). Above: the new steps
        are inserted into an HNSW index kept between refreshes, and Leiden starts from
        the previous partition (new steps as singletons), so a refresh costs about
        n log n instead of n².
        """
        self._similarity_upto = view.n
        cfg = self.config
        if "similarity" not in cfg.views:
            return
        scope = similarity_scope(view, cfg)
        if scope.size <= EXACT_KNN_MAX or cfg.community != "leiden":
            self._knn = None
            self._partition = None
            self._similarity = similarity_groups(view, cfg, self.seed)
            return
        if self._knn is None:
            self._knn = KnnIndex(view.dim, seed=self.seed)
        known = self._knn.size
        self._knn.add(view.embeddings[scope[known:]])
        src, dst = self._knn.edges(cfg.knn_k)
        initial = None
        if self._partition is not None:
            fresh = np.arange(scope.size - known, dtype=np.int64) + int(self._partition.max()) + 1
            initial = np.concatenate([self._partition, fresh])
        comms = communities(scope.size, src, dst, cfg.community, self.seed, initial=initial)
        partition = np.empty(scope.size, dtype=np.int64)
        for c, members in enumerate(comms):
            partition[members] = c
        self._partition = partition
        self._similarity = community_groups(scope, comms, cfg)

    def _set_empty(self, n: int, d: int) -> None:
        self._members = sp.csc_matrix((n, 0), dtype=np.float32)
        self._view_codes = np.empty(0, dtype=np.int8)
        self._keys = np.empty(0, dtype=object)
        self._centroids = np.empty((0, d), dtype=np.float32)
        self._costs = np.empty(0, dtype=np.int64)
        self._spans = np.empty((0, 2), dtype=np.int64)
        self._sizes = np.empty(0, dtype=np.int64)
        self._coherence = np.empty(0, dtype=np.float32)

    def raw_groups(self) -> list[RawGroup]:
        """The raw groups (before f_min and the cap) of the enabled views."""
        return [*self._open.groups, *self._similarity]

    def _ensure(self) -> None:
        if self._dirty:
            self._dirty = False
            self._derive()

    def _derive(self) -> None:
        """f_min → M_max cap by view priority (ties: coherence) → f_min again."""
        view = self.view_
        assert view is not None
        cfg = self.config
        n, d = view.n, view.dim
        groups = [g for g in self.raw_groups() if g[2].shape[0] >= cfg.min_osu_size]
        if not groups:
            self._set_empty(n, d)
            return
        rank_of = {v: i for i, v in enumerate(cfg.view_priority)}
        g_rank = np.array([rank_of[g[0]] for g in groups], dtype=np.int64)
        g_first = np.array([g[2][0] for g in groups], dtype=np.int64)
        _, g_keyrank = np.unique(
            np.array([g[1] for g in groups], dtype=object).astype(str), return_inverse=True
        )
        # canonical order: view priority, first member, key
        order = np.lexsort((g_keyrank, g_first, g_rank))
        groups = [groups[i] for i in order]
        g_rank, g_keyrank = g_rank[order], g_keyrank[order]
        sizes = np.array([g[2].shape[0] for g in groups], dtype=np.int64)
        steps = np.concatenate([g[2] for g in groups])
        gids = np.repeat(np.arange(len(groups), dtype=np.int64), sizes)
        H = view.embeddings
        raw = sp.csc_matrix((np.ones(steps.shape[0]), (steps, gids)), shape=(n, len(groups)))
        coherence = np.linalg.norm(member_sums(raw, H), axis=1) / sizes
        # M_max cap: per step, keep the best memberships by (priority, coherence, id)
        o = np.lexsort((gids, -coherence[gids], g_rank[gids], steps))
        s_sorted = steps[o]
        run_start = np.r_[0, np.flatnonzero(np.diff(s_sorted)) + 1]
        first_of_run = np.repeat(run_start, np.diff(np.r_[run_start, s_sorted.shape[0]]))
        keep = np.zeros(steps.shape[0], dtype=bool)
        keep[o] = (np.arange(o.shape[0]) - first_of_run) < cfg.max_memberships
        # f_min again after the cap
        kept_sizes = np.bincount(gids[keep], minlength=len(groups))
        alive = kept_sizes >= cfg.min_osu_size
        keep &= alive[gids]
        new_id = np.cumsum(alive) - 1
        m = int(alive.sum())
        if m == 0:
            self._set_empty(n, d)
            return
        st, gi = steps[keep], new_id[gids[keep]]
        self._members = sp.csc_matrix(
            (np.ones(st.shape[0], dtype=np.float32), (st, gi)), shape=(n, m)
        )
        self._members.sort_indices()
        sums = member_sums(self._members, H)
        norms = np.linalg.norm(sums, axis=1)
        self._sizes = np.diff(self._members.indptr).astype(np.int64)
        self._centroids = (sums / np.where(norms > 0, norms, 1.0)[:, None]).astype(np.float32)
        self._coherence = (norms / self._sizes).astype(np.float32)
        self._costs = np.asarray(self._members.T @ view.costs.astype(np.float64)).astype(np.int64)
        idx = self._members.indices
        self._spans = np.column_stack(
            [idx[self._members.indptr[:-1]], idx[self._members.indptr[1:] - 1]]
        ).astype(np.int64)
        alive_idx = np.flatnonzero(alive)
        self._view_codes = np.array([VIEWS.index(groups[i][0]) for i in alive_idx], dtype=np.int8)
        self._keys = np.array([groups[i][1] for i in alive_idx], dtype=object)

    # -- derived state (computed lazily after adds) -----------------------------------

    @property
    def members(self) -> sp.csc_matrix:
        """``(n_steps, m)`` CSC 0/1 step × OSU membership matrix."""
        self._ensure()
        return self._members

    @property
    def view_codes(self) -> NDArray[np.int8]:
        """``(m,)`` index into VIEWS of each OSU's view."""
        self._ensure()
        return self._view_codes

    @property
    def keys(self) -> NDArray[np.object_]:
        """``(m,)`` each OSU's key."""
        self._ensure()
        return self._keys

    @property
    def centroids(self) -> NDArray[np.float32]:
        """``(m, d)`` normalised mean member embeddings."""
        self._ensure()
        return self._centroids

    @property
    def costs(self) -> IntArray:
        """``(m,)`` total token cost of each OSU's members."""
        self._ensure()
        return self._costs

    @property
    def spans(self) -> IntArray:
        """``(m, 2)`` first and last member position."""
        self._ensure()
        return self._spans

    @property
    def sizes(self) -> IntArray:
        """``(m,)`` member counts."""
        self._ensure()
        return self._sizes

    @property
    def coherence(self) -> NDArray[np.float32]:
        """``(m,)`` mean cosine of the members to the centroid."""
        self._ensure()
        return self._coherence

    # -- accessors -------------------------------------------------------------------

    @property
    def n_osus(self) -> int:
        """Number of OSUs ``m``."""
        return int(self.members.shape[1])

    @property
    def n_steps(self) -> int:
        """Number of steps the pool covers."""
        return int(self.members.shape[0])

    def view_names(self) -> NDArray[np.object_]:
        """``(m,)`` view name of each OSU."""
        return np.array(VIEWS, dtype=object)[self.view_codes]

    def memberships_per_step(self) -> IntArray:
        """``(n_steps,)`` number of OSUs each step belongs to."""
        return np.bincount(self.members.indices, minlength=self.n_steps).astype(np.int64)

    def osus_of(self, step: int) -> IntArray:
        """The OSUs step ``step`` belongs to."""
        row = self.members.getrow(int(step))
        return np.sort(row.indices).astype(np.int64)

    def members_of(self, osu: int) -> IntArray:
        """Member positions of OSU ``osu``, increasing."""
        m = self.members
        return m.indices[m.indptr[osu] : m.indptr[osu + 1]].astype(np.int64)

    def signature(self, views: tuple[str, ...] = VIEWS) -> set[tuple[str, str, tuple[int, ...]]]:
        """The pool as a set of ``(view, key, members)`` for the given views (used to
        compare constructions)."""
        names = self.view_names()
        return {
            (str(names[j]), str(self.keys[j]), tuple(self.members_of(j).tolist()))
            for j in range(self.n_osus)
            if names[j] in views
        }
