#!/usr/bin/env python3
"""CPU of one cold `osumem query` (a new process on a warm store, hashing encoder)
against `python -c "import numpy"`, both measured here, in the same run.

    python3 benchmarks/cold_query.py                 # 900-step store, median of 7 runs
    python3 benchmarks/cold_query.py --steps 5000 --runs 11

The store is built first (agent turns through ``Memory.add_messages``, one retrieve so
that the pool snapshot is stored); then each command runs ``--runs`` times, alternating,
and its CPU (user + system of the child, ``resource.getrusage(RUSAGE_CHILDREN)``) and
wall are recorded. It prints the medians and the ratio query / numpy. Run it from the
repository root with the virtual environment in ``.venv`` on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VENV = Path(__file__).resolve().parents[1] / ".venv" / "bin"


def build(db: Path, steps: int) -> None:
    from osumem.memory import Memory

    with Memory.open(db, encoder="hashing") as mem:
        for k in range(steps // 2):
            mem.add_messages(
                [
                    {"role": "user", "content": f"book flight HAT{k % 40:03d} for P{k % 17}"},
                    {"role": "assistant", "content": f"Booked HAT{k % 40:03d}: R{k}."},
                ]
            )
        mem.retrieve("which flight?", 256)


def run(cmd: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", action="store_true", help="print the medians and ratios as JSON")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        db = Path(d) / "q.db"
        build(db, args.steps)
        query = [str(VENV / "osumem"), "query", "which flight did P3 book?", "--store", str(db)]
        numpy = [sys.executable, "-c", "import numpy"]
        results: dict[str, list[tuple[float, float]]] = {"query": [], "numpy": []}
        run(query)  # page cache warm
        for _ in range(args.runs):
            results["numpy"].append(run(numpy))
            results["query"].append(run(query))
    med = {
        k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v))
        for k, v in results.items()
    }
    ratio_cpu, ratio_wall = med["query"][0] / med["numpy"][0], med["query"][1] / med["numpy"][1]
    if args.json:
        out = {k: {"cpu_ms": cpu * 1000, "wall_ms": wall * 1000} for k, (cpu, wall) in med.items()}
        print(
            json.dumps({**out, "runs": args.runs, "ratio_cpu": ratio_cpu, "ratio_wall": ratio_wall})
        )
        return
    for k, (cpu, wall) in med.items():
        print(
            f"{k:6s} CPU {cpu * 1000:7.1f} ms   wall {wall * 1000:7.1f} ms   (median of {args.runs})"
        )
    print(f"ratio query / import numpy: CPU {ratio_cpu:.2f}x, wall {ratio_wall:.2f}x")


if __name__ == "__main__":
    main()
