"""What one incremental add costs the OSU pool, and the state it leaves.

One process. A pool is built over the first ``--start`` steps of a generated memory
(``osumem.bench.scale.generate``: clustered embeddings, annotations as an agent's),
with the similarity refresh in the background as the agent memory runs it; then
``--adds`` steps go in one ``OSUPool.add`` each. Reported: the adds' CPU time (the
thread's own: p50 and mean), and a digest of the pool's state after the refresh
under way is applied. Two versions of the code that leave the same state print the
same digest (run this file with ``PYTHONPATH`` on each tree).

Usage: ``python benchmarks/pool_add.py [--start 9000] [--adds 2000] [--dim 256]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

import numpy as np

from osumem.bench.scale import generate
from osumem.osu import OSUConfig, OSUPool
from osumem.osu.construct import grown_prefix


def run(start: int, adds: int, dim: int) -> dict[str, float | str]:
    view = generate(start + adds, dim, 0, 100).view
    pool = OSUPool.build(grown_prefix(view, start), OSUConfig(), seed=0)
    pool.background_refresh = True
    cpu = []
    for t in range(start + 1, start + adds + 1):
        c0 = time.thread_time()
        pool.add(grown_prefix(view, t))
        cpu.append(time.thread_time() - c0)
    pool.finish_refresh()
    state = pool.state()
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(state[name]).tobytes())
    us = np.array(cpu) * 1e6
    return {
        "add_cpu_p50_us": float(np.median(us)),
        "add_cpu_mean_us": float(us.mean()),
        "state_digest": digest.hexdigest()[:16],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--start", type=int, default=9000)
    ap.add_argument("--adds", type=int, default=2000)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--json", action="store_true", help="print the measurements as JSON")
    args = ap.parse_args()
    if args.start < 1 or args.adds < 1 or args.dim < 1:
        ap.error("--start, --adds and --dim must be at least 1")
    r = run(args.start, args.adds, args.dim)
    if args.json:
        print(json.dumps(r))
    else:
        print(
            f"{args.adds} single adds from {args.start} steps: CPU p50 "
            f"{r['add_cpu_p50_us']:.1f} us, mean {r['add_cpu_mean_us']:.1f} us; "
            f"state {r['state_digest']}"
        )


if __name__ == "__main__":
    main()
