"""Helpers of the browser tests and the viewer benchmark: a store of agent-like steps
and Debian's Chromium driven by Playwright (``executable_path``; no browser is ever
downloaded)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

#: Debian's Chromium (``apt-get install chromium``).
CHROMIUM = os.environ.get("OSUMEM_CHROMIUM", "/usr/bin/chromium")
#: Flags for a closed network: no background traffic a headless browser would try.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: Where the tests leave screenshots: $OSUMEM_TEST_ARTIFACTS, else tests/artifacts/
#: (ignored by git).
ARTIFACTS = Path(os.environ.get("OSUMEM_TEST_ARTIFACTS", Path(__file__).parent / "artifacts"))

TOOLS = ["get_reservation", "cancel_reservation", "update_baggage", "search_flights", "refund"]


def need_browser() -> Any:
    """Playwright's sync API, or a skip naming what is missing."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium not found at {CHROMIUM} (apt-get install chromium)")
    return pytest.importorskip("playwright.sync_api")


@contextmanager
def chromium(width: int = 1400, height: int = 900) -> Iterator[Any]:
    """A fresh headless Chromium context (its own user-data folder, removed after)."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="osumem-chromium-")
    try:
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                args=FLAGS,
                headless=True,
                viewport={"width": width, "height": height},
            )
            try:
                yield ctx
            finally:
                ctx.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def agent_steps(n: int) -> list[Any]:
    """``n`` steps of an airline agent: user turns, tool calls over reservations that
    recur for a while and then change, passengers and flights, answers; a subgoal per
    user turn (so every view forms overlapping units)."""
    from osumem.types import Step

    steps = []
    for p in range(n):
        turn, kind = divmod(p, 3)
        res, pax = f"R{(turn * 7) % 17 + 100 * (turn // 400):03d}", f"P{turn % 11:03d}"
        tool = TOOLS[turn % 3 if turn % 10 else 3 + turn // 10 % 2]
        sub = f"trip:sg{turn}"
        if kind == 0:
            steps.append(
                Step(
                    role="user",
                    text=f"{pax} asks about {res}",
                    entities=frozenset({res, pax}),
                    subgoal=sub,
                    cost=12,
                )
            )
        elif kind == 1:
            steps.append(
                Step(
                    role="tool",
                    text=f"call {tool}({res}) result: flight HAT{turn % 500:03d} for {pax}",
                    tool_action=tool,
                    tool_signature=f"{tool}(reservation_id)",
                    entities=frozenset({res, pax, f"HAT{turn % 500:03d}"}),
                    subgoal=sub,
                    cost=30,
                )
            )
        else:
            steps.append(
                Step(
                    role="assistant",
                    text=f"Done: {tool} for {res}.",
                    entities=frozenset({res}),
                    subgoal=sub,
                    cost=8,
                )
            )
    return steps  # fmt: skip


def build_store(path: Path, n: int, namespace: str = "agent") -> Path:
    """A store holding ``n`` agent steps in one namespace (hashing encoder, one add)."""
    from osumem.memory import Memory

    with Memory.open(path, encoder="hashing:d64") as mem:
        mem.add_steps(agent_steps(n), namespace=namespace)
        mem.retrieve("warm up", 8, namespace=namespace)  # build once, snapshot at close
    return path
