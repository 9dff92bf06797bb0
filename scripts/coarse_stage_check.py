"""The default method's coarse stage on a memory of repeated real steps: the centroid
index's answers against every centroid scored exactly.

A tau-bench results file's steps cycled to ``--steps`` (each copy its own source, as
``osumem bench scale --bulk-file`` ingests them), hashing encoder, one
``Memory.add_steps``; ``--queries`` of its user turns as queries. Reported: the live
OSUs and their distinct centroids; at ``--budget``, the share of the K OSUs kept from
the index's answer that score at least the exact K-th score; and at budgets 64, 256
and 1,024 the selections' Jaccard against the exact coarse stage's, and the share of
queries selected identically; and the steps, their distinct vectors, and the share of
the step index's top 64 (the dense ranking's head) that score at least the exact 64th.
The numbers behind "The centroid index holds each distinct centroid once" and "The
step index holds each distinct step once" in docs/decisions.md.

    python scripts/coarse_stage_check.py --bulk-file gpt-4o-airline.json --steps 50000
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
from threadpoolctl import threadpool_limits

from osumem.bench.scale import ScaleConfig, bulk_steps
from osumem.errors import OSUMemError
from osumem.memory import Memory
from osumem.retrieve import osumem as osumem_method
from osumem.retrieve.centroids import top_slots

BUDGETS = (64, 256, 1024)


def run(bulk_file: str, steps: int, queries: int, budget: int, seed: int) -> dict[str, Any]:
    cfg = ScaleConfig(bulk_file=bulk_file, bulk_sizes=(steps,), sizes=(1000,))
    rows = bulk_steps(cfg, steps)
    with tempfile.TemporaryDirectory(prefix="osumem-coarse-") as tmp:
        mem = Memory.open(Path(tmp) / "memory.db", encoder="hashing", method="osumem")
        try:
            mem.add_steps(rows)
            r = mem.retriever(mem.namespaces()[0])
            mem.wait_ready()
            users = [s.text for s in rows if s.role == "user"]
            rng = np.random.default_rng(seed)
            picked = rng.choice(len(users), min(queries, len(users)), replace=False)
            qs = mem.encoder.encode([users[i][:200] for i in picked])
            return _measure(r, qs, budget)
        finally:
            mem.close()


def _measure(r: Any, qs: np.ndarray, budget: int) -> dict[str, Any]:
    r.retrieve(qs[0], budget)
    pool = r.fitted_pool
    slots, cents = pool.live_arrays()
    live_row = pool.slot_arrays()[0]
    index = r._centroid_index_of(pool)
    k = r._whole_pool_k(budget, int(slots.size))
    shares = []
    for q in qs:
        scores = cents @ q
        kth = np.sort(scores)[::-1][k - 1]
        found = index.query(q, k + osumem_method.CENTROID_MARGIN)
        if found is None:
            continue
        exact = cents[live_row[found]] @ q
        kept = top_slots(pool, found, exact, k, np.argsort(-exact))
        shares.append(float(np.mean(cents[live_row[kept]] @ q >= kth - 1e-6)))
    ann = {b: [set(r.retrieve(q, b).positions.tolist()) for q in qs] for b in BUDGETS}
    with mock.patch.object(osumem_method.OSUMem, "_coarse_uses_index", lambda *a: False):
        exact_sel = {b: [set(r.retrieve(q, b).positions.tolist()) for q in qs] for b in BUDGETS}
    pairs = {b: list(zip(ann[b], exact_sel[b], strict=True)) for b in BUDGETS}
    view = r.fitted_view
    emb = view.embeddings[: view.n]
    head = []
    for q in qs:
        cos = emb @ q
        kth = np.partition(cos, cos.size - 64)[cos.size - 64]
        head.append(float(np.mean(cos[r.step_index.top(view, q, 64)] >= kth - 1e-6)))
    return {
        "live_osus": int(slots.size),
        "distinct_centroids": int(np.unique(cents, axis=0).shape[0]),
        "k": int(k),
        "budget": budget,
        "kept_at_least_exact_kth": float(np.mean(shares)) if shares else math.nan,
        "steps": int(view.n),
        "distinct_steps": int(np.unique(emb, axis=0).shape[0]),
        "step_index_top64_at_least_exact_64th": float(np.mean(head)),
        "selections": {
            str(b): {
                "jaccard": float(np.mean([len(a & e) / max(1, len(a | e)) for a, e in pairs[b]])),
                "identical": float(np.mean([a == e for a, e in pairs[b]])),
            }
            for b in BUDGETS
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bulk-file", required=True, help="a tau-bench results file")
    ap.add_argument("--steps", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        with threadpool_limits(1):
            out = run(args.bulk_file, args.steps, args.queries, args.budget, args.seed)
    except OSUMemError as exc:
        raise SystemExit(f"coarse_stage_check: {exc}") from None
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(
        f"{out['live_osus']} live OSUs, {out['distinct_centroids']} distinct centroids; "
        f"K = {out['k']} at B = {out['budget']}: "
        f"{out['kept_at_least_exact_kth']:.3f} of the kept OSUs score >= the exact K-th"
    )
    print(
        f"{out['steps']} steps, {out['distinct_steps']} distinct: "
        f"{out['step_index_top64_at_least_exact_64th']:.3f} of the step index's top 64 "
        "score >= the exact 64th"
    )
    for b, v in out["selections"].items():
        print(
            f"B = {b}: Jaccard vs exact coarse stage {v['jaccard']:.3f}, identical {v['identical']:.3f}"
        )


if __name__ == "__main__":
    main()
