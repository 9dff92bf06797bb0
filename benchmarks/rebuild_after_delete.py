"""The retrieve after a delete (or a text update, ``--edit update``, or a metadata
update, ``--edit metadata``), made by the memory itself or by another writer
(``--by other``: a second ``Memory`` on the same store): the namespace's structure
rebuilt on a background thread (``Memory.rebuild_in_background``, the default)
against rebuilt before the retrieve answers (``False``), on copies of one store.

One store of ``--steps`` generated agent steps (hashing encoder, the logs of ``osumem
bench serve``; kept in ``--work-dir`` so a rerun reuses it). For each mode, ``--repeat``
times, alternating: a fresh copy is opened, a retrieve loads it (and ``wait_ready``
settles it), step ``--position`` is deleted (or given a new text or metadata), and
then timed: the edit, the next retrieve (wall and CPU, and which method answered), the
retrieves of a loop (one every 50 ms) while the rebuild runs (p50 and max), and the
time until ``wait_ready`` returns. Then 100 retrieves: their selected step ids, digested, must be the same in
both modes (the rebuilt structure equals the one replayed before answering).

Usage: ``python benchmarks/rebuild_after_delete.py [--steps 10000] [--repeat 2]
[--edit delete|update|metadata] [--by self|other]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from osumem.bench.serve import NAMESPACE, ServeBenchConfig, _build
from osumem.memory import Memory

MODES = {"background": True, "before answering": False}
_EDITS = {"delete": "a delete", "update": "a text update", "metadata": "a metadata update"}


def _query(i: int) -> str:
    return f"which flight and bags are on reservation R{i * 97 % 3000:05d}?"


def _edit(mem: Memory, edit: str, position: int) -> None:
    if edit == "delete":
        mem.delete(NAMESPACE, [position])
    elif edit == "update":
        mem.update(NAMESPACE, position, text="reservation R00042 moved to the 9:40 flight")
    else:
        mem.update(NAMESPACE, position, metadata={"pinned": True})


def _once(
    store: Path, background: bool, position: int, edit: str = "delete", by: str = "self"
) -> dict[str, Any]:
    mem = Memory.open(store, encoder="hashing")
    other = Memory.open(store, encoder="hashing") if by == "other" else mem
    try:
        mem.rebuild_in_background = background
        mem.retrieve(_query(0), 256, namespace=NAMESPACE)
        mem.wait_ready()
        other.view(NAMESPACE)  # the editing memory has the namespace loaded
        t0, c0 = time.perf_counter(), time.process_time()
        _edit(other, edit, position)
        t1, c1 = time.perf_counter(), time.process_time()
        first = mem.retrieve(_query(1), 256, namespace=NAMESPACE)
        t2, c2 = time.perf_counter(), time.process_time()
        during: list[float] = []
        cache = mem._retrievers  # the memory's own method's retrievers
        while cache.rebuilding(NAMESPACE):
            a = time.perf_counter()
            mem.retrieve(_query(len(during) + 2), 256, namespace=NAMESPACE)
            during.append(time.perf_counter() - a)
            time.sleep(0.05)
        mem.wait_ready()
        t3 = time.perf_counter()
        digest = hashlib.sha256()
        for i in range(100):
            r = mem.retrieve(_query(i + 1000), (64, 256, 1024)[i % 3], namespace=NAMESPACE)
            digest.update(json.dumps([s.step_id for s in r.steps]).encode())
    finally:
        mem.close()
        other.close()
    during.sort()
    return {
        "edit_s": t1 - t0,
        "edit_cpu_s": c1 - c0,
        "next_retrieve_s": t2 - t1,
        "next_retrieve_cpu_s": c2 - c1,
        "next_retrieve_method": first.method,
        "retrieves_while_rebuilding": len(during),
        "while_rebuilding_p50_ms": 1000 * during[len(during) // 2] if during else None,
        "while_rebuilding_max_ms": 1000 * during[-1] if during else None,
        "until_ready_s": t3 - t1,
        "answers": digest.hexdigest()[:16],
    }


def run(
    steps: int, repeat: int, position: int, work: Path, edit: str = "delete", by: str = "self"
) -> dict[str, Any]:
    store = work / "bench.db"
    built = _build(ServeBenchConfig(steps=steps), store, lambda m: print(m, file=sys.stderr))
    rows = []
    for r in range(repeat):
        for mode in MODES if r % 2 == 0 else list(MODES)[::-1]:
            copy = work / "copy.db"
            shutil.copy(store, copy)
            rows.append(
                {"round": r + 1, "mode": mode} | _once(copy, MODES[mode], position, edit, by)
            )
            for extra in (copy, Path(f"{copy}-wal"), Path(f"{copy}-shm")):
                extra.unlink(missing_ok=True)
    return {
        "steps": built["steps"],
        "edit": edit,
        "by": by,
        "rows": rows,
        "same_answers": len({r["answers"] for r in rows}) == 1,
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        f"{_EDITS[result['edit']]} by {'another writer' if result['by'] == 'other' else 'it'} "
        f"in a {result['steps']}-step memory, then its retrieves:",
        "",
        f"| round | rebuild | {result['edit']} s | next retrieve s (CPU) | answered by | "
        "retrieves while rebuilding: n, p50 / max ms | until ready s |",
        "|---:|---|---:|---:|---|---|---:|",
    ]
    for r in result["rows"]:
        during = (
            f"{r['retrieves_while_rebuilding']}, {r['while_rebuilding_p50_ms']:.1f} / "
            f"{r['while_rebuilding_max_ms']:.1f}"
            if r["retrieves_while_rebuilding"]
            else "0"
        )
        lines.append(
            f"| {r['round']} | {r['mode']} | {r['edit_s']:.2f} | "
            f"{r['next_retrieve_s']:.3f} ({r['next_retrieve_cpu_s']:.3f}) | "
            f"{r['next_retrieve_method']} | {during} | {r['until_ready_s']:.1f} |"
        )
    lines += ["", f"the same answers after wait_ready in every run: {result['same_answers']}"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--position", type=int, default=5, help="the step edited")
    ap.add_argument("--edit", choices=tuple(_EDITS), default="delete")
    ap.add_argument("--by", choices=("self", "other"), default="self")
    ap.add_argument("--work-dir", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="osumem-rebuild-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        result = run(args.steps, args.repeat, args.position, work, args.edit, args.by)
    print(json.dumps(result, indent=2) if args.json else render(result))
    if not result["same_answers"]:
        sys.exit("the two modes answered differently after wait_ready")


if __name__ == "__main__":
    main()
