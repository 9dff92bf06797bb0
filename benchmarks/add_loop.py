"""A run of single adds back to back, then one retrieve: an ingest written as a loop
over messages, or a logger that adds every step and never asks.

One process, a new store in a temporary folder (hashing encoder, the default
method). ``--adds`` generated one-line user steps go in one ``Memory.add`` each, with
no retrieve between them; then one ``Memory.retrieve``. Reported: the adds' wall time
(p50, p99, max) and CPU time (the same; the thread's own), the adds slower than
``--slow-ms`` (their index, wall and CPU), the retrieve's wall and CPU time, and the whole
run's wall and process CPU time (the background refreshes included).

Once ``PREPARE_BEHIND`` (64) steps are not in the memory's structure, an add replays
the add batches ending within ``PREPARE_INCREMENT`` (16) steps; a similarity refresh that
this replay makes due is computed on a background thread and taken at a fixed step
count, and an add that finds ``PREPARE_MIN_STEPS`` (512) steps out of the structure
(the adds outran a refresh) waits for it. The adds' CPU tail shows what the replays
cost them (the wall time also holds those waits, the commits' disk waits and the
background threads' turns), and the retrieve after them what was left to replay or
wait for.

Usage: ``python benchmarks/add_loop.py [--adds 10000] [--slow-ms 20] [--json]``
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from osumem.memory import Memory


def run(adds: int, slow_ms: float, folder: Path) -> dict[str, Any]:
    t_run, c_run = time.perf_counter(), time.process_time()
    wall: list[float] = []
    cpu: list[float] = []
    with Memory.open(folder / "loop.db", encoder="hashing") as mem:
        for i in range(adds):
            text = (
                f"Passenger P{i % 500:03d} asks to move reservation R{i:05d} "
                f"to an aisle seat on flight F{i % 97}."
            )
            t0, c0 = time.perf_counter(), time.thread_time()
            mem.add(text, namespace="agent")
            wall.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
        t0, c0 = time.perf_counter(), time.thread_time()
        mem.retrieve("what about reservation R00042?", 256, namespace="agent")
        retrieve_ms = (time.perf_counter() - t0) * 1000
        retrieve_cpu_ms = (time.thread_time() - c0) * 1000
        run_wall, run_cpu = time.perf_counter() - t_run, time.process_time() - c_run
    w, c = np.array(wall) * 1000, np.array(cpu) * 1000
    slow = [
        {"add": int(i), "wall_ms": float(w[i]), "cpu_ms": float(c[i])}
        for i in np.flatnonzero(w > slow_ms)
    ]
    return {
        "adds": adds,
        "add_wall_ms": {
            "p50": float(np.median(w)),
            "p99": float(np.percentile(w, 99)),
            "max": float(w.max()),
        },
        "add_cpu_ms": {
            "p50": float(np.median(c)),
            "p99": float(np.percentile(c, 99)),
            "max": float(c.max()),
        },
        "adds_wall_s": float(w.sum() / 1000),
        "adds_cpu_s": float(c.sum() / 1000),
        "slow_adds": slow,
        "retrieve_after_ms": retrieve_ms,
        "retrieve_after_cpu_ms": retrieve_cpu_ms,
        "run_wall_s": run_wall,
        "run_cpu_s": run_cpu,
    }


def report(r: dict[str, Any], slow_ms: float) -> str:
    a, c = r["add_wall_ms"], r["add_cpu_ms"]
    lines = [
        f"{r['adds']} single adds: wall p50 {a['p50']:.3f} / p99 {a['p99']:.2f} / max "
        f"{a['max']:.1f} ms, CPU p50 {c['p50']:.3f} / p99 {c['p99']:.2f} / max {c['max']:.1f} "
        f"ms; all adds {r['adds_wall_s']:.2f} s wall, {r['adds_cpu_s']:.2f} s CPU",
        f"adds over {slow_ms:g} ms wall: {len(r['slow_adds'])}"
        + "".join(
            f"\n  add {s['add']}: {s['wall_ms']:.1f} ms wall, {s['cpu_ms']:.1f} ms CPU"
            for s in r["slow_adds"]
        ),
        f"the retrieve after them: {r['retrieve_after_ms']:.1f} ms wall, "
        f"{r['retrieve_after_cpu_ms']:.1f} ms CPU",
        f"whole run: {r['run_wall_s']:.2f} s wall, {r['run_cpu_s']:.2f} s CPU",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adds", type=int, default=10_000)
    ap.add_argument("--slow-ms", type=float, default=20.0)
    ap.add_argument("--json", action="store_true", help="print the measurements as JSON")
    args = ap.parse_args()
    if args.adds < 1:
        ap.error("--adds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="osumem-add-loop-") as tmp:
        result = run(args.adds, args.slow_ms, Path(tmp))
    print(json.dumps(result, indent=2) if args.json else report(result, args.slow_ms))


if __name__ == "__main__":
    main()
