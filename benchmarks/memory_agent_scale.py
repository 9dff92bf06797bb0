"""Agent-memory scale: add latency, reopen + first retrieve, and file size at N steps.

    PYTHONPATH=src python benchmarks/memory_agent_scale.py build  --store /tmp/m.db --n 50000
    PYTHONPATH=src python benchmarks/memory_agent_scale.py adds   --store /tmp/m.db --k 1000
    PYTHONPATH=src python benchmarks/memory_agent_scale.py reopen --store /tmp/m.db

``build`` adds N single-message steps one add at a time (the agent pattern) with the
hashing encoder and reports add p50/p99 over the last 1,000 adds, then retrieves once
(as the agent would; this builds the retriever, and closing the memory stores its
snapshot); ``adds`` times K more single adds on an existing store; ``reopen`` times
``Memory.open`` + the first ``retrieve`` (CPU and wall), says whether a stored snapshot
was used, and gives the file size (snapshot included) against the raw float32
embeddings. Run ``adds``/``reopen`` on a copy when comparing two versions of the code.

``ann`` compares, on the synthetic scale data (Retriever API, one fitted pool per size),
the exact scan against the HNSW indexes for whole-memory queries: retrieve p50/p99 over
100 queries (B = 256) for each, the CPU time of building the indexes (what a reopened
memory pays at its first query when it uses them) and the overlap of the two selections:

    PYTHONPATH=src python benchmarks/memory_agent_scale.py ann --sizes 20000,50000,100000 --dim 384

``rounds`` runs an agent loop through the memory API (``Memory``, not the retrievers
``osumem bench scale`` times): the synthetic scale data's steps up to ``--n`` minus
``--k`` added in batches of ``--batch`` steps (5,000; 1: one add batch per step, as an
agent's memory grows), then ``--k`` rounds of one ``add_steps`` of the next
step and one ``retrieve`` of a query text (hashing encoder, B = 256, a store file in a
temporary folder); it reports the rounds' wall and CPU p50/p99/max, the slowest rounds,
the cyclic garbage collector's full collections inside the rounds and what one full
collection costs after them:

    PYTHONPATH=src python benchmarks/memory_agent_scale.py rounds --n 100000 --k 2000

``snapshot`` times the encoding of a namespace's snapshot on an existing store, and
the part of it read on the retrieve or add that makes one due (the state's arrays;
the compression and the hashes run on a background thread), and gives its size:

    PYTHONPATH=src python benchmarks/memory_agent_scale.py snapshot --store /tmp/m.db
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from osumem.memory import Memory

TOPICS = ["flight", "hotel", "refund", "baggage", "seat", "invoice", "order", "address"]


def _message(k: int) -> dict:
    t = TOPICS[k % len(TOPICS)]
    return {"role": "user", "content": f"step {k}: {t} request R{k % 997} for user U{k % 113}"}


def _adds(mem: Memory, start: int, count: int, group: int = 1) -> tuple[list[float], list[float]]:
    """``count`` single-message adds (each its own add batch); with ``group`` > 1, every
    ``group`` adds share one commit (fewer disk flushes while building)."""
    wall: list[float] = []
    cpu: list[float] = []
    for g in range(start, start + count, group):
        todo = range(g, min(g + group, start + count))
        if group > 1:
            with mem.transaction():
                _timed(mem, todo, wall, cpu)
        else:
            _timed(mem, todo, wall, cpu)
    return wall, cpu


def _timed(mem: Memory, ks: range, wall: list[float], cpu: list[float]) -> None:
    for k in ks:
        w0, c0 = time.perf_counter(), time.process_time()
        mem.add_messages([_message(k)], namespace="agent")
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)


def _pct(xs: list[float]) -> dict:
    a = np.asarray(xs) * 1000
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
    }


def _ann(sizes: list[int], dim: int, method: str) -> None:
    """One JSON line per size: exact vs HNSW retrieve on the same fitted retriever."""
    from osumem.bench.scale import generate
    from osumem.retrieve.registry import create

    for n in sizes:
        data = generate(n, dim, seed=0)
        r = create(method, None, seed=0)
        r.ann_min_steps = n + 1  # fit without the indexes: exact scan
        c0 = time.process_time()
        r.fit(data.view)
        fit_cpu = time.process_time() - c0

        def run(r: Any = r, queries: Any = data.queries) -> tuple[list[float], list[list[int]]]:
            cpu, picks = [], []
            for q in queries:
                c = time.process_time()
                sel = r.retrieve(q, 256)
                cpu.append(time.process_time() - c)
                picks.append(sel.positions.tolist())
            return cpu, picks

        exact_cpu, exact_picks = run()
        r.ann_min_steps = 1  # the same retriever with the HNSW indexes
        c0 = time.process_time()
        r.retrieve(data.queries[0], 256)  # builds the step and centroid indexes
        build_cpu = time.process_time() - c0
        ann_cpu, ann_picks = run()
        overlap = [
            len(set(a) & set(e)) / max(1, len(e))
            for a, e in zip(ann_picks, exact_picks, strict=True)
        ]
        print(
            json.dumps(
                {
                    "what": "ann",
                    "method": method,
                    "n": n,
                    "dim": dim,
                    "fit_cpu_s": round(fit_cpu, 2),
                    "exact": _pct(exact_cpu),
                    "hnsw": _pct(ann_cpu),
                    "index_build_cpu_s": round(build_cpu, 2),
                    "selection_overlap_mean": round(float(np.mean(overlap)), 3),
                }
            ),
            flush=True,
        )


def _rounds(n: int, k: int, method: str, batch: int = 5000) -> None:
    """One JSON line: ``k`` agent rounds (add one step, retrieve) of a memory grown to
    ``n - k`` steps in add batches of ``batch`` steps."""
    from osumem.bench.scale import generate, step_of

    data = generate(n, 384, 0, 100)
    full: list[float] = []
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif info["generation"] == 2 and started:
            full.append(time.perf_counter() - started[0])

    with tempfile.TemporaryDirectory() as tmp:
        mem = Memory.open(Path(tmp) / "m.db", encoder="hashing", method=method, seed=0, budget=256)
        first = n - k
        for lo in range(0, first, batch):
            mem.add_steps([step_of(data, p) for p in range(lo, min(first, lo + batch))])
        mem.retrieve(data.query_texts[0])
        mem.wait_ready()
        wall: list[float] = []
        cpu: list[float] = []
        gc.callbacks.append(on_gc)
        try:
            for t in range(first, n):
                step = step_of(data, t)
                w0, c0 = time.perf_counter(), time.process_time()
                mem.add_steps([step])
                mem.retrieve(data.query_texts[t % len(data.query_texts)])
                wall.append(time.perf_counter() - w0)
                cpu.append(time.process_time() - c0)
        finally:
            gc.callbacks.remove(on_gc)
        tracked = len(gc.get_objects())
        w0 = time.perf_counter()
        gc.collect()
        collect_ms = (time.perf_counter() - w0) * 1000
        mem.close()
    slowest = np.argsort(wall)[::-1][:5]
    print(
        json.dumps(
            {
                "what": "rounds",
                "method": method,
                "n": n,
                "batch": batch,
                "rounds": k,
                "wall": {**_pct(wall), "max_ms": round(max(wall) * 1000, 3)},
                "cpu": {**_pct(cpu), "max_ms": round(max(cpu) * 1000, 3)},
                "slowest_rounds": {int(first + i): round(wall[i] * 1000, 2) for i in slowest},
                "full_collections_in_rounds_ms": [round(x * 1000, 1) for x in full],
                "tracked_objects": tracked,
                "full_collection_after_ms": round(collect_ms, 1),
            }
        ),
        flush=True,
    )


def _snapshot(store: str, method: str) -> None:
    """One JSON line: the CPU time of encoding the namespace's snapshot, min and median
    of 5, the part of it read on the call that makes one due (the rest runs on a
    background thread), and its size."""
    from osumem.memory import snapshot

    with Memory.open(store, encoder="hashing", method=method) as mem:
        mem.retrieve("refund request for user U7", 256, namespace="agent")
        mem.wait_ready()
        cache = mem._retrievers
        retriever, fitted = cache._fitted["agent"]
        data = cache.namespaces.data("agent")
        cpu, read = [], []
        for _ in range(5):
            c0 = time.thread_time()
            finish = snapshot.gather(retriever, data, fitted)
            c1 = time.thread_time()
            row = finish()
            cpu.append(time.thread_time() - c0)
            read.append(c1 - c0)
    print(
        json.dumps(
            {
                "what": "snapshot",
                "steps": fitted,
                "encode_cpu_ms_min": round(min(cpu) * 1000, 1),
                "encode_cpu_ms_median": round(float(np.median(cpu)) * 1000, 1),
                "read_on_the_call_cpu_ms_min": round(min(read) * 1000, 1),
                "payload_mb": round(len(row.payload) / 1e6, 3),
            }
        ),
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["build", "adds", "reopen", "ann", "rounds", "snapshot"])
    ap.add_argument("--store", default=None, help="the memory file (build/adds/reopen)")
    ap.add_argument("--sizes", default="20000,50000,100000", help="ann: memory sizes")
    ap.add_argument("--dim", type=int, default=384, help="ann: embedding dimension")
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=5000, help="rounds: steps per add before")
    ap.add_argument("--method", default="osumem")
    ap.add_argument("--group", type=int, default=1, help="build: adds per commit")
    ap.add_argument("--views", default=None, help="osumem views, e.g. entity,tool,subgoal")
    args = ap.parse_args()
    if args.what == "ann":
        _ann([int(x) for x in args.sizes.split(",")], args.dim, args.method)
        return
    if args.what == "rounds":
        if args.batch < 1:
            ap.error("--batch must be at least 1")
        _rounds(args.n, args.k, args.method, args.batch)
        return
    if args.store is None:
        ap.error(f"{args.what} needs --store")
    if args.what == "snapshot":
        _snapshot(args.store, args.method)
        return
    out: dict = {"what": args.what, "method": args.method, "views": args.views}
    params = None if args.views is None else {"views": tuple(args.views.split(","))}
    if args.what in ("build", "adds"):
        with Memory.open(args.store, encoder="hashing", method=args.method, params=params) as mem:
            if args.what == "adds":  # load the namespace first, as a live agent has
                mem.retrieve("warm up", 64, namespace="agent")
            start = mem.n_steps("agent")
            count = args.n - start if args.what == "build" else args.k
            wall, cpu = _adds(mem, start, count, args.group if args.what == "build" else 1)
            out.update(
                steps=mem.n_steps("agent"), add_wall=_pct(wall[-1000:]), add_cpu=_pct(cpu[-1000:])
            )
            if args.what == "build":
                c0 = time.process_time()
                mem.retrieve("refund request for user U7", 256, namespace="agent")
                out.update(in_session_retrieve_cpu_s=round(time.process_time() - c0, 3))
            c0 = time.process_time()
        out.update(close_cpu_s=round(time.process_time() - c0, 3))
    else:
        w0, c0 = time.perf_counter(), time.process_time()
        with Memory.open(args.store, encoder="hashing", method=args.method, params=params) as mem:
            stored = mem.store.snapshot("agent")
            out.update(snapshot_steps_at_open=0 if stored is None else stored.steps)
            r = mem.retrieve("refund request for user U7", 256, namespace="agent")
            out.update(
                reopen_first_retrieve_cpu_s=round(time.process_time() - c0, 3),
                reopen_first_retrieve_wall_s=round(time.perf_counter() - w0, 3),
                steps=mem.n_steps("agent"),
                selected=len(r.steps),
                positions=[s.position for s in r.steps][:12],
            )
            row = mem.store.snapshot("agent")
            out.update(snapshot_bytes=0 if row is None else len(row.payload))
            dim = mem.store.dim
        size = os.path.getsize(args.store)
        raw = out["steps"] * dim * 4
        out.update(file_bytes=size, raw_float32_bytes=raw, file_over_raw=round(size / raw, 3))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
