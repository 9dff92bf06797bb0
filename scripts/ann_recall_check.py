"""Recall of the step index's answers against the exact top k, by safeguard tier.

Clustered steps (``osumem.bench.scale.generate``), unit Gaussian vectors, and the
clustered memory's first ``n / repeats`` steps ``repeats`` times over (a memory holding
the same steps many times); for each k, the recall of the answers the index kept,
widened or scanned, and the recall with the safeguard switched off. Equal copies of a
step count as that step (the exact scan breaks their ties by position, an index that
held every copy by where its search went). The numbers behind the safeguard's settings
in docs/decisions.md ("No stalls in the agent loop").

    python scripts/ann_recall_check.py --n 25000 --queries 400
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from threadpoolctl import threadpool_limits

from osumem.bench.scale import generate, repeated_view, shared_steps
from osumem.retrieve import step_index
from osumem.retrieve.packing import top_order
from osumem.types import MemoryView


def _gaussian(n: int, dim: int, seed: int) -> tuple[MemoryView, np.ndarray]:
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((n, dim)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    queries = rng.standard_normal((100, dim)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    view = MemoryView.build(
        embeddings=emb,
        costs=np.full(n, 20),
        tool_actions=[""] * n,
        tool_signatures=[""] * n,
        entities=tuple(frozenset() for _ in range(n)),
        subgoals=[""] * n,
        texts=[""] * n,
    )
    return view, queries


def _tiers(view: MemoryView, queries: np.ndarray, k: int) -> dict[str, list[float]]:
    index = step_index.StepIndex(seed=0, ann_min_steps=1)
    out: dict[str, list[float]] = {}
    for q in queries:
        raised, scanned = index.raised, index.fallbacks
        found = index.top(view, q, k)
        tier = (
            "widened"
            if index.raised > raised
            else "scanned"
            if index.fallbacks > scanned
            else "kept"
        )
        truth = top_order(view.embeddings @ q, k)
        out.setdefault(tier, []).append(shared_steps(view.embeddings, truth, found) / k)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=25_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--ks", default="32,64,128,512", help="comma-separated k values")
    ap.add_argument(
        "--repeats", type=int, default=10, help="copies of each step in the repeated memory"
    )
    ap.add_argument(
        "--json", action="store_true", help="print the recalls as JSON (set → k → tier)"
    )
    args = ap.parse_args()
    if args.repeats < 1 or args.n < args.repeats:
        ap.error("--repeats must be at least 1 and at most --n")
    threadpool_limits(1)
    data = generate(args.n, args.dim, 0, args.queries)
    sets = {
        "clustered": (data.view, data.queries),
        "gaussian": _gaussian(args.n, args.dim, 1),
        "repeated": (
            repeated_view(data.view.prefix(args.n // args.repeats), args.repeats),
            data.queries,
        ),
    }
    real = step_index.clear_share
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for name, (view, queries) in sets.items():
        for k in (int(k) for k in args.ks.split(",")):
            tiers = _tiers(view, queries, k)
            every = [r for rec in tiers.values() for r in rec]
            row = {
                tier: {"answers": len(rec), "mean": float(np.mean(rec)), "min": float(np.min(rec))}
                for tier, rec in sorted(tiers.items())
            }
            row["all"] = {
                "answers": len(every),
                "mean": float(np.mean(every)),
                "min": float(np.min(every)),
            }
            step_index.clear_share = lambda *a: 1.0  # the safeguard off
            off = [r for rec in _tiers(view, queries, k).values() for r in rec]
            step_index.clear_share = real
            row["without_safeguard"] = {
                "answers": len(off),
                "mean": float(np.mean(off)),
                "min": float(np.min(off)),
            }
            out.setdefault(name, {})[str(k)] = row
            if args.json:
                continue
            for tier, r in row.items():
                if tier in ("all", "without_safeguard"):
                    continue
                print(
                    f"{name} k={k} {tier}: {r['answers']} answers, recall mean "
                    f"{r['mean']:.4f} min {r['min']:.3f}"
                )
            print(
                f"{name} k={k} without the safeguard: recall mean "
                f"{row['without_safeguard']['mean']:.4f}"
            )
    if args.json:
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
