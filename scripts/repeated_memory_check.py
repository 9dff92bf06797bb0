"""The ANN paths on a memory that holds the same steps many times over, against the
exact path.

``osumem.bench.scale.generate(--steps, 384, --seed, --queries)`` repeated ``--repeats``
times (each copy its own subgoals and entities), the indexes used from 1,000 steps:
the step index's top 64 and each method's selection at ``--budget``, as shares of the
exact path's, counting equal copies of a step as that step (the exact path breaks
their ties by position). The numbers behind "The step index holds each distinct step
once" in docs/decisions.md.

    python scripts/repeated_memory_check.py --seed 1000 --repeats 10
"""

from __future__ import annotations

import argparse

import numpy as np
from threadpoolctl import threadpool_limits

from osumem.bench.scale import generate, repeated_view, shared_steps
from osumem.retrieve.packing import top_order
from osumem.retrieve.registry import create

METHODS = ("flat", "osumem_hybrid", "osumem", "osumem_adaptive")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=400, help="distinct steps")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--budget", type=int, default=256)
    args = ap.parse_args()
    if min(args.steps, args.repeats, args.queries, args.budget) < 1:
        ap.error("--steps, --repeats, --queries and --budget must be at least 1")
    threadpool_limits(1)
    data = generate(args.steps, 384, args.seed, args.queries)
    view = repeated_view(data.view, args.repeats)

    def fitted(method: str, ann: bool):
        r = create(method, seed=0)
        r.ann_min_steps = 1000 if ann else 10**9
        return r.fit(view)

    flat = fitted("flat", True)
    hits = sum(
        shared_steps(
            view.embeddings, flat.step_index.top(view, q, 64), top_order(view.embeddings @ q, 64)
        )
        for q in data.queries
    )
    print(
        f"{view.n} steps ({args.steps} x {args.repeats}): the step index's top 64 holds "
        f"{hits / (64 * len(data.queries)):.3f} of the exact top 64"
    )
    for method in METHODS:
        exact, ann = fitted(method, False), fitted(method, True)
        shares = []
        for q, text in zip(data.queries, data.query_texts, strict=True):
            a = exact.retrieve(q, args.budget, text=text).positions
            b = ann.retrieve(q, args.budget, text=text).positions
            shares.append(shared_steps(view.embeddings, a, b) / max(a.size, 1))
        print(
            f"{method}: the ANN selection holds {np.mean(shares):.3f} of the exact one "
            f"(lowest query {np.min(shares):.3f})"
        )


if __name__ == "__main__":
    main()
