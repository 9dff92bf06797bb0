"""The garbage collector's full collections inside ``osumem serve`` under load, with
the server's start frozen (as it ships, ``osumem.serve.run.frozen_start``) and not.

One store of ``--steps`` generated steps (hashing encoder, kept in ``--work-dir``), then
``--repeat`` rounds; each round runs both servers one after the other, each on a fresh
copy of the store, under the load of ``osumem bench serve`` (``--clients`` threads of
``--ops`` operations, a quarter of them adds). The server is ``osumem serve`` started
with a few lines before the command that time each full (generation 2) collection
through ``gc.callbacks``; ``not frozen`` also replaces ``frozen_start`` with a block
that does nothing. A full collection stops every thread of the server while it walks
every tracked object, so each one delays every request in flight.

Reported per server and round: the full collections during the load (how many, the
longest, their sum, in ms of wall time), those of the start (before the load), the
load's requests/s and its retrieve and add p99.

Usage: ``python benchmarks/serve_gc_pauses.py [--steps 10000] [--ops 300] [--repeat 2]``
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from osumem.bench.serve import (
    NAMESPACE,
    ServeBenchConfig,
    _build,
    _concurrent,
    _kill_group,
    _start_server,
)

#: Run before ``osumem serve``: each full collection's end time and length, one JSON
#: line per collection, into the file named by ``GC_PAUSE_LOG``.
PRELUDE = """
import gc, json, os, time
_log = open(os.environ["GC_PAUSE_LOG"], "a")
_began = [0.0]
def _timed(phase, info):
    if info["generation"] != 2:
        return
    if phase == "start":
        _began[0] = time.perf_counter()
    else:
        ms = (time.perf_counter() - _began[0]) * 1000.0
        _log.write(json.dumps([time.time(), ms]) + "\\n")
        _log.flush()
gc.callbacks.append(_timed)
if os.environ.get("GC_PAUSE_NOT_FROZEN"):
    import contextlib
    import osumem.serve.run
    osumem.serve.run.frozen_start = contextlib.nullcontext
from osumem.cli import main
main()
"""

VARIANTS = ("frozen", "not frozen")


def _serve_once(store: Path, cfg: ServeBenchConfig, variant: str, log: Path) -> dict[str, Any]:
    token = secrets.token_hex(16)
    env = {"GC_PAUSE_LOG": str(log)}
    if variant == "not frozen":
        env["GC_PAUSE_NOT_FROZEN"] = "1"
    proc, url = _start_server(store, cfg, token, cfg.readers, code=PRELUDE, env=env)
    try:
        headers = {"authorization": f"Bearer {token}"}
        queries = [f"which flight and bags are on reservation R{k:05d}?" for k in range(100)]
        acked: list[tuple[int, list[int]]] = []
        route = f"/v1/namespaces/{NAMESPACE}"
        began = time.time()
        load = _concurrent(cfg, url, headers, route, queries, secrets.token_hex(3), acked)
        ended = time.time()
    finally:
        _kill_group(proc)
    pauses = [json.loads(line) for line in log.read_text().splitlines()]
    during = [ms for at, ms in pauses if began <= at <= ended]
    start = [ms for at, ms in pauses if at < began]
    return {
        "variant": variant,
        "full_collections_in_load": len(during),
        "longest_ms": max(during, default=0.0),
        "sum_ms": sum(during),
        "start_collections_ms": start,
        "throughput_ops_s": load["throughput_ops_s"],
        "retrieve_p99_ms": load["retrieve"]["p99_ms"],
        "add_p99_ms": load["add"]["p99_ms"],
        "errors": load["n_errors"],
    }


def run(steps: int, clients: int, ops: int, repeat: int, work: Path) -> list[dict[str, Any]]:
    cfg = ServeBenchConfig(steps=steps, clients=clients, ops_per_client=ops, encoder="hashing")
    store = work / "bench.db"
    _build(cfg, store, lambda message: print(message, file=sys.stderr))
    rows = []
    for r in range(repeat):
        for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
            copy = work / f"serve-{r}-{variant.replace(' ', '-')}.db"
            shutil.copy(store, copy)
            log = work / f"gc-{r}-{variant.replace(' ', '-')}.jsonl"
            log.unlink(missing_ok=True)
            rows.append({"round": r + 1} | _serve_once(copy, cfg, variant, log))
            for extra in (copy, Path(f"{copy}-wal"), Path(f"{copy}-shm")):
                extra.unlink(missing_ok=True)
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| round | server | full collections in the load | longest ms | sum ms | "
        "at the start, ms | ops/s | retrieve p99 ms | add p99 ms |",
        "|---:|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        start = ", ".join(f"{ms:.0f}" for ms in r["start_collections_ms"])
        lines.append(
            f"| {r['round']} | {r['variant']} | {r['full_collections_in_load']} | "
            f"{r['longest_ms']:.1f} | {r['sum_ms']:.1f} | {start} | "
            f"{r['throughput_ops_s']:.0f} | {r['retrieve_p99_ms']:.1f} | {r['add_p99_ms']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--ops", type=int, default=300, help="operations per client")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--work-dir", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="osumem-serve-gc-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        rows = run(args.steps, args.clients, args.ops, args.repeat, work)
    print(json.dumps(rows, indent=2) if args.json else render(rows))


if __name__ == "__main__":
    main()
