"""How far below ``osumem_adaptive``'s retrieve the two index searches it needs lie.

    PYTHONPATH=src python benchmarks/adaptive_floor.py --n 100000

On the scale benchmark's generated memory (``osumem.bench.scale.generate``: ``--n``
steps, 384-d, B = ``--budget``), one process, BLAS on one thread, CPU time per query
(best of ``--repeat`` passes over the 100 queries):

* ``reference``: ``osumem bench scale``'s ``ann_hnsw`` row, a bare hnswlib top-k query
  (k = 4·ceil(B / mean cost), ef = max(64, 2k), M = 16, ef_construction = 100);
* ``head_search``: the one hnswlib call of the method's step-index head (the flat
  ranking's head of ``head_ratio``·B tokens: k and beam as ``StepIndex.top_wide`` asks
  them, on the method's own index);
* ``centroid_search``: the one hnswlib call of the coarse stage (the K + margin best
  OSU centroids, at the coarse stage's beam, on the method's centroid index);
* ``retrieve``: the method's whole ``retrieve``, and ``osumem``'s beside it.

The method answers a query that binds (the binding test's share is printed) with both
searches, so their sum over the reference is a floor for its retrieve ratio on this
path whatever the Python around them costs.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from osumem.bench.scale import _AnnReference, generate
from osumem.osu.views import HNSW_EF_SEARCH
from osumem.retrieve.adaptive import HEAD_BEAM_PER_K
from osumem.retrieve.osumem import CENTROID_MARGIN
from osumem.retrieve.registry import create


def per_query_us(fn: Callable[[np.ndarray], object], queries: np.ndarray, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.process_time()
        for q in queries:
            fn(q)
        best = min(best, (time.process_time() - t0) / len(queries))
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    threadpool_limits(1)
    data = generate(args.n, args.dim, args.seed)
    view, budget = data.view, args.budget
    queries = data.queries.astype(np.float32)
    adaptive = create("osumem_adaptive", seed=args.seed).fit(view)
    adaptive.wait_ready()
    osumem = create("osumem", seed=args.seed).fit(view)
    osumem.wait_ready()
    mean_cost = float(view.costs.mean())
    reference = _AnnReference(view, max(1, math.ceil(budget / mean_cost) * 4), args.seed)

    cfg = adaptive.config
    head_k = max(32, cfg.seed_steps, math.ceil(cfg.head_ratio * budget / max(mean_cost, 1.0)))
    head_beam = min(view.n, max(head_k, HNSW_EF_SEARCH, HEAD_BEAM_PER_K * head_k))
    steps = adaptive.step_index.hnsw
    assert steps is not None, "the step index is built from ann_min_steps steps on"
    cents = adaptive._centroid_index  # the coarse stage's index (built by wait_ready)
    assert cents is not None and cents._index is not None
    n_live = int(adaptive.fitted_pool.live_arrays()[0].size)
    k_osus = min(math.ceil(cfg.coarse_ratio * budget / adaptive._mean_osu_cost()), n_live)
    cent_k = k_osus + CENTROID_MARGIN
    cent_ef = max(HNSW_EF_SEARCH, 2 * cent_k)
    binds = sum(bool(adaptive._stages(q, budget, view.n, None).decision.binds) for q in queries)

    def head(q: np.ndarray) -> object:
        return steps.query(q, head_beam, ef=head_beam)

    def centroids(q: np.ndarray) -> object:
        return cents._index.knn_query(q[None, :], k=cent_k)

    cents._index.set_ef(cent_ef)  # the coarse stage's beam (kept in step with its cache)
    cents._ef = cent_ef
    rows = {
        "reference": per_query_us(reference.query, queries, args.repeat),
        "head_search": per_query_us(head, queries, args.repeat),
        "centroid_search": per_query_us(centroids, queries, args.repeat),
        "retrieve_osumem_adaptive": per_query_us(
            lambda q: adaptive.retrieve(q, budget), queries, args.repeat
        ),
        "retrieve_osumem": per_query_us(lambda q: osumem.retrieve(q, budget), queries, args.repeat),
    }
    ref = rows["reference"]
    out = {
        "n": args.n,
        "budget": budget,
        "head": {"k": head_beam, "ef": head_beam},
        "centroids": {"k": cent_k, "ef": cent_ef, "live_units": n_live},
        "binding_queries": f"{binds}/{len(queries)}",
        "us_per_query": {k: round(v, 1) for k, v in rows.items()},
        "over_reference": {k: round(v / ref, 2) for k, v in rows.items()},
        "two_searches_over_reference": round(
            (rows["head_search"] + rows["centroid_search"]) / ref, 2
        ),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
