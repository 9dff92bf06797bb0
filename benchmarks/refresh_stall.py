"""How long an agent's add waits for a similarity refresh: in place (the paper's
construction, ``OSUPool.background_refresh = False``) against in the background (what
the agent memory does).

One process. A generated memory (``osumem.bench.scale.generate``, clustered 384-d
embeddings, annotations as an agent's) is built up to just before a refresh falls
due at ``--steps``; then steps are added one at a time through the refresh and
``--extra`` steps past it, with ``--think-ms`` of sleep between two adds (the agent's
model call; the refresh thread runs meanwhile). The same rounds run for each mode
on a pool of its own. Reported per mode: the wall time of the adds (what the agent
waited: p50, p99, max), the add that made the refresh due, the add that applied it,
and the process CPU time of the whole run (the refresh thread's included). After
the rounds the two pools are compared: the same state, bit for bit.

With ``--think-ms 0`` (adds back to back, no agent at all) the background refresh
is not done when its apply point comes and that add waits for the rest of it.

Usage: ``python benchmarks/refresh_stall.py [--steps 100000] [--extra 6000] [--think-ms 2]``
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from osumem.bench.scale import generate
from osumem.memory.blas import blas_threads
from osumem.osu import OSUConfig, OSUPool
from osumem.osu.construct import grown_prefix


def run_mode(view: Any, start: int, stop: int, background: bool, think: float) -> dict[str, Any]:
    pool = OSUPool.build(grown_prefix(view, start), OSUConfig(), seed=0)
    pool.background_refresh = background
    wall: list[float] = []
    due_at = applied_at = -1
    cpu0 = time.process_time()
    for t in range(start + 1, stop + 1):
        if think:
            time.sleep(think)
        upto, pending = pool.similarity.upto, pool.refresh_pending
        w0 = time.perf_counter()
        pool.add(grown_prefix(view, t))
        wall.append(time.perf_counter() - w0)
        if pool.similarity.upto != upto and not pending and due_at < 0:
            due_at = applied_at = len(wall) - 1  # refreshed in place
        elif pool.refresh_pending and not pending and due_at < 0:
            due_at = len(wall) - 1
        elif pending and not pool.refresh_pending:
            applied_at = len(wall) - 1
    cpu = time.process_time() - cpu0
    pool.finish_refresh()
    ms = np.asarray(wall) * 1000.0
    return {
        "mode": "background" if background else "in place",
        "adds": int(ms.size),
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "max_ms": float(ms.max()),
        "due_add_ms": float(ms[due_at]) if due_at >= 0 else float("nan"),
        "apply_add_ms": float(ms[applied_at]) if applied_at >= 0 else float("nan"),
        "apply_after_adds": applied_at - due_at if applied_at >= 0 else -1,
        "process_cpu_s": cpu,
        "pool": pool,
    }


def same_state(a: OSUPool, b: OSUPool) -> bool:
    sa, sb = a.state(), b.state()
    return sa.keys() == sb.keys() and all(np.array_equal(sa[k], sb[k]) for k in sa)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100_000, help="where the refresh falls due")
    ap.add_argument("--extra", type=int, default=6000, help="steps added after it")
    ap.add_argument("--think-ms", type=float, default=2.0, help="sleep between two adds")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cfg = OSUConfig()
    # the last refresh a pool built at `start` steps did: due again at `steps`
    start = int(np.ceil(args.steps / (1 + cfg.similarity_refresh_ratio))) - 1
    with blas_threads(1):
        view = generate(args.steps + args.extra, 384, 0).view
        rows = [
            run_mode(view, start, args.steps + args.extra, bg, args.think_ms / 1000.0)
            for bg in (False, True)
        ]
    identical = same_state(rows[0].pop("pool"), rows[1].pop("pool"))
    if args.json:
        print(json.dumps({"rows": rows, "identical": identical, **vars(args)}, indent=2))
        return
    print(
        f"adds from {start} to {args.steps + args.extra} steps, a refresh due near "
        f"{args.steps}, {args.think_ms:g} ms between adds; wall ms per add:\n"
    )
    print(
        "| mode | adds | p50 | p99 | max | the due add | the applying add (adds later) "
        "| process CPU s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['adds']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
            f"{r['max_ms']:.1f} | {r['due_add_ms']:.1f} | {r['apply_add_ms']:.1f} "
            f"({r['apply_after_adds']}) | {r['process_cpu_s']:.1f} |"
        )
    print(f"\nthe two pools after the rounds: {'identical' if identical else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
