#!/usr/bin/env python3
"""Follow the README top to bottom on a fresh clone, running every command it shows.

    python3 scripts/readme_walk.py                 # clone HEAD into a temporary folder, walk
    python3 scripts/readme_walk.py --keep DIR      # walk in DIR and leave it there
    python3 scripts/readme_walk.py --list          # print the blocks and what the walk does

What it runs: every fenced ```bash and ```python block of README.md, in order, in a
fresh clone of the repository's committed HEAD, as a reader would type them: one
shell after another in the clone's root, the clone's ``.venv/bin`` first on PATH
(the README says to activate it), exported variables carried from block to block,
background processes (a server started with ``&``) left running until the walk ends.
Python blocks run with the clone's ``python``. A block fails on any command that
fails (``set -euo pipefail``); the walk stops at the first failure and exits 1.

What it does not run, always said in its output:

- a block right after ``<!-- readme-walk: skip (why) -->``: the reason is printed;
- a block that names a real-data file (``gpt-4o-airline.json``, ``toolbench/``,
  ``locomo10.json``) when
  ``../shared/data`` is absent beside the repository: skipped, saying which file. With
  the data present, those names are links in the clone to ``../shared/data``.

``<!-- readme-walk: may-fail (why) -->`` before a block runs it without stopping on
errors, for commands the README shows failing on purpose; ``<!-- readme-walk: data
(why) -->`` marks a block that needs the real data without naming it (it reads what an
earlier real-data block wrote).

Nothing here needs more than the standard library. Output: one line per block (ok,
skip, FAIL with the block's last output lines) and a summary; ``--json FILE`` writes
the same as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: README names of real data → where the data folder beside the repository holds them.
DATA = {
    "gpt-4o-airline.json": "data/taubench/gpt-4o-airline.json",
    "toolbench/": "data/toolbench",
    # five of LoCoMo's ten conversations, in the layout of the full locomo10.json
    "locomo10.json": "data/locomo/locomo-dev.json",
}
FENCE = re.compile(r"^```(bash|sh|python)\s*$")
DIRECTIVE = re.compile(r"^<!--\s*readme-walk:\s*(skip|may-fail|data)\s*(?:\((.*)\))?\s*-->\s*$")
BLOCK_TIMEOUT = 1200.0


@dataclass
class Block:
    """One fenced block of the README."""

    line: int
    kind: str
    text: str
    heading: str
    directive: str = ""
    reason: str = ""


@dataclass
class Outcome:
    """What the walk did with one block."""

    line: int
    heading: str
    status: str  # ok | skip | fail
    seconds: float = 0.0
    reason: str = ""
    tail: list[str] = field(default_factory=list)


def blocks(readme: Path) -> list[Block]:
    """The runnable blocks of ``readme``, in order, with their directives."""
    out: list[Block] = []
    lines = readme.read_text(encoding="utf-8").splitlines()
    heading, previous, i = "", "", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#") and not line.startswith("#!"):
            heading = line.strip()
        fence = FENCE.match(line)
        if fence is None:
            if line.startswith("```"):  # another kind of block: skip to its end
                i += 1
                while i < len(lines) and not lines[i].startswith("```"):
                    i += 1
            if line.strip():
                previous = line.strip()
            i += 1
            continue
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        block = Block(line=start, kind=fence.group(1), text="\n".join(body) + "\n", heading=heading)
        directive = DIRECTIVE.match(previous)
        if directive is not None:
            block.directive, block.reason = directive.group(1), (directive.group(2) or "").strip()
            if block.directive == "skip" and not block.reason:
                raise SystemExit(
                    f"README.md:{start}: 'readme-walk: skip' needs a reason: skip (why)"
                )
        out.append(block)
        previous = ""
        i += 1
    return out


def needed_data(block: Block) -> list[str]:
    """The real-data names ``block`` uses (all of them for a ``data`` block)."""
    if block.directive == "data":
        return list(DATA)
    return [name for name in DATA if name in block.text]


def clone(into: Path) -> Path:
    """A fresh clone of the repository's HEAD in ``into/osumem``, with the data folder
    beside it (a link) and the README's data names linked inside it."""
    target = into / "osumem"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True)
    shared = ROOT.parent / "shared"
    if shared.exists() and not (into / "shared").exists():
        (into / "shared").symlink_to(shared.resolve(), target_is_directory=True)
    for name, where in DATA.items():
        source = into / "shared" / where
        link = target / name.rstrip("/")
        if source.exists() and not link.exists():
            link.symlink_to(source, target_is_directory=source.is_dir())
    return target


class Walk:
    """Runs blocks in one clone, carrying exported variables and the working folder."""

    def __init__(self, clone_dir: Path, work: Path) -> None:
        self.dir = clone_dir
        self.work = work
        self.state = work / "state.sh"
        self.state.write_text(f"cd {clone_dir}\n", encoding="utf-8")
        self.groups: list[int] = []
        self.env = {
            **os.environ,
            "PATH": f"{clone_dir / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "OSUMEM_CACHE_DIR": str(work / "cache"),  # a fresh clone has no cache either
            "HF_HUB_OFFLINE": "1",
        }
        for name in ("VIRTUAL_ENV", "PYTHONPATH", "OSUMEM_TOKEN"):
            self.env.pop(name, None)

    def run(self, n: int, block: Block) -> Outcome:
        missing = [d for d in needed_data(block) if not (self.dir / d.rstrip("/")).exists()]
        if block.directive == "skip":
            return Outcome(block.line, block.heading, "skip", reason=block.reason)
        if missing:
            why = ", ".join(
                f"{d} (../shared/data/{DATA[d].removeprefix('data/')})" for d in missing
            )
            return Outcome(block.line, block.heading, "skip", reason=f"needs {why}: absent")
        script = self.work / f"block{n:02d}.{'py' if block.kind == 'python' else 'sh'}"
        script.write_text(block.text, encoding="utf-8")
        strict = "" if block.directive == "may-fail" else "set -euo pipefail\n"
        body = f"python {script}\n" if block.kind == "python" else f"source {script}\n"
        driver = (
            f"source {self.state}\n{strict}{body}"
            f'set +e\n{{ export -p; echo cd "$(pwd)"; }} > {self.state}.next\n'
        )
        log = self.work / f"block{n:02d}.log"
        started = time.monotonic()
        with log.open("w", encoding="utf-8") as out:
            proc = subprocess.Popen(
                ["bash", "--noprofile", "--norc", "-c", driver],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # its background processes: one group to stop
            )
            self.groups.append(proc.pid)
            try:
                code = proc.wait(timeout=BLOCK_TIMEOUT)
            except subprocess.TimeoutExpired:
                code = -1
        seconds = time.monotonic() - started
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        carried = Path(f"{self.state}.next")
        if carried.exists() and carried.stat().st_size:
            self.state.write_text(_portable(carried.read_text(encoding="utf-8")), encoding="utf-8")
        if code != 0 and block.directive != "may-fail":
            reason = "timed out" if code == -1 else f"exit status {code}"
            return Outcome(block.line, block.heading, "fail", seconds, reason, tail)
        return Outcome(block.line, block.heading, "ok", seconds, block.reason)

    def stop(self) -> None:
        """Stop what the blocks left running (their process groups only)."""
        for group in self.groups:
            try:
                os.killpg(group, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                continue
        deadline = time.monotonic() + 15
        for group in self.groups:
            while time.monotonic() < deadline:
                try:
                    os.killpg(group, 0)
                except (ProcessLookupError, PermissionError):
                    break
                time.sleep(0.2)
            else:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)


def _portable(exported: str) -> str:
    """``export -p`` output without the variables bash sets itself each time."""
    skip = ("declare -x OLDPWD", "declare -x PWD=", "declare -x SHLVL=", "declare -x _=")
    return "\n".join(line for line in exported.splitlines() if not line.startswith(skip)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="walk in this folder and keep it")
    parser.add_argument("--list", action="store_true", help="list the blocks, run nothing")
    parser.add_argument("--json", type=Path, help="write the outcomes as JSON")
    args = parser.parse_args(argv)
    found = blocks(ROOT / "README.md")
    if args.list:
        for b in found:
            what = b.directive or (
                "data: " + ", ".join(needed_data(b)) if needed_data(b) else "run"
            )
            print(f"README.md:{b.line:<4} {b.kind:<6} {what:<28} {b.heading} {b.reason}")
        return 0
    work = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="readme-walk-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"readme walk: {len(found)} blocks, clone in {work / 'osumem'}", flush=True)
    walk = Walk(clone(work), work)
    outcomes: list[Outcome] = []
    began = time.monotonic()
    try:
        for n, block in enumerate(found):
            outcome = walk.run(n, block)
            outcomes.append(outcome)
            label = {"ok": "ok  ", "skip": "skip", "fail": "FAIL"}[outcome.status]
            took = f" {outcome.seconds:.1f} s" if outcome.status != "skip" else ""
            why = f" ({outcome.reason})" if outcome.reason else ""
            print(f"[{label}] README.md:{block.line} {block.heading}{took}{why}", flush=True)
            if outcome.status == "fail":
                for line in outcome.tail:
                    print(f"    | {line}")
                break
    finally:
        walk.stop()
    counts = {s: sum(o.status == s for o in outcomes) for s in ("ok", "skip", "fail")}
    print(
        f"readme walk: {counts['ok']} ran, {counts['skip']} skipped, {counts['fail']} failed, "
        f"{len(found) - len(outcomes)} not reached, {time.monotonic() - began:.0f} s"
    )
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=2), encoding="utf-8")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if counts["fail"] or len(outcomes) < len(found) else 0


if __name__ == "__main__":
    sys.exit(main())
