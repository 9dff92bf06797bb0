"""Cost of ``osumem_hybrid`` against ``osumem`` at large sizes (CPU time, one process).

For each size n, on ``osumem bench scale``'s generated memory (clustered vectors, Zipf
step texts, query texts): both methods are fitted over the first ``n - rounds`` steps,
then every round adds one step (``update``, timed alone) and retrieves with the round's
query text (timed alone); afterwards ``queries`` retrieves over the whole memory are
timed. Every time is CPU seconds of this process (``time.process_time``) with BLAS on
one thread, and the two methods alternate round by round, so a busy machine moves both
alike: read the ratios. ``--reference`` also times, on the same fitted memory and the
same queries, the dense large-memory path that the postings path replaced (the
reference of ``tests/test_hybrid_fast_path.py``) and checks that both select the same.
``--profile`` prints the top of a cProfile of the hybrid's adds and retrieves.

Usage: ``python benchmarks/hybrid_cost.py [--sizes 10000,100000] [--rounds 200]
[--queries 200] [--methods osumem,osumem_hybrid] [--reference] [--json out.json]``;
a method may carry parameters, ``osumem_hybrid[entity_source=arguments]``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from osumem.bench.scale import generate
from osumem.retrieve.registry import create


def _stats(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64) * 1000.0
    return {
        "p50_ms": float(np.percentile(arr, 50)),
        "p99_ms": float(np.percentile(arr, 99)),
        "max_ms": float(arr.max()),
        "mean_ms": float(arr.mean()),
    }


def measure(
    n: int,
    methods: list[str],
    rounds: int,
    queries: int,
    budget: int,
    profile: bool,
    reference: bool = False,
) -> list[dict[str, Any]]:
    data = generate(n, 384, 0, max(queries, 1))
    view = data.view
    base = view.prefix(n - rounds)
    fitted = {}
    for m in methods:
        t0 = time.process_time()
        name, _, inline = m.partition("[")
        params = dict(kv.split("=", 1) for kv in inline.rstrip("]").split(";") if kv)
        r = create(name, params, seed=0).fit(base)
        r.retrieve(data.queries[0], budget, text=data.query_texts[0])
        fitted[m] = (r, time.process_time() - t0)
    prof_add, prof_ret = cProfile.Profile(), cProfile.Profile()
    adds: dict[str, list[float]] = {m: [] for m in methods}
    rets: dict[str, list[float]] = {m: [] for m in methods}
    grown = base
    for t in range(n - rounds, n):
        # the caller's view of the memory (untimed); the previous one is released
        # here, outside the timings, not by whichever method drops it last
        previous, grown = grown, view.prefix(t + 1)
        k = t % len(data.queries)
        for m in methods:
            r = fitted[m][0]
            watch = profile and m == "osumem_hybrid"  # profiled rounds: slower
            if watch:
                prof_add.enable()
            t0 = time.process_time()
            r.update(grown)
            t1 = time.process_time()
            if watch:
                prof_add.disable()
                prof_ret.enable()
            t1b = time.process_time()
            r.retrieve(data.queries[k], budget, text=data.query_texts[k])
            t2 = time.process_time()
            if watch:
                prof_ret.disable()
            adds[m].append(t1 - t0)
            rets[m].append(t2 - t1b)
        del previous
    whole: dict[str, list[float]] = {m: [] for m in methods}
    dense: list[float] = []
    for k in range(queries):
        for m in methods:
            r = fitted[m][0]
            t0 = time.process_time()
            r.retrieve(data.queries[k], budget, text=data.query_texts[k])
            whole[m].append(time.process_time() - t0)
        if reference and "osumem_hybrid" in fitted:
            dense.append(_reference_round(fitted["osumem_hybrid"][0], data, k, budget))
    if profile and "osumem_hybrid" in fitted:
        r = fitted["osumem_hybrid"][0]
        prof = cProfile.Profile()
        prof.enable()
        for k in range(queries):
            r.retrieve(data.queries[k], budget, text=data.query_texts[k])
        prof.disable()
        for title, p in (("retrieve", prof), ("add", prof_add), ("retrieve after add", prof_ret)):
            print(f"--- profile of osumem_hybrid: {title}")
            pstats.Stats(p).sort_stats("tottime").print_stats(20)
    rows = []
    for m in methods:
        row = {
            "n": n,
            "method": m,
            "fit_cpu_s": fitted[m][1],
            "add": _stats(adds[m]),
            "retrieve_after_add": _stats(rets[m]),
            "retrieve": _stats(whole[m]),
        }
        rows.append(row)
        print(
            f"n={n} {m}: retrieve p50 {row['retrieve']['p50_ms']:.3f} p99 "
            f"{row['retrieve']['p99_ms']:.3f} ms; add p50 {row['add']['p50_ms']:.3f} p99 "
            f"{row['add']['p99_ms']:.3f} ms; retrieve after add p50 "
            f"{row['retrieve_after_add']['p50_ms']:.3f} ms; fit {row['fit_cpu_s']:.1f} s",
            flush=True,
        )
    if dense:
        got = _stats(dense)
        new = rows[methods.index("osumem_hybrid")]["retrieve"]
        rows.append({"n": n, "method": "osumem_hybrid (dense reference path)", "retrieve": got})
        print(
            f"n={n} osumem_hybrid dense reference path: retrieve p50 {got['p50_ms']:.3f} p99 "
            f"{got['p99_ms']:.3f} ms; postings path / reference p50 "
            f"{new['p50_ms'] / got['p50_ms']:.2f}x (same selections on every query)",
            flush=True,
        )
    if "osumem" in fitted:
        ref = rows[methods.index("osumem")]
        for row in rows:
            if row is ref or "add" not in row:
                continue
            print(
                f"n={n} {row['method']} / osumem: retrieve p50 "
                f"{row['retrieve']['p50_ms'] / ref['retrieve']['p50_ms']:.2f}x, p99 "
                f"{row['retrieve']['p99_ms'] / ref['retrieve']['p99_ms']:.2f}x; add p50 "
                f"{row['add']['p50_ms'] / ref['add']['p50_ms']:.2f}x; add+retrieve p50 "
                f"{_sum_p50(row) / _sum_p50(ref):.2f}x",
                flush=True,
            )
    return rows


def _reference_round(r: Any, data: Any, k: int, budget: int) -> float:
    """One retrieve through the dense reference path (timed, with the query's
    normalisation like ``retrieve``), checked against the retriever's selection."""
    here = Path(__file__).resolve().parent.parent / "tests"
    if str(here) not in sys.path:
        sys.path.insert(0, str(here))
    from test_hybrid_fast_path import reference_head_fused

    view = r.fitted_view
    t0 = time.process_time()
    q = view.check_query(data.queries[k])
    want = reference_head_fused(r, q, data.query_texts[k], budget, view.n)
    spent = time.process_time() - t0
    got = r.retrieve(data.queries[k], budget, text=data.query_texts[k]).positions
    if not np.array_equal(got, want):
        raise SystemExit(f"query {k}: the postings path and the reference differ")
    return spent


def _sum_p50(row: dict[str, Any]) -> float:
    return float(row["add"]["p50_ms"] + row["retrieve_after_add"]["p50_ms"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--methods", default="osumem,osumem_hybrid")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--budget", type=int, default=256)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import hnswlib  # noqa: F401  (imported before any timing)
    import igraph  # noqa: F401
    import leidenalg  # noqa: F401

    rows = []
    with threadpool_limits(limits=1):
        for n in (int(s) for s in args.sizes.split(",")):
            rows += measure(
                n,
                args.methods.split(","),
                args.rounds,
                args.queries,
                args.budget,
                args.profile,
                args.reference,
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
