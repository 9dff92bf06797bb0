"""How long an asyncio agent's event loop is blocked by the memory.

One process, one store of ``--turns`` agent turns (two steps each). A heartbeat task
sleeps 1 ms at a time and records how late each wake-up is: the longest delay is the
longest the event loop was blocked. Four runs, each 100 concurrent retrievals from
one loop while another task adds (and deletes and updates) steps in another
namespace:

* ``single``: one retrieval's wall time, called directly (the median of 50), the unit
  the others are measured in;
* ``idle``: the heartbeat alone for a second: how late the machine wakes an idle loop
  (scheduling noise; on a machine shared with other work this alone can be tens of
  milliseconds);
* ``sync in the loop``: the coroutines call the synchronous ``Memory.retrieve`` (what
  an agent without an async API does): the loop is blocked for every call;
* ``AsyncMemory``: the coroutines await :class:`osumem.serve.AsyncMemory` (the
  memory on threads of this process);
* ``AsyncMemory_process``: the same with ``AsyncMemory.open(..., process=True)`` (the
  memory in a child process).

Reported: the longest stretch the loop was held, between two polls of its selector
(``loop_busy_max_ms``, and in units of one retrieval: nothing else in the loop could
run meanwhile; see :class:`LoopBusy`), and the most CPU time this process used within
one such stretch (``loop_busy_cpu_max_ms``: the part of a stretch in which anything of
the agent's process ran at all); the longest and the 99th-percentile heartbeat
delay, in milliseconds and in units of one retrieval, which add the time the loop
waited to be woken (``wake_late_max_ms``: how late a timed-out selector wait came
back); wall and CPU time of each run; the most CPU the loop's own thread used between
two wake-ups (``loop_cpu_max_ms``); and the garbage collector's pauses.
The answers of the concurrent runs are checked equal to sequential ones. On a shared
machine compare the ratios, not the milliseconds.

Usage: ``python benchmarks/async_memory.py [--turns 2000] [--encoder hashing:d384]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from osumem.memory import Memory
from osumem.serve import AsyncMemory


def turn(k: int) -> list[dict[str, Any]]:
    """One agent turn: a request and a tool call with its result."""
    args = json.dumps({"reservation_id": f"R{k}"})
    return [
        {"role": "user", "content": f"turn {k}: check reservation R{k} for passenger P{k % 7}"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"c{k}", "function": {"name": "get_reservation", "arguments": args}}
            ],
        },
        {"role": "tool", "tool_call_id": f"c{k}", "content": f"R{k}: flight HAT{k:03d}"},
    ]


QUERIES = [(f"reservation R{k * 37 % 500} passenger P{k % 7}", 256) for k in range(100)]


class Heartbeat:
    """Sleeps ``tick`` seconds at a time; records how late each wake-up was."""

    def __init__(self, tick: float = 0.001) -> None:
        self.tick = tick
        self.delays: list[float] = []
        self.busy: list[float] = []  # the loop thread's own CPU between two wake-ups
        self.collections: list[float] = []  # garbage-collector pauses during the run
        self.spans: list[float] = []  # the loop's occupied stretches (LoopBusy)
        self.overshoots: list[float] = []  # how late timed-out selector waits returned
        self.span_cpu: list[float] = []  # the process's CPU within each stretch (LoopBusy)
        self._stop = False

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        cpu = time.thread_time()
        while not self._stop:
            due = loop.time() + self.tick
            await asyncio.sleep(self.tick)
            self.delays.append(max(0.0, loop.time() - due))
            self.busy.append(time.thread_time() - cpu)
            cpu = time.thread_time()

    def stop(self) -> None:
        self._stop = True

    def summary(self, unit: float) -> dict[str, float]:
        d = sorted(self.delays) or [0.0]
        held = sorted(self.spans) or [0.0]
        p99 = d[min(len(d) - 1, int(0.99 * len(d)))]
        return {
            "max_ms": 1000 * d[-1],
            "p99_ms": 1000 * p99,
            "max_in_retrievals": d[-1] / unit,
            "p99_in_retrievals": p99 / unit,
            "beats": len(d),
            "loop_cpu_max_ms": 1000 * max(self.busy, default=0.0),
            "loop_busy_max_ms": 1000 * held[-1],
            "loop_busy_p99_ms": 1000 * held[min(len(held) - 1, int(0.99 * len(held)))],
            "loop_busy_max_in_retrievals": held[-1] / unit,
            "loop_busy_cpu_max_ms": 1000 * max(self.span_cpu, default=0.0),
            "loop_busy_cpu_max_in_retrievals": max(self.span_cpu, default=0.0) / unit,
            "wake_late_max_ms": 1000 * max(self.overshoots, default=0.0),
            "gc_pauses": len(self.collections),
            "longest_gc_ms": 1000 * max(self.collections, default=0.0),
        }


class LoopBusy:
    """What the event loop itself did between two polls of its selector.

    The loop alternates between waiting in ``selector.select(timeout)`` and running the
    callbacks that became ready. ``spans``: the wall time from one ``select`` returning to
    the next one being called, the time the loop was occupied and nothing else in it could
    run (what asyncio's debug mode compares with ``slow_callback_duration``).
    ``overshoots``: how much longer than its timeout a ``select`` that timed out took, the
    time the loop waited to be woken (for a core, or for the interpreter lock after the
    wait) rather than ran. ``cpu``: for each span, the CPU time this whole process (every
    thread of it) used meanwhile, capped at the span: the part of a stretch in which
    something in the agent's process ran (the loop, the memory's link threads, the
    garbage collector); the rest is the machine not running the process at all (another
    process on the core, or the hypervisor: on a shared virtual machine even the idle
    loop has such stretches). A heartbeat delay is one overshoot plus the spans before the
    heartbeat's turn. Wraps the loop's selector (a private attribute of asyncio's
    selector loops), so it is a measurement, not something to use in an agent.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.selector = loop._selector  # type: ignore[attr-defined]
        self.spans: list[float] = []
        self.overshoots: list[float] = []
        self.cpu: list[float] = []
        self._back: float | None = None
        self._back_cpu = 0.0
        self._select = self.selector.select

    def select(self, timeout: float | None = None) -> Any:
        start, cpu = time.perf_counter(), time.process_time()
        if self._back is not None:
            self.spans.append(start - self._back)
            self.cpu.append(min(start - self._back, cpu - self._back_cpu))
        try:
            events = self._select(timeout)
        finally:
            self._back, self._back_cpu = time.perf_counter(), time.process_time()
        if not events and timeout is not None and timeout > 0:
            self.overshoots.append(max(0.0, self._back - start - timeout))
        return events

    def __enter__(self) -> LoopBusy:
        self.selector.select = self.select
        return self

    def __exit__(self, *exc: Any) -> None:
        del self.selector.select


class Collections:
    """The garbage collector's pauses in this process while it is on (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._start)

    def __enter__(self) -> Collections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        gc.callbacks.remove(self)


async def measured(work: Any) -> tuple[Any, Heartbeat, float, float]:
    """Run ``work`` under the heartbeat. What the process built before (the stores,
    the sequential answers) is frozen out of the garbage collector first
    (``gc.freeze``), so a collection pause measures the run's own objects, not the
    benchmark's set-up; the pauses that still happen are reported."""
    gc.collect()
    gc.freeze()
    beat = Heartbeat()
    task = asyncio.create_task(beat.run())
    await asyncio.sleep(0.01)
    with Collections() as collections, LoopBusy(asyncio.get_running_loop()) as loop:
        wall, cpu = time.perf_counter(), time.process_time()
        out = await work
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    gc.unfreeze()
    beat.stop()
    await task
    beat.collections = collections.pauses
    beat.spans, beat.overshoots, beat.span_cpu = loop.spans, loop.overshoots, loop.cpu
    return out, beat, wall, cpu


async def writer(add: Any, delete: Any, update: Any) -> None:
    for k in range(20):
        await add(k)
        if k % 5 == 4:
            await delete()
            await update(k)


async def concurrent_run(memory: AsyncMemory) -> Any:
    """100 concurrent retrievals and a writer task, under the heartbeat."""
    await memory.retrieve("warm up", 8, namespace="a")  # built before the clock

    async def add(k: int) -> None:
        await memory.add_messages(turn(k), namespace="b")

    async def delete() -> None:
        await memory.delete("b", [0])

    async def update(k: int) -> None:
        await memory.update("b", 0, metadata={"k": k})

    work = asyncio.gather(
        *(memory.retrieve(q, b, namespace="a") for q, b in QUERIES),
        writer(add, delete, update),
    )
    got, beat, wall, cpu = await measured(work)
    await memory.delete_namespace("b")
    return got, beat, wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--encoder", default="hashing:d384")
    parser.add_argument("--readers", type=int, default=None, help="AsyncMemory reader threads")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mem.db"
        with Memory.open(path, encoder=args.encoder) as mem:
            for k in range(args.turns):
                mem.add_messages(turn(k), namespace="a", log_id=str(k))
            sequential = [mem.retrieve(q, b, namespace="a") for q, b in QUERIES]
            times = []
            for q, b in QUERIES[:50]:
                t = time.perf_counter()
                mem.retrieve(q, b, namespace="a")
                times.append(time.perf_counter() - t)
            single = statistics.median(times)
            report: dict[str, Any] = {"turns": args.turns, "single_retrieve_ms": 1000 * single}
            _, beat, wall, cpu = asyncio.run(measured(asyncio.sleep(1.0)))
            report["idle"] = {**beat.summary(single), "wall_s": wall, "cpu_s": cpu}

            async def blocking_run() -> list[Any]:
                async def one(q: str, b: int) -> Any:
                    return mem.retrieve(q, b, namespace="a")

                async def add(k: int) -> None:
                    mem.add_messages(turn(k), namespace="b")

                async def delete() -> None:
                    mem.delete("b", [0])

                async def update(k: int) -> None:
                    mem.update("b", 0, metadata={"k": k})

                return await asyncio.gather(
                    *(one(q, b) for q, b in QUERIES), writer(add, delete, update)
                )

            got, beat, wall, cpu = asyncio.run(measured(blocking_run()))
            assert got[:100] == sequential
            report["sync_in_the_loop"] = {**beat.summary(single), "wall_s": wall, "cpu_s": cpu}
            mem.delete_namespace("b")
        extra = {} if args.readers is None else {"readers": args.readers}
        for name, process in (("AsyncMemory", False), ("AsyncMemory_process", True)):
            memory = AsyncMemory.open(path, encoder=args.encoder, process=process, **extra)
            got, beat, wall, cpu = asyncio.run(concurrent_run(memory))
            assert got[:100] == sequential, f"{name}: concurrent answers differ from sequential"
            report[name] = {**beat.summary(single), "wall_s": wall, "cpu_s": cpu}
            memory.service.close()
    print(json.dumps(report, indent=2))
    a, p = report["AsyncMemory"], report["AsyncMemory_process"]
    s, i = report["sync_in_the_loop"], report["idle"]
    print(
        f"one retrieval {report['single_retrieve_ms']:.1f} ms; the loop held at most "
        f"{p['loop_busy_max_ms']:.2f} ms at a time with AsyncMemory(process=True) "
        f"({p['loop_busy_max_in_retrievals']:.2f} retrievals), {a['loop_busy_max_ms']:.2f} ms "
        f"on threads ({a['loop_busy_max_in_retrievals']:.2f}), {s['loop_busy_max_ms']:.1f} ms "
        f"calling Memory in the loop ({s['loop_busy_max_in_retrievals']:.1f}); "
        f"the process ran for at most {p['loop_busy_cpu_max_ms']:.2f} ms of one such stretch "
        f"with process=True ({p['loop_busy_cpu_max_in_retrievals']:.2f} retrievals), "
        f"{i['loop_busy_cpu_max_ms']:.2f} ms idle; "
        f"heartbeat woken late by up to {p['max_ms']:.1f} ms (process), {a['max_ms']:.1f} ms "
        f"(threads), {s['max_ms']:.1f} ms (in the loop), {i['max_ms']:.1f} ms idle"
    )


if __name__ == "__main__":
    main()
