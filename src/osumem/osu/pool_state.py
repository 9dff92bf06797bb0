"""An OSU pool's incremental state as plain arrays, and back (snapshots, shared
pools): :func:`pool_arrays` writes what construction derived (raw groups, slot and
per-step state, the similarity partition, the size of its HNSW index, the step count
of a background refresh under way);
:func:`load_pool_arrays` checks arrays for consistency and fills a fresh pool from
them, the centroids recomputed exactly from the kept members."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from osumem.osu.config import VIEWS
from osumem.osu.construct import RefreshJob, SimilarityState, grown_prefix
from osumem.osu.slots import HEADROOM_MIN, SlotTable
from osumem.osu.sums import segment_stats
from osumem.types import MemoryView, distinct, segment_bounds

if TYPE_CHECKING:
    from osumem.osu.pool import OSUPool

#: Version of the layout of :func:`pool_arrays`. Its ``meta`` has a seventh entry
#: now, the step count of a background refresh under way (and ``refresh_adds`` its
#: adds); states written without them (six entries) load as having none, so stored
#: snapshots stay valid.
POOL_STATE_FORMAT = 1


#: The arrays of :func:`pool_arrays`, in the order they are written.
ORDER = (
    "meta", "g_view", "g_keys", "g_sizes", "g_members", "last", "coh_raw", "k_size",
    "k_cost", "k_coh", "k_span", "row_ptr", "row_slots", "sim_slot", "kept", "live_slot",
    "partition", "refresh_adds",
)  # fmt: skip
#: Slots per piece when :func:`pool_arrays_later`'s second part flattens the member
#: lists and writes the keys: each piece is one call that holds the interpreter lock
#: (about a millisecond), so the thread that goes on adding is never held up for long.
LATER_PIECE = 4096


def pool_arrays(pool: OSUPool) -> dict[str, NDArray[Any]]:
    """Everything ``pool`` derived incrementally, as plain arrays. Not included: the
    view (the caller has it) and the centroids (recomputed exactly from the kept
    members)."""
    return pool_arrays_later(pool)()


def pool_arrays_later(pool: OSUPool) -> Callable[[], dict[str, NDArray[Any]]]:
    """:func:`pool_arrays` in two parts: what later adds change in place is copied now
    (the per-slot and per-step arrays, the last slot of each key, how many members each
    slot has), and the returned function, which may run on another thread while the
    pool takes further adds, writes the rest: the slots' keys and member lists, which
    adds only extend (a slot's members are read up to the count taken now). Its result
    is what :func:`pool_arrays` gives at the time of this call."""
    view = pool.view_
    n = 0 if view is None else view.n
    slots, sim = pool.slots, pool.similarity
    part = sim.partition
    n_slots = slots.n_slots
    sizes = np.fromiter(map(len, slots.members), np.int64, n_slots)
    now = {
        "meta": np.array(
            [
                POOL_STATE_FORMAT,
                n,
                n_slots,
                sim.upto,
                sim.knn_size,
                -1 if part is None else part.shape[0],
                0 if sim.job is None else sim.job.upto,
            ],
            dtype=np.int64,
        ),
        "g_view": slots.view_code.v.copy(),
        "g_sizes": sizes,
        "last": np.fromiter(slots.last.values(), np.int64, len(slots.last)),
        "coh_raw": slots.coh_raw.v.copy(),
        "k_size": slots.k_size.v.copy(),
        "k_cost": slots.k_cost.v.copy(),
        "k_coh": slots.k_coh.v.copy(),
        "k_span": slots.k_span.v.copy(),
        "row_ptr": slots.row_ptr.v.copy(),
        "row_slots": slots.row_slots.v.copy(),
        "sim_slot": slots.sim_slot.v.copy(),
        "kept": slots.kept.v.copy(),
        "live_slot": slots.live_slot.v.copy(),
        "partition": np.zeros(0, np.int64) if part is None else part.copy(),
        "refresh_adds": np.asarray([] if sim.job is None else sim.job.add_counts, np.int64),
    }
    members, keys = slots.members, slots.keys  # only appended to, per slot and in all

    def rest() -> dict[str, NDArray[Any]]:
        counts = sizes.tolist()
        flat = np.empty(int(sizes.sum()), np.int64)
        at = 0
        text = []
        for lo in range(0, n_slots, LATER_PIECE):
            hi = min(lo + LATER_PIECE, n_slots)
            k = int(sizes[lo:hi].sum())
            flat[at : at + k] = np.fromiter(
                itertools.chain.from_iterable(
                    itertools.starmap(_head, zip(members[lo:hi], counts[lo:hi], strict=True))
                ),
                np.int64,
                k,
            )
            at += k
            text.append(json.dumps(keys[lo:hi])[1:-1])
        later: dict[str, NDArray[Any]] = {
            "g_keys": np.frombuffer(f"[{', '.join(text)}]".encode(), dtype=np.uint8),
            "g_members": flat,
        }
        return {name: later[name] if name in later else now[name] for name in ORDER}

    return rest


def _head(items: list[int], k: int) -> list[int]:
    return items if len(items) == k else items[:k]


def load_pool_arrays(pool: OSUPool, view: MemoryView, state: dict[str, NDArray[Any]]) -> None:
    """Fill ``pool`` (fresh) with the state :func:`pool_arrays` wrote, over ``view``
    (the steps it covered). Anything that does not fit (another format, sizes,
    out-of-range slot or step numbers) raises ``ValueError`` before ``pool`` changes,
    so the caller can rebuild instead."""
    config = pool.config
    meta = np.asarray(state["meta"], dtype=np.int64)
    if meta.shape == (6,):  # written before refreshes ran in the background: none
        meta = np.append(meta, 0)
    if meta.shape != (7,) or int(meta[0]) != POOL_STATE_FORMAT:
        raise ValueError("pool state: unknown format")
    n, G, sim_upto, knn, n_part, pending = (int(x) for x in meta[1:])
    if n != view.n or not 0 <= sim_upto <= n or knn < 0:
        raise ValueError(f"pool state: covers {n} steps, the view has {view.n}")
    if pending and not sim_upto < pending <= n:
        raise ValueError(f"pool state: a refresh at {pending} steps, after one at {sim_upto}")
    m_max = config.max_memberships

    def arr(name: str, shape: tuple[int, ...], lo: int, hi: int) -> NDArray[Any]:
        a = np.asarray(state[name])
        if a.shape != shape:
            raise ValueError(f"pool state: {name} has shape {a.shape}, expected {shape}")
        if a.size and a.dtype.kind in "iu" and (a.min() < lo or a.max() >= hi):
            raise ValueError(f"pool state: {name} out of range")
        return a

    keys = json.loads(bytes(np.asarray(state["g_keys"], dtype=np.uint8)).decode())
    if not isinstance(keys, list) or len(keys) != G or not set(map(type, keys)) <= {str}:
        raise ValueError("pool state: keys do not match the slots")
    sizes = arr("g_sizes", (G,), 1, n + 1)
    flat = arr("g_members", (int(sizes.sum()),), 0, n)
    g_view = arr("g_view", (G,), 0, len(VIEWS))
    row_ptr = arr("row_ptr", (n + 1,), 0, 2**62)
    n_rows = int(row_ptr[-1])
    if np.any(np.diff(row_ptr) < 0) or int(row_ptr[0]) != 0:
        raise ValueError("pool state: row pointers are not increasing")
    live_slot = arr("live_slot", (int(state["live_slot"].shape[0]),), 0, G)
    if distinct(live_slot).shape[0] != live_slot.shape[0]:
        raise ValueError("pool state: a live slot is listed twice")
    names = [VIEWS[int(v)] for v in distinct(g_view).tolist()]
    missing = [v for v in names if v not in config.view_priority]
    if missing:
        raise ValueError(f"pool state: views {missing} are not configured")
    last = arr("last", (int(state["last"].shape[0]),), 0, G)
    partition = None if n_part < 0 else arr("partition", (n_part,), 0, 2**62)
    slots = SlotTable(config, view.dim)
    lut = np.array(
        [config.view_priority.index(v) if v in config.view_priority else 0 for v in VIEWS],
        dtype=np.int8,
    )
    bounds = segment_bounds(sizes)
    every = tuple(flat.tolist())  # its slices are the units' tuples, one copy each
    slots.keys = list(keys)
    slots.members = [every[a:b] for a, b in itertools.pairwise(bounds.tolist())]
    for grow in (slots.view_code, slots.rank, slots.first, slots.live_row):
        grow.resize(G)
    slots.view_code.a[:G] = g_view
    slots.rank.a[:G] = lut[g_view.astype(np.int64)]
    slots.first.a[:G] = flat[bounds[:-1]]
    last_slots = last.astype(np.int64).tolist()
    last_views = [VIEWS[v] for v in g_view[last].astype(np.int64).tolist()]
    last_keys = [keys[g] for g in last_slots]
    slots.last = dict(zip(zip(last_views, last_keys, strict=True), last_slots, strict=True))
    for grow, name, shape, lo, hi in (
        (slots.coh_raw, "coh_raw", (G,), 0, 1),
        (slots.k_size, "k_size", (G,), 0, n + 1),
        (slots.k_cost, "k_cost", (G,), 0, 2**62),
        (slots.k_coh, "k_coh", (G,), 0, 1),
        (slots.k_span, "k_span", (G, 2), 0, max(n, 1)),
        (slots.row_ptr, "row_ptr", (n + 1,), 0, 2**62),
        (slots.row_slots, "row_slots", (n_rows,), 0, G),
        (slots.sim_slot, "sim_slot", (n,), -1, G),
        (slots.kept, "kept", (n, m_max), -1, G),
    ):
        a = arr(name, shape, lo, hi)
        grow.resize(shape[0])
        grow.a[: shape[0]] = a
    live = live_slot.astype(np.int64)
    large = n >= HEADROOM_MIN  # headroom as the build leaves it
    slots.live_slot.resize(live.shape[0], headroom=large)
    slots.live_slot.a[: live.shape[0]] = live
    slots.live_row.a[live] = np.arange(live.shape[0])
    slots.live_cent.resize(live.shape[0], headroom=large)
    if live.size:
        _restore_centroids(slots, view, live, n, G)
    similarity = SimilarityState()
    similarity.upto = sim_upto
    similarity.knn_pending = knn
    similarity.partition = partition
    pool.view_ = view
    pool.slots = slots
    pool.similarity = similarity
    pool.invalidate()
    if pending:
        # the refresh the saving pool was computing, computed again from the same
        # steps and state, and applied at the same step count
        adds = np.asarray(state.get("refresh_adds", np.zeros(0, np.int64)), dtype=np.int64)
        if adds.size and ((np.diff(adds) <= 0).any() or adds[0] <= pending):
            raise ValueError("pool state: the adds of the refresh under way are out of order")
        if adds.size and int(adds[-1]) != n:
            raise ValueError(f"pool state: the refresh's adds end at {adds[-1]}, not {n}")
        similarity.job = RefreshJob(pool, grown_prefix(view, pending), adds.tolist())


def _restore_centroids(
    slots: SlotTable, view: MemoryView, live: NDArray[np.int64], n: int, g: int
) -> None:
    """The live OSUs' centroids from their kept members: by :func:`segment_stats` (no
    sparse matrix, so a restore does not import SciPy's), the same bits as
    :func:`~osumem.osu.sums.member_stats` of the live columns: kept entries of OSUs that are not live
    are left out, and an OSU without a kept member gets the zero centroid."""
    kept = slots.kept.v
    step_idx, col = np.nonzero(kept >= 0)
    group = kept[step_idx, col].astype(np.int64)
    rank = np.full(g, -1, dtype=np.int64)
    rank[live] = np.arange(live.shape[0])
    out = slots.live_cent.a[: live.shape[0]]
    at = rank[group]
    ours = at >= 0
    step_idx, at = step_idx[ours], at[ours]
    counts = np.bincount(at, minlength=live.shape[0])
    filled = counts > 0
    order = np.lexsort((step_idx, at))
    steps = step_idx[order].astype(np.int64)
    bounds = segment_bounds(counts[filled])
    if filled.all():
        segment_stats(view.embeddings, steps, bounds, out=out)
        return
    sums = np.zeros((int(filled.sum()), out.shape[1]), dtype=np.float32)
    if sums.shape[0]:
        segment_stats(view.embeddings, steps, bounds, out=sums)
    out[filled] = sums
    out[~filled] = 0.0
