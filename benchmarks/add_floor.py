"""What one agent add costs against a plain SQLite insert of the same row.

One process, one store of ``--steps`` steps in one namespace (generated agent turns,
hashing encoder; kept in ``--work-dir`` so a rerun only tops it up), and a copy of that
file for the floor. Then ``--adds`` rounds, interleaved so both see the same machine
load:

* ``Memory.add(text)``: one user step, as an agent adds a turn (validation, the log
  digest, token count and encoding, the store's transaction, the cached view);
* the floor: ``BEGIN IMMEDIATE``; ``INSERT INTO steps`` of that step's row (the same
  columns, the same embedding bytes, the next position) into the copy; ``COMMIT``, on a
  plain ``sqlite3`` connection with the store's settings (WAL, ``synchronous=FULL``);
* the add's own statements, without the library's Python: the read before the add
  (change counter, digest, held messages, step count), ``BEGIN IMMEDIATE``, the change
  counter, the batch, step, metadata and digest rows, ``COMMIT``, on the same plain
  connection (what the add costs if its Python cost nothing).

Reported: CPU time (``time.process_time``) p50/p99 per add, per floor insert and per
run of the add's statements, their ratios to the floor, and where the add's CPU goes (a profile of ``--profile-adds`` more adds, split by
the part of the library that spends it). CPU, not wall time: on a shared machine the
wall time measures the neighbours; the fsync of ``synchronous=FULL`` costs both sides
the same wall time and little CPU.

Usage: ``python benchmarks/add_floor.py [--steps 50000] [--adds 300] [--json]``
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import secrets
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from osumem.bench.serve import _percentiles as percentiles
from osumem.bench.serve import generated_turn
from osumem.memory import Memory
from osumem.memory.backends.sqlite import sql
from osumem.memory.backends.sqlite.rows import metadata_params, step_params
from osumem.memory.rows import StepRow

NAMESPACE = "agent"

#: Where an add's CPU goes: (part, functions whose cumulative time it is, functions
#: inside them counted as parts of their own and so subtracted).
PARTS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("encode (hashing encoder)", ("embed.py:encode",), ()),
    ("count tokens", ("embed.py:count_tokens",), ()),
    (
        "plan: messages to rows (without encoding)",
        ("planner.py:plan",),
        ("embed.py:encode", "embed.py:count_tokens"),
    ),
    ("validate and normalise input", ("validate.py:check_messages", "planner.py:canonical"), ()),
    ("log digest and duplicate check", ("validate.py:log_digest", "api.py:_is_duplicate"), ()),
    ("held state (store reads)", ("namespaces.py:held_state",), ()),
    ("catch up with other writers", ("api.py:_refresh", "api.py:_writers_moved"), ()),
    ("store: the rows written (SQLite, before the commit)", ("store.py:_append",), ()),
    ("cached view extended", ("namespaces.py:extend",), ()),
)


def _build(path: Path, steps: int, encoder: str) -> int:
    rng = np.random.default_rng(0)
    with Memory.open(path, encoder=encoder) as mem:
        n = mem.n_steps(NAMESPACE)
        k = n // 3
        with mem.transaction():
            while n < steps:
                log = [m for t in range(6) for m in generated_turn(k + t, rng)]
                n += len(
                    mem.add_messages(
                        log, namespace=NAMESPACE, hold_open_calls=False, log_id=f"build {k}"
                    )
                )
                k += 6
        return n


def _percentiles(values: list[float]) -> dict[str, float]:
    return {**percentiles(values), "max_ms": float(np.max(values)) * 1000.0}


def _floor_connection(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA secure_delete=ON")
    return conn


def _parts(profile: cProfile.Profile, total: float) -> list[dict[str, Any]]:
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    cumulative: dict[str, float] = {}
    for (filename, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.items():
        key = f"{Path(filename).name}:{name}"
        cumulative[key] = max(cumulative.get(key, 0.0), ct)
    out, used = [], 0.0
    for part, names, minus in PARTS:
        spent = sum(cumulative.get(n, 0.0) for n in names)
        spent -= sum(cumulative.get(n, 0.0) for n in minus)
        out.append({"part": part, "share": spent / total if total else float("nan")})
        used += spent
    rest = max(0.0, 1 - used / total) if total else 0.0
    out.append({"part": "everything else (the commit, call overhead)", "share": rest})
    return out


def run(steps: int, adds: int, profile_adds: int, encoder: str, work: Path) -> dict[str, Any]:
    store = work / "add-floor.db"
    built = _build(store, steps, encoder)
    floor_path = work / "add-floor-plain.db"
    statements_path = work / "add-floor-statements.db"  # its own copy: the floor's as before
    src = sqlite3.connect(str(store))
    for path in (floor_path, statements_path):
        dst = sqlite3.connect(str(path))
        src.backup(dst)
        dst.close()
    src.close()
    floor = _floor_connection(floor_path)
    plain = _floor_connection(statements_path)
    (next_id,) = floor.execute(sql.MAX_STEP_ID).fetchone()
    (next_pos,) = floor.execute(sql.N_STEPS, (NAMESPACE,)).fetchone()

    mem = Memory.open(store, encoder=encoder)
    try:
        mem.retrieve("warm up", 64, namespace=NAMESPACE)  # loaded, as in an agent loop
        mem.wait_ready()  # no index build on a thread inside the timings
        run = secrets.token_hex(4)  # new texts each run: a rerun on the kept store adds them
        add_cpu: list[float] = []
        floor_cpu: list[float] = []
        statements_cpu: list[float] = []
        for i in range(adds):
            text = f"Passenger P{i % 500:03d} asks to move reservation R{i:05d} ({run}) to an aisle seat."
            t0 = time.process_time()
            added = mem.add(text, namespace=NAMESPACE)
            add_cpu.append(time.process_time() - t0)
            assert len(added) == 1, "the add was skipped (a duplicate): no measurement"
            # the same row, prepared outside the timing: the floor is the insert alone
            row, emb = _last_row(mem)
            next_id += 1
            params = step_params(next_id, NAMESPACE, next_pos, 0, row, emb)
            next_pos += 1
            t0 = time.process_time()
            floor.execute("BEGIN IMMEDIATE")
            floor.execute(sql.INSERT_STEP, params)
            floor.execute("COMMIT")
            floor_cpu.append(time.process_time() - t0)
            digest = f"sha256:{secrets.token_hex(32)}"
            t0 = time.process_time()
            _statements(plain, next_id, next_pos - 1, row, emb, digest)
            statements_cpu.append(time.process_time() - t0)
        profile = cProfile.Profile(time.process_time)  # CPU, as the timings
        t0 = time.process_time()
        profile.enable()
        for i in range(profile_adds):
            mem.add(f"Passenger P{i:03d} asks about bags on R{i:05d} ({run}).", namespace=NAMESPACE)
        profile.disable()
        profiled = time.process_time() - t0
    finally:
        mem.close()
        floor.close()
        plain.close()
    a, f = _percentiles(add_cpu), _percentiles(floor_cpu)
    st = _percentiles(statements_cpu)
    return {
        "steps_before": built,
        "encoder": encoder,
        "add_cpu": a,
        "floor_cpu": f,
        "statements_cpu": st,
        "p50_ratio": a["p50_ms"] / f["p50_ms"],
        "p99_ratio": a["p99_ms"] / f["p99_ms"],
        "statements_p50_ratio": st["p50_ms"] / f["p50_ms"],
        "where_the_add_goes": _parts(profile, profiled),
        "profiled_adds": profile_adds,
    }


def _statements(
    conn: sqlite3.Connection, step_id: int, pos: int, row: StepRow, emb: Any, digest: str
) -> None:
    """The statements one add of one step runs (``SQLiteStore.add_context``, then the
    append inside its transaction), on a plain connection."""
    conn.execute(sql.add_context(True, True), (NAMESPACE, digest)).fetchone()
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(sql.DATA_VERSION).fetchone()
    batch = conn.execute(sql.INSERT_BATCH, (NAMESPACE, pos + 1)).lastrowid or 0
    conn.execute(sql.INSERT_STEP, step_params(step_id, NAMESPACE, pos, batch, row, emb))
    conn.execute(sql.INSERT_METADATA, metadata_params(step_id, row.stamped("{}", time.time())))
    conn.execute(sql.INSERT_DIGEST, (NAMESPACE, digest, pos + 1))
    conn.execute("COMMIT")


def _last_row(mem: Memory) -> tuple[StepRow, Any]:
    """The last stored step of the namespace as the store wrote it: its row and its
    embedding bytes."""
    data = mem.store.load(NAMESPACE, start=mem.n_steps(NAMESPACE) - 1)
    v = data.view
    row = StepRow(
        role=str(v.roles[0]),
        text=str(v.texts[0]),
        tool_action=str(v.tool_actions[0]),
        arguments_json=data.arguments[0],
        tool_signature=str(v.tool_signatures[0]),
        entities=tuple(sorted(v.entities[0])),
        subgoal=str(v.subgoals[0]),
        source=str(v.sources[0]),
        cost=int(v.costs[0]),
    )
    return row, np.ascontiguousarray(v.embeddings[0], dtype="<f4")


def render(result: dict[str, Any]) -> str:
    a, f, st = result["add_cpu"], result["floor_cpu"], result["statements_cpu"]
    lines = [
        f"add vs plain sqlite3 insert at {result['steps_before']} steps "
        f"(encoder {result['encoder']}), CPU per call:",
        "",
        "| path | n | p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|",
        f"| Memory.add(text) | {a['n']} | {a['p50_ms']:.3f} | {a['p99_ms']:.3f} | "
        f"{a['max_ms']:.3f} |",
        f"| sqlite3 INSERT of the row (floor) | {f['n']} | {f['p50_ms']:.3f} | "
        f"{f['p99_ms']:.3f} | {f['max_ms']:.3f} |",
        f"| the add's statements alone (sqlite3) | {st['n']} | {st['p50_ms']:.3f} | "
        f"{st['p99_ms']:.3f} | {st['max_ms']:.3f} |",
        "",
        f"ratio: p50 {result['p50_ratio']:.2f}x, p99 {result['p99_ratio']:.2f}x; "
        f"the add's statements alone: p50 {result['statements_p50_ratio']:.2f}x the floor",
        "",
        f"where an add's CPU goes ({result['profiled_adds']} profiled adds; cProfile inflates "
        "Python-heavy parts):",
    ]
    lines += [f"- {p['part']}: {p['share']:.0%}" for p in result["where_the_add_goes"]]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=50_000)
    ap.add_argument("--adds", type=int, default=300)
    ap.add_argument("--profile-adds", type=int, default=200)
    ap.add_argument("--encoder", default="hashing")
    ap.add_argument("--work-dir", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="osumem-add-floor-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        result = run(args.steps, args.adds, args.profile_adds, args.encoder, work)
    print(json.dumps(result, indent=2) if args.json else render(result))


if __name__ == "__main__":
    main()
