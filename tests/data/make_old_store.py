"""Writes ``old_store.db.gz`` and ``old_store_answers.json`` (tests/data): a memory
store written by osumem 0.1.0 at commit 559dc48 (before the store interface was split
into backends) and what it answered, for ``tests/memory/backends/test_store_compat.py``.

Run from a checkout of that commit: ``python make_old_store.py OUT_DIR``. The store has
four namespaces added in several batches, held messages (a tool call without its
result, in two namespaces), two log digests and retriever snapshots (written at
close); the answers are those of a sequence of opens with several methods, budgets and
causal cut-offs, each recorded as its positions, OSU handles and a SHA-256 of the
whole ``Retrieved.to_dict()``.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import shutil
import sys
from pathlib import Path

from osumem.memory import Memory

METHODS = ["osumem", "flat", "osumem_adaptive", "tree"]
BUDGETS = [32, 256]
QUERIES = [
    "Which reservation goes to Paris?",
    "How did the user pay for the seat change?",
    "gift card payment",
]
NAMESPACES = ["trip-paris", "trip-lisbon", "trip-oslo", "logs"]


def call(cid: str, name: str, **args: object) -> dict:
    return {
        "id": cid,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def trip_log(k: int, city: str, n: int) -> list[dict]:
    """A hand-written agent log: looking up, changing and paying for reservations."""
    msgs: list[dict] = []
    for i in range(n):
        rid = f"R{1000 + 7 * k + i}"
        msgs.append(
            {
                "role": "user",
                "content": f"Please look up reservation {rid} for my trip to {city} number {i}",
            }
        )
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call(f"c{k}_{i}", "get_reservation", reservation_id=rid)],
            }
        )
        answer = {
            "reservation_id": rid,
            "destination": city,
            "seat": f"{i}A",
            "payment": f"credit_card_{i % 3}",
        }
        msgs.append({"role": "tool", "tool_call_id": f"c{k}_{i}", "content": json.dumps(answer)})
        if i % 3 == 1:
            msgs.append(
                {
                    "role": "assistant",
                    "content": f"Reservation {rid} goes to {city}; shall I change seat {i}A?",
                }
            )
            msgs.append(
                {
                    "role": "user",
                    "content": f"Yes, move me to an aisle seat and pay with gift card G{i}",
                }
            )
            msgs.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        call(
                            f"d{k}_{i}",
                            "update_seat",
                            reservation_id=rid,
                            seat=f"{i}C",
                            payment=f"gift_card_G{i}",
                        )
                    ],
                }
            )
            msgs.append(
                {
                    "role": "tool",
                    "tool_call_id": f"d{k}_{i}",
                    "content": f"seat of {rid} is now {i}C, paid by gift card G{i}",
                }
            )
    return msgs


def write_store(path: Path) -> None:
    with Memory.open(path, encoder="hashing:d64") as mem:
        for k, city in enumerate(["Paris", "Lisbon", "Oslo"]):
            log = trip_log(k, city, 6)
            ns = f"trip-{city.lower()}"
            cut = [0, 7, 15, len(log)]
            for a, b in itertools.pairwise(cut):
                mem.add_messages(log[a:b], namespace=ns)
                mem.retrieve("reservation", 64, namespace=ns)  # builds / updates the retriever
        mem.add_messages(
            trip_log(9, "Rome", 2), namespace="logs", on_duplicate="skip", log_id="rome-log"
        )
        mem.add_messages(trip_log(8, "Bern", 1), namespace="logs", on_duplicate="skip")
        mem.retrieve("Rome", 64, namespace="logs")
        mem.add_messages(
            open_call("Book a flight to Madrid", "h1", "Madrid"), namespace="trip-oslo"
        )
        mem.add_messages(open_call("Anything for Vienna?", "h2", "Vienna"), namespace="held-only")


def open_call(request: str, cid: str, city: str) -> list[dict]:
    """A request and a tool call whose result has not arrived (held by the memory)."""
    call_msg = {
        "role": "assistant",
        "content": None,
        "tool_calls": [call(cid, "search_flights", destination=city)],
    }
    return [{"role": "user", "content": request}, call_msg]


def answers(path: Path) -> dict:
    out: dict = {"retrieve": [], "namespaces": {}}
    for method in METHODS:
        with Memory.open(path, method=method) as mem:
            for ns in NAMESPACES:
                n = mem.n_steps(ns)
                for q in QUERIES:
                    for b in BUDGETS:
                        for before in (None, n // 2):
                            r = mem.retrieve(q, b, namespace=ns, before=before)
                            d = r.to_dict()
                            out["retrieve"].append(
                                {
                                    "method": method,
                                    "namespace": ns,
                                    "query": q,
                                    "budget": b,
                                    "before": before,
                                    "positions": r.positions,
                                    "osus": [s["osus"] for s in d["steps"]],
                                    "sha256": hashlib.sha256(
                                        json.dumps(d, sort_keys=True).encode()
                                    ).hexdigest(),
                                }
                            )
            if method == METHODS[0]:
                out["namespaces"] = {
                    ns: {"steps": mem.n_steps(ns), "held": mem.held(ns)} for ns in mem.namespaces()
                }
    return out


def main() -> None:
    out = Path(sys.argv[1])
    work = out / "work.db"
    write_store(work)
    with open(work, "rb") as src, gzip.GzipFile(out / "old_store.db.gz", "wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    result = answers(work)
    rows = ",\n".join(json.dumps(r, sort_keys=True) for r in result["retrieve"])
    text = f'{{"namespaces": {json.dumps(result["namespaces"], sort_keys=True)},\n"retrieve": [\n{rows}\n]}}\n'
    (out / "old_store_answers.json").write_text(text)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{work}{suffix}").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
