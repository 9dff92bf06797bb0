"""Per-retrieve CPU of a memory with one BLAS thread (``blas_threads=1``, the default)
against the BLAS library's own setting (``blas_threads=None``: all cores), in one
process, interleaved query by query so both see the same machine load.

One store of ``--steps`` generated agent steps (hashing encoder), two memories opened
on it, ``--queries`` retrievals each. CPU time (``time.process_time``, every thread of
the process, so BLAS threads spinning count) per retrieve, p50 and p99, and the ratio.

Usage: ``python benchmarks/blas_threads.py [--steps 10000] [--queries 200]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from osumem.bench.serve import generated_turn
from osumem.memory import Memory


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="osumem-blas-") as tmp:
        path = Path(tmp) / "m.db"
        with Memory.open(path, encoder="hashing") as mem, mem.transaction():
            k = 0
            while mem.n_steps("a") < args.steps:
                log = [m for t in range(6) for m in generated_turn(k + t, rng)]
                mem.add_messages(log, namespace="a", hold_open_calls=False)
                k += 6
        one = Memory.open(path, encoder="hashing", read_only=True)
        every = Memory.open(path, encoder="hashing", read_only=True, blas_threads=None)
        times: dict[str, list[float]] = {"blas_threads=1": [], "blas_threads=None": []}
        for mem in (one, every):
            mem.retrieve("warm up", 256, namespace="a")
        for i in range(args.queries):
            q = f"which flight and bags are on reservation R{i % (k or 1):05d}?"
            for name, mem in (("blas_threads=1", one), ("blas_threads=None", every)):
                t0 = time.process_time()
                mem.retrieve(q, 256, namespace="a")
                times[name].append(time.process_time() - t0)
        one.close()
        every.close()
    p50 = {}
    for name, xs in times.items():
        arr = np.asarray(xs) * 1000
        p50[name] = float(np.percentile(arr, 50))
        print(f"{name:18s} CPU per retrieve p50 {p50[name]:.2f} ms, p99 "
              f"{np.percentile(arr, 99):.2f} ms")  # fmt: skip
    print(f"all threads / one thread, p50: {p50['blas_threads=None'] / p50['blas_threads=1']:.2f}x")


if __name__ == "__main__":
    main()
