#!/usr/bin/env python3
"""The bars of "no stalls in the agent loop", each measured by its own command, in one table.

    python3 benchmarks/stall_bars.py --bulk-file gpt-4o-airline.json --out DIR
    python3 benchmarks/stall_bars.py --only serve,add,cold

Runs, one after another (each measures CPU on the shared cores, so never two at once),
the commands that docs/decisions.md names for each bar, as a user would (a fresh
process each, from the repository root, with this interpreter), and prints one table:
the bar, what came out, whether it is met. With ``--out`` it also writes every
command's own JSON output there (``stall_bars.json``) and the table
(``stall_bars.md``). Run it on an idle machine: the scale and serve parts take a few
minutes each.

Groups (``--only``): ``scale`` (100,000 steps, ``osumem`` and ``osumem_adaptive``,
1,000 agent rounds, hnswlib in the same run), ``bulk`` (the first retrieve after one
50,000-step ingest of real text: needs ``--bulk-file``, a tau-bench results file),
``serve`` (8 clients, hashing encoder, 10,000 steps, the echo endpoint in the same
run), ``add`` (an add against the sqlite3 floor at 50,000 steps), ``cold`` (a cold
``osumem query`` against ``import numpy``), ``recall`` (the step index's recall@64
against the exact top 64: clustered, unclustered and repeated steps), ``selections``
(the tests that the exact path's selections did not change).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
METHODS = ("osumem", "osumem_adaptive")

#: One verdict: (bar, measured, met).
Verdict = tuple[str, str, bool]


def _scale_cmd(out: Path, bulk_file: str | None) -> list[str]:
    return [
        PY, "-m", "osumem", "bench", "scale", "--sizes", "100000",
        "--methods", ",".join(METHODS), "--memory-max", "0", "--out", str(out),
    ]  # fmt: skip


def _bulk_cmd(out: Path, bulk_file: str | None) -> list[str]:
    assert bulk_file is not None
    return [
        PY, "-m", "osumem", "bench", "scale", "--sizes", "1000",
        "--methods", ",".join(METHODS), "--memory-max", "1000", "--agent-max", "0",
        "--bulk-sizes", "50000", "--bulk-file", bulk_file, "--out", str(out),
    ]  # fmt: skip


def _serve_cmd(out: Path, bulk_file: str | None) -> list[str]:
    return [
        PY, "-m", "osumem", "bench", "serve", "--steps", "10000", "--clients", "8",
        "--encoder", "hashing", "--ops", "300", "--work-dir", str(out), "--json",
    ]  # fmt: skip


def _add_cmd(out: Path, bulk_file: str | None) -> list[str]:
    return [
        PY, str(ROOT / "benchmarks" / "add_floor.py"), "--steps", "50000",
        "--adds", "300", "--work-dir", str(out), "--json",
    ]  # fmt: skip


def _cold_cmd(out: Path, bulk_file: str | None) -> list[str]:
    return [PY, str(ROOT / "benchmarks" / "cold_query.py"), "--runs", "9", "--json"]


def _recall_cmd(out: Path, bulk_file: str | None) -> list[str]:
    return [
        PY, str(ROOT / "scripts" / "ann_recall_check.py"), "--n", "25000",
        "--queries", "200", "--ks", "64", "--json",
    ]  # fmt: skip


def _selections_cmd(out: Path, bulk_file: str | None) -> list[str]:
    return [
        PY, "-m", "pytest", "-q", "-p", "no:cacheprovider",
        str(ROOT / "tests" / "memory" / "test_memory_ann.py"),
        str(ROOT / "tests" / "memory" / "test_memory_background_builds.py"),
    ]  # fmt: skip


def _rows_of(result: dict[str, Any]) -> dict[tuple[int, str], dict[str, Any]]:
    return {(r["n"], r["method"]): r for r in result["rows"]}


def scale_verdicts(result: dict[str, Any]) -> list[Verdict]:
    """``osumem bench scale``'s 100,000-step rows (``scale.json``) against the bars."""
    rows = _rows_of(result)
    ratios = {(r["n"], r["method"]): r for r in result["ratios"]}
    ref = rows[(100000, "ann_hnsw")]["retrieve"]["p50_ms"]
    out: list[Verdict] = []
    for method in METHODS:
        row = rows[(100000, method)]
        cpu, wall = row["agent_step"], row["agent_step_wall"]
        out.append(
            (
                f"100k, `{method}`: add+retrieve p99 ≤ 10 ms",
                f"{cpu['p99_ms']:.2f} ms CPU ({wall['p99_ms']:.2f} wall), "
                f"p50 {cpu['p50_ms']:.2f}, {cpu['rounds']} rounds",
                cpu["p99_ms"] <= 10.0,
            )
        )
        out.append(
            (
                f"100k, `{method}`: no call over 50 ms",
                f"max {cpu['max_ms']:.2f} ms CPU ({wall['max_ms']:.2f} wall)",
                max(cpu["max_ms"], wall["max_ms"]) <= 50.0,
            )
        )
        ratio = ratios[(100000, method)]["retrieve_p50_over_ann"]
        out.append(
            (
                f"100k, `{method}`: retrieve p50 ≤ 2× hnswlib",
                f"{row['retrieve']['p50_ms']:.3f} ms vs {ref:.3f} ms = {ratio:.2f}×",
                ratio <= 2.0,
            )
        )
    return out


def bulk_verdicts(result: dict[str, Any]) -> list[Verdict]:
    """The bulk rows of ``osumem bench scale --bulk-sizes 50000``."""
    out: list[Verdict] = []
    for row in result["rows"]:
        if "first_retrieve_cpu_s" not in row:
            continue
        cpu, wall = row["first_retrieve_cpu_s"], row["first_retrieve_wall_s"]
        out.append(
            (
                f"first retrieve after one {row['n']:,}-step ingest ({row['texts']} text), "
                f"{row['method']}: ≤ 1 s",
                f"{cpu * 1000:.1f} ms CPU, {wall * 1000:.1f} ms wall "
                f"(the ingest {row['ingest_cpu_s']:.1f} s CPU)",
                max(cpu, wall) <= 1.0,
            )
        )
    return out


def serve_verdicts(result: dict[str, Any]) -> list[Verdict]:
    """``osumem bench serve --json``: requests/s against the echo endpoint's."""
    con, echo = result["concurrent"], result["echo"]
    cpu = con.get("server_cpu_ms_per_op")
    return [
        (
            "`osumem serve`, 8 clients, hashing encoder, 10k steps: ≥ .5× echo",
            f"{con['throughput_ops_s']:.0f} ops/s vs echo {echo['throughput_ops_s']:.0f} = "
            f"{echo['ratio']:.2f}×"
            + (f" (server CPU {cpu:.2f} ms per operation)" if cpu is not None else ""),
            echo["ratio"] >= 0.5,
        )
    ]


def add_verdicts(result: dict[str, Any]) -> list[Verdict]:
    """``benchmarks/add_floor.py --json``: the add's CPU p50 against the floor's."""
    a, f = result["add_cpu"], result["floor_cpu"]
    return [
        (
            "add CPU p50 ≤ 2× the sqlite3 floor at 50k",
            f"{a['p50_ms']:.3f} ms vs {f['p50_ms']:.3f} ms = {result['p50_ratio']:.2f}× "
            f"(the add's statements alone {result['statements_p50_ratio']:.2f}×)",
            result["p50_ratio"] <= 2.0,
        )
    ]


def cold_verdicts(result: dict[str, Any]) -> list[Verdict]:
    """``benchmarks/cold_query.py --json``: a cold query against ``import numpy``."""
    q, n = result["query"], result["numpy"]
    return [
        (
            "cold `osumem query` ≤ 2× `import numpy`",
            f"CPU {q['cpu_ms']:.0f} vs {n['cpu_ms']:.0f} ms = {result['ratio_cpu']:.2f}×, "
            f"wall {q['wall_ms']:.0f} vs {n['wall_ms']:.0f} ms = {result['ratio_wall']:.2f}× "
            f"(medians of {result['runs']})",
            max(result["ratio_cpu"], result["ratio_wall"]) <= 2.0,
        )
    ]


def recall_verdicts(result: dict[str, Any]) -> list[Verdict]:
    """``scripts/ann_recall_check.py --json``: recall@64 over every answer."""
    out: list[Verdict] = []
    for name in ("clustered", "gaussian", "repeated"):
        every = result[name]["64"]["all"]
        out.append(
            (
                f"ANN recall@64 vs exact ≥ .95, {name} vectors",
                f"mean {every['mean']:.3f} (min {every['min']:.3f}) over {every['answers']} "
                f"answers; without the safeguard "
                f"{result[name]['64']['without_safeguard']['mean']:.3f}",
                every["mean"] >= 0.95,
            )
        )
    return out


#: group → (command, where its JSON is (None: its standard output; else a file name
#: inside its folder), verdicts)
GROUPS: dict[
    str,
    tuple[
        Callable[[Path, str | None], list[str]],
        str | None,
        Callable[[dict[str, Any]], list[Verdict]] | None,
    ],
] = {
    "scale": (_scale_cmd, "scale.json", scale_verdicts),
    "bulk": (_bulk_cmd, "scale.json", bulk_verdicts),
    "serve": (_serve_cmd, None, serve_verdicts),
    "add": (_add_cmd, None, add_verdicts),
    "cold": (_cold_cmd, None, cold_verdicts),
    "recall": (_recall_cmd, None, recall_verdicts),
    "selections": (_selections_cmd, None, None),
}


def run_group(name: str, work: Path, bulk_file: str | None) -> tuple[list[Verdict], Any]:
    """Run one group's command; its verdicts and its own output (parsed JSON, or for
    the tests the last line pytest printed)."""
    make, json_file, verdicts = GROUPS[name]
    if name == "bulk" and bulk_file is None:
        return [
            ("first retrieve after one 50k-step ingest ≤ 1 s", "not run: needs --bulk-file", False)
        ], None
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    cmd = make(folder, bulk_file)
    print(f"stall bars: {name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    print(f"stall bars: {name}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    if verdicts is None:  # the tests: pass or fail
        last = (done.stdout.strip().splitlines() or [""])[-1]
        return [
            (
                "selections unchanged where the exact path answered before",
                last,
                done.returncode == 0,
            )
        ], last
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        failed = f"the command failed (exit {done.returncode}): {tail[0]}"
        print(f"stall bars: {name}: {failed}", file=sys.stderr, flush=True)
        return [(f"{name}: every bar of the group", failed, False)], {"failed": failed}
    text = (folder / json_file).read_text() if json_file else done.stdout
    result = json.loads(text)
    return verdicts(result), result


def table(verdicts: list[Verdict]) -> str:
    lines = ["| bar | measured | met |", "| --- | --- | --- |"]
    lines += [
        f"| {bar} | {measured} | {'yes' if met else 'no'} |" for bar, measured, met in verdicts
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--only", default=",".join(GROUPS), help="comma-separated groups (default: all)"
    )
    ap.add_argument("--bulk-file", default=None, help="a tau-bench results file (real step texts)")
    ap.add_argument("--out", type=Path, default=None, help="folder for stall_bars.json and .md")
    args = ap.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in GROUPS]
    if unknown:
        ap.error(f"--only: unknown group(s) {', '.join(unknown)}; known: {', '.join(GROUPS)}")
    if args.bulk_file is not None and not Path(args.bulk_file).is_file():
        ap.error(f"--bulk-file: {args.bulk_file}: no such file")
    verdicts: list[Verdict] = []
    raw: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="osumem-stall-bars-") as tmp:
        for name in names:
            got, raw[name] = run_group(name, Path(tmp), args.bulk_file)
            verdicts.extend(got)
    md = table(verdicts)
    print(md)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "stall_bars.md").write_text(md + "\n")
        (args.out / "stall_bars.json").write_text(
            json.dumps({"verdicts": verdicts, "outputs": raw}, indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
