"""Viewer page at scale: the size of `osumem view`'s page and its render time in
headless Chromium (Debian's, through Playwright), for a namespace of N steps, against a
100-step page measured in the same browser (the baseline).

    PYTHONPATH=src:tests python benchmarks/viewer_page.py --steps 10000 --runs 5

Render time is the time from navigation start until the page has drawn its timeline,
list and query result for the first time (``performance.now()`` when the page marks
itself ready); each run opens a fresh page. The store is built with the hashing encoder
(one add of agent-like steps, see tests/browser_helpers.py); the page carries a query's
answer and explanation. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from browser_helpers import build_store, chromium
from osumem.memory import Memory
from osumem.memory.contents import page_data
from osumem.serve.ui import standalone_page

QUERY = "R007 baggage refund for P003"


def _page(folder: Path, n: int) -> tuple[Path, float]:
    store = build_store(folder / f"s{n}.db", n)
    start = time.process_time()
    with Memory.open(store, read_only=True) as mem:
        html = standalone_page(page_data(mem, "agent", query=QUERY, budget=256))
    cpu = time.process_time() - start
    path = folder / f"view-{n}.html"
    path.write_text(html, encoding="utf-8")
    return path, cpu


def _render(ctx: object, path: Path) -> dict[str, float]:
    page = ctx.new_page()  # type: ignore[attr-defined]
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    out = {
        "ready_ms": page.evaluate("window.osumemViewer.readyAt"),
        "script_ms": page.evaluate("window.osumemViewer.renderMs"),
    }
    page.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        big, big_cpu = _page(folder, args.steps)
        small, _ = _page(folder, 100)
        runs: dict[str, list[dict[str, float]]] = {"big": [], "small": []}
        with chromium() as ctx:
            _render(ctx, small)  # warm the browser
            for _ in range(args.runs):
                runs["small"].append(_render(ctx, small))
                runs["big"].append(_render(ctx, big))

        def median(name: str, key: str) -> float:
            return statistics.median(r[key] for r in runs[name])

        result = {
            "steps": args.steps,
            "page_bytes": big.stat().st_size,
            "page_build_cpu_s": round(big_cpu, 3),
            "ready_ms_median": median("big", "ready_ms"),
            "ready_ms_runs": [r["ready_ms"] for r in runs["big"]],
            "script_ms_median": median("big", "script_ms"),
            "baseline_100_steps_ready_ms_median": median("small", "ready_ms"),
            "ratio_to_baseline": median("big", "ready_ms") / median("small", "ready_ms"),
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
