"""What the cyclic garbage collector walks in a process holding a memory, and what
its full collections cost an agent loop.

One store of ``--steps`` generated agent steps (hashing encoder, the logs of ``osumem
bench serve``; kept in ``--work-dir`` so a rerun reuses it), copied. A memory opened on
the copy reads its namespace's steps alone (wall and CPU time, the collections that
ran, the resident memory the read added at its peak, on Linux). Another is opened
and retrieved from once (loaded, its structure restored: that retrieve's wall and CPU
time, its collections, the resident memory the opening and that retrieve added at
their peak, and whether ``scipy.sparse`` was imported by then); then an agent loop of
``--rounds`` rounds (one add, one retrieve): each call's wall time (p50, p99, max),
and the longest collection of each generation during it (``gc.callbacks``) and the
number of full ones; then the objects the collector tracks (before opening, after
the rounds) and a full collection's wall time (``--collections`` of them back to
back: min and median).
Run it with ``PYTHONPATH`` on two trees to compare code versions.

Usage: ``python benchmarks/gc_walk.py [--steps 60000] [--rounds 400]``
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from osumem.bench.serve import NAMESPACE, ServeBenchConfig, _build
from osumem.memory import Memory


class _Pauses:
    """The collections while installed: the longest of each generation, how many ran
    (full ones apart) and their total wall time."""

    def __init__(self) -> None:
        self.longest = {0: 0.0, 1: 0.0, 2: 0.0}
        self.full = 0
        self.count = 0
        self.total = 0.0
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        gen = int(info["generation"])
        took = time.perf_counter() - self._t0
        self.longest[gen] = max(self.longest[gen], took)
        self.full += gen == 2
        self.count += 1
        self.total += took


def _status_mb(field: str) -> float | None:
    """A memory figure of this process from ``/proc/self/status`` (``VmRSS``, the
    resident memory now; ``VmHWM``, its high-water mark), in MB; ``None`` where there
    is no such file."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _trim() -> None:
    """Hand the heap memory freed so far back to the system (glibc's ``malloc_trim``;
    elsewhere nothing), so that the next peak counts the memory a step needs, not
    less for the freed memory an earlier step left resident."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


def _reset_peak() -> bool:
    """Start the high-water mark of resident memory again from the memory resident now
    (Linux: ``5`` written to ``/proc/self/clear_refs``); whether that was possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


class _Watch:
    """One call watched (:meth:`__call__`): its collections, wall and CPU time, and the
    resident memory added at its peak since the watch was made (Linux; ``None``
    elsewhere). Made after a collection and with the freed heap handed back."""

    def __init__(self) -> None:
        gc.collect()
        _trim()
        self.pauses = _Pauses()
        self._rss = _status_mb("VmRSS") if _reset_peak() else None
        self.wall = self.cpu = 0.0
        self.peak_mb: float | None = None

    def __call__(self, fn: Callable[[], Any]) -> Any:
        gc.callbacks.append(self.pauses)
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            return fn()
        finally:
            gc.callbacks.remove(self.pauses)
            self.wall, self.cpu = time.perf_counter() - w0, time.process_time() - c0
            peak = _status_mb("VmHWM")
            # both figures come from the kernel's per-CPU resident counters, which it
            # sums approximately: a call that added nothing can read a few pages below 0
            self.peak_mb = None if self._rss is None or peak is None else max(0.0, peak - self._rss)


def measure_read(store: Path) -> dict[str, Any]:
    """Reading the namespace's steps alone (what the first retrieve does first): wall
    and CPU time, the collections that ran, and the resident memory it added at its
    peak (Linux)."""
    with Memory.open(store, encoder="hashing") as mem:
        watch = _Watch()
        watch(lambda: mem._views.buffer(NAMESPACE))
    return {
        "read_s": watch.wall,
        "read_cpu_s": watch.cpu,
        "read_collections": watch.pauses.count,
        "read_peak_mb": watch.peak_mb,
    }


def measure(store: Path, rounds: int, collections: int) -> dict[str, Any]:
    """The measurements on the store file ``store`` (changed: pass a copy)."""
    gc.collect()
    before = len(gc.get_objects())
    first = _Watch()  # the opening's memory counts in the first retrieve's peak
    mem = Memory.open(store, encoder="hashing")
    try:
        first(
            lambda: mem.retrieve("which flight is on reservation R00001?", 256, namespace=NAMESPACE)
        )
        sparse = "scipy.sparse" in sys.modules
        mem.wait_ready()
        pauses = _Pauses()
        calls: list[float] = []
        gc.callbacks.append(pauses)
        try:
            for i in range(rounds):
                msg = {"role": "user", "content": f"please move reservation R{i:05d} to UA{i % 90}"}
                t0 = time.perf_counter()
                mem.add_messages([msg], namespace=NAMESPACE)
                t1 = time.perf_counter()
                query = f"which flight is on reservation R{i * 37 % 3000:05d}?"
                mem.retrieve(query, 256, namespace=NAMESPACE)
                calls += [t1 - t0, time.perf_counter() - t1]
        finally:
            gc.callbacks.remove(pauses)
        gc.collect()
        after = len(gc.get_objects())
        walks = []
        for _ in range(collections):
            t0 = time.perf_counter()
            gc.collect()
            walks.append(time.perf_counter() - t0)
    finally:
        mem.close()
    ms = np.asarray(calls) * 1000.0
    return {
        "first_retrieve_s": first.wall,
        "first_retrieve_cpu_s": first.cpu,
        "first_retrieve_collections": first.pauses.count,
        "first_retrieve_collections_ms": 1000.0 * first.pauses.total,
        # resident memory the opening and the first retrieve added at their peak
        "first_retrieve_peak_mb": first.peak_mb,
        "scipy_sparse_imported": sparse,
        "tracked_before_open": before,
        "tracked_after": after,
        "full_collection_ms": {
            "min": 1000.0 * min(walks),
            "median": 1000.0 * float(np.median(walks)),
        },
        "calls_ms": {
            "p50": float(np.percentile(ms, 50)),
            "p99": float(np.percentile(ms, 99)),
            "max": float(ms.max()),
        },
        "longest_collection_ms": {str(g): 1000.0 * t for g, t in pauses.longest.items()},
        "full_collections_in_loop": pauses.full,
    }


def run(steps: int, rounds: int, collections: int, work: Path) -> dict[str, Any]:
    store = work / "bench.db"
    built = _build(ServeBenchConfig(steps=steps), store, lambda m: print(m, file=sys.stderr))
    copy = work / "copy.db"
    shutil.copy(store, copy)
    try:
        read = measure_read(copy)
        result = measure(copy, rounds, collections)
    finally:
        for extra in (copy, Path(f"{copy}-wal"), Path(f"{copy}-shm")):
            extra.unlink(missing_ok=True)
    return {"steps": built["steps"], "rounds": rounds, **read, **result}


def render(r: dict[str, Any]) -> str:
    full, calls, longest = r["full_collection_ms"], r["calls_ms"], r["longest_collection_ms"]
    return "\n".join(
        [
            f"a {r['steps']}-step memory, loaded and restored:",
            f"- reading its steps alone: {r['read_s']:.3f} s wall, {r['read_cpu_s']:.3f} s CPU, "
            f"{r['read_collections']} garbage collections"
            + (
                f", peak resident memory +{r['read_peak_mb']:.0f} MB"
                if r["read_peak_mb"] is not None
                else ""
            ),
            f"- the first retrieve after opening: {r['first_retrieve_s']:.3f} s wall, "
            f"{r['first_retrieve_cpu_s']:.3f} s CPU (scipy.sparse imported by then: "
            f"{r['scipy_sparse_imported']}); {r['first_retrieve_collections']} garbage "
            f"collections in it ({r['first_retrieve_collections_ms']:.0f} ms); "
            + (
                "peak resident memory +"
                f"{r['first_retrieve_peak_mb']:.0f} MB over the process before opening"
                if r["first_retrieve_peak_mb"] is not None
                else "peak resident memory not measured (no /proc/self)"
            ),
            f"- objects the collector tracks: {r['tracked_before_open']:,} before opening, "
            f"{r['tracked_after']:,} after the rounds",
            f"- a full collection: {full['min']:.1f} ms min, {full['median']:.1f} ms median",
            f"- {r['rounds']} rounds of add + retrieve: calls p50 {calls['p50']:.2f} / p99 "
            f"{calls['p99']:.2f} / max {calls['max']:.1f} ms; longest collection by "
            f"generation {longest['0']:.1f} / {longest['1']:.1f} / {longest['2']:.1f} ms, "
            f"{r['full_collections_in_loop']} full",
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60_000)
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--collections", type=int, default=15)
    ap.add_argument("--work-dir", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="osumem-gc-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        result = run(args.steps, args.rounds, args.collections, work)
    print(json.dumps(result, indent=2) if args.json else render(result))


if __name__ == "__main__":
    main()
