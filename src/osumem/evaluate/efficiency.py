"""Efficiency of every method: retrieve-only latency, amortised latency and
storage bytes of the built structure, with ratios to Flat Vector from the same run.

Nothing here knows a method by name. Storage is measured generically by walking the
fitted retriever's learned attributes (names ending in ``_``, except the shared
``view_`` that every method reads): numpy arrays count their ``nbytes``, scipy sparse
matrices the bytes of their arrays, containers and scalars their ``sys.getsizeof`` plus
their items, objects their ``__dict__``/``__slots__``. Arrays that share memory with the
memory view (e.g. a slice of the embedding matrix) are not counted: they are no extra
storage. Each object is counted once.

Definitions (ours): retrieve-only latency is the median over queries of the
``retrieve`` call; amortised latency is the median over queries of ``retrieve`` time
plus the fit time divided by the number of queries that share the fit. Storage is
reported twice: ``structure_kb``, the learned state alone (Flat Vector: 0), and
``storage_kb``, that plus the step embeddings and token costs every index over the
steps must hold (the figure the ratios use, so Flat Vector's is its embedding matrix).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from osumem.evaluate.runner import MethodRun, single_threaded
from osumem.retrieve.base import Retriever
from osumem.retrieve.registry import create
from osumem.types import Episode, MemoryView


def _view_arrays(view: MemoryView | None) -> list[np.ndarray]:
    if view is None:
        return []
    return [a for a in vars(view).values() if isinstance(a, np.ndarray)]


def object_nbytes(
    obj: Any, *, shared: Sequence[np.ndarray] = (), _seen: set[int] | None = None
) -> int:
    """Approximate bytes held by ``obj`` and everything it references.

    Arrays sharing memory with any array in ``shared`` count zero.
    """
    seen = set() if _seen is None else _seen
    if id(obj) in seen or obj is None or isinstance(obj, type):
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        if any(np.shares_memory(obj, s) for s in shared if s.size):
            return 0
        if obj.dtype == object:
            return obj.nbytes + sum(object_nbytes(x, shared=shared, _seen=seen) for x in obj.flat)
        return int(obj.nbytes)
    try:
        import scipy.sparse as sp

        if sp.issparse(obj):
            return sum(
                object_nbytes(getattr(obj, a), shared=shared, _seen=seen)
                for a in ("data", "indices", "indptr", "row", "col", "offsets")
                if isinstance(getattr(obj, a, None), np.ndarray)
            )
    except ImportError:  # pragma: no cover - scipy is a dependency
        pass
    if isinstance(obj, MemoryView):
        return 0  # the shared view is read, not owned
    size = sys.getsizeof(obj)
    if isinstance(obj, str | bytes | int | float | bool | complex | np.generic):
        return size
    if isinstance(obj, dict):
        return size + sum(
            object_nbytes(k, shared=shared, _seen=seen)
            + object_nbytes(v, shared=shared, _seen=seen)
            for k, v in obj.items()
        )
    if isinstance(obj, list | tuple | set | frozenset):
        return size + sum(object_nbytes(x, shared=shared, _seen=seen) for x in obj)
    if hasattr(obj, "__dict__"):
        size += object_nbytes(vars(obj), shared=shared, _seen=seen)
    for slot in getattr(type(obj), "__slots__", ()):
        if hasattr(obj, slot):
            size += object_nbytes(getattr(obj, slot), shared=shared, _seen=seen)
    return size


def structure_nbytes(retriever: Retriever) -> int:
    """Bytes of a fitted retriever's learned state (attributes ending in ``_``, except
    ``view_``), excluding memory shared with the view."""
    shared = _view_arrays(retriever.view_)
    seen: set[int] = set()
    return sum(
        object_nbytes(value, shared=shared, _seen=seen)
        for name, value in vars(retriever).items()
        if name.endswith("_") and name != "view_"
    )


def measure(
    episodes: Sequence[Episode],
    runs: Sequence[MethodRun],
    *,
    budget: int,
    seed: int = 0,
    dim_label: str = "",
) -> pd.DataFrame:
    """Time and size every method on every episode, serially, on one BLAS/OpenMP thread
    (no parallel noise).

    Each method is fitted once per distinct query time on the causal prefix, like the
    runner. Returns one row per retrieval: ``method``, ``episode``, ``dim``,
    ``latency_s``, ``build_share_s``, ``build_s``, ``structure_bytes`` (learned state),
    ``storage_bytes`` (learned state + embeddings + costs).
    """
    recs: list[dict[str, Any]] = []
    with single_threaded(runs):  # like the runner: one BLAS/OpenMP thread
        _measure(episodes, runs, budget=budget, seed=seed, dim_label=dim_label, recs=recs)
    return pd.DataFrame(recs)


def _measure(
    episodes: Sequence[Episode],
    runs: Sequence[MethodRun],
    *,
    budget: int,
    seed: int,
    dim_label: str,
    recs: list[dict[str, Any]],
) -> None:
    for run in runs:
        for ep in episodes:
            retriever = create(run.method, run.params, seed=seed)
            times = sorted({int(q.t) for q in ep.queries})
            for t in times:
                qs = [q for q in ep.queries if int(q.t) == t]
                start = time.perf_counter()
                retriever.fit(ep.view.prefix(t))
                build_s = time.perf_counter() - start
                storage = structure_nbytes(retriever)
                base = ep.view.prefix(t)
                base_bytes = int(base.embeddings.nbytes + base.costs.nbytes)
                for q in qs:
                    ev = np.asarray(q.evidence, dtype=np.int64) if retriever.is_oracle else None
                    start = time.perf_counter()
                    retriever.retrieve(q.vector, budget, evidence=ev, text=q.text or None)
                    latency = time.perf_counter() - start
                    recs.append(
                        {
                            "method": run.label,
                            "episode": ep.episode_id,
                            "dim": dim_label or str(ep.view.dim),
                            "latency_s": latency,
                            "build_share_s": build_s / len(qs),
                            "build_s": build_s,
                            "structure_bytes": storage,
                            "storage_bytes": storage + base_bytes,
                        }
                    )


def efficiency_table(measured: pd.DataFrame, *, reference: str = "flat") -> pd.DataFrame:
    """Per method and dimension: median retrieve-only and amortised latency (ms), mean
    structure and storage (KB, 1 KB = 1000 bytes), and each as a ratio to ``reference`` in the same dimension (NaN
    when the reference was not measured)."""
    df = measured.assign(amortised_s=measured["latency_s"] + measured["build_share_s"])
    per_ep = df.groupby(["dim", "method", "episode"], sort=False)[
        ["structure_bytes", "storage_bytes"]
    ].mean()
    per_method = per_ep.groupby(["dim", "method"], sort=False).mean() / 1e3
    g = df.groupby(["dim", "method"], sort=False)
    out = pd.DataFrame(
        {
            "retrieve_ms": g["latency_s"].median() * 1e3,
            "amortised_ms": g["amortised_s"].median() * 1e3,
            "structure_kb": per_method["structure_bytes"],
            "storage_kb": per_method["storage_bytes"],
        }
    ).reset_index()
    for col in ("retrieve_ms", "amortised_ms", "storage_kb"):
        ref = out[out["method"] == reference].set_index("dim")[col]
        out[f"{col}_ratio"] = out[col] / out["dim"].map(ref)
    return out
