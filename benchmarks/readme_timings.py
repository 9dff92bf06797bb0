#!/usr/bin/env python3
"""Measure the timings the README states, wall and CPU, so anyone can check them.

    python3 benchmarks/readme_timings.py                  # each command 3 times
    python3 benchmarks/readme_timings.py --repeat 5 --only bench,reproduce
    python3 benchmarks/readme_timings.py --install        # also a fresh venv + install
    python3 benchmarks/readme_timings.py --json timings.json

Run it on an idle machine from the repository root, with the test command's virtual
environment in ``.venv`` (the README's "Run the tests" command makes it): numbers
measured while other work shares the cores are noise. Each command runs in a fresh
temporary folder; its wall time comes from a monotonic clock and its CPU time (user +
system, the command and all its child processes, worker processes that outlive it
included: this process is their subreaper on Linux) from ``resource.getrusage``. It
prints, per command, the range over the runs (``min–max``), which is how the README
states them, and the CPU count of the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv" / "bin"

#: name → (what the README states it about, command run in a fresh folder)
COMMANDS: dict[str, tuple[str, list[str]]] = {
    "bench": (
        "the first command's run: `osumem bench synthetic`",
        [str(VENV / "osumem"), "bench", "synthetic", "--quiet"],
    ),
    "reproduce": (
        "`osumem reproduce synthetic` with default arguments",
        [str(VENV / "osumem"), "reproduce", "synthetic", "--out", "D", "--quiet"],
    ),
    "tests": (
        "the tests alone: `.venv/bin/python -m pytest`",
        [str(VENV / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests")],
    ),
}
INSTALL = (
    "the first command's install: a fresh venv and `pip install -e '.[bench]'`",
    ["bash", "-c", f"python3 -m venv v && v/bin/pip install -q -e '{ROOT}[bench]'"],
)


def _become_subreaper() -> None:
    """On Linux, adopt the command's orphaned descendants (a worker pool left behind
    when the command exits), so their CPU time is counted when they are reaped."""
    if sys.platform != "linux":
        return
    import ctypes

    pr_set_child_subreaper = 36
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0)


def _reap_orphans(limit_s: float = 60.0) -> None:
    """Wait for the adopted descendants to exit (their CPU time then counts)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)


#: Lines of a failed command's output printed with the failure.
FAILED_TAIL = 40


def measure(command: list[str]) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of one run of ``command`` in a fresh folder."""
    folder = Path(tempfile.mkdtemp(prefix="readme-timing-"))
    log = folder.with_name(folder.name + ".log")  # beside the folder: the command's output
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        with log.open("wb") as out:
            code = subprocess.run(
                command, cwd=folder, stdout=out, stderr=subprocess.STDOUT
            ).returncode
        wall = time.monotonic() - started
        _reap_orphans()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if code:
            tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-FAILED_TAIL:]
            raise SystemExit(
                f"{' '.join(command)} failed (exit status {code}); the end of its output:\n"
                + "\n".join(tail)
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        log.unlink(missing_ok=True)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per command (default 3)")
    parser.add_argument("--only", default=",".join(COMMANDS), help="comma-separated names")
    parser.add_argument("--install", action="store_true", help="also time a fresh install")
    parser.add_argument("--json", type=Path, help="write every run as JSON")
    args = parser.parse_args(argv)
    if not VENV.is_dir():
        parser.error(f"{VENV} not found: run the README's test command first")
    chosen = {k: COMMANDS[k] for k in args.only.split(",") if k}
    if args.install:
        chosen = {"install": INSTALL, **chosen}
    _become_subreaper()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs; {args.repeat} run(s) each; load average {load}")
    results: dict[str, list[dict[str, float]]] = {}
    for name, (about, command) in chosen.items():
        runs = []
        for _ in range(args.repeat):
            wall, cpu = measure(command)
            runs.append({"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)})
            print(f"  {name}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
        results[name] = runs
        walls = [r["wall_s"] for r in runs]
        cpus = [r["cpu_s"] for r in runs]
        print(
            f"{name} ({about}): {min(walls):.0f}–{max(walls):.0f} s wall, "
            f"{min(cpus):.0f}–{max(cpus):.0f} s CPU",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
