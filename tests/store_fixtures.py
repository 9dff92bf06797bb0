"""A small two-namespace store the export, explain and inspect tests share."""

from __future__ import annotations

import json

from osumem.memory import Memory

ENCODER = "hashing:d64"


def turn(k: int) -> list[dict]:
    """One agent turn: a user request, the assistant's words with a tool call, and the
    call's result."""
    call = "get_reservation" if k % 3 else "cancel_reservation"
    return [
        {"role": "user", "content": f"turn {k}: check reservation R{k % 5} for P{k % 7}"},
        {
            "role": "assistant",
            "content": f"Looking up R{k % 5}.",
            "tool_calls": [
                {
                    "id": f"c{k}",
                    "type": "function",
                    "function": {
                        "name": call,
                        "arguments": json.dumps({"reservation_id": f"R{k % 5}", "n": k}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"c{k}", "content": f"R{k % 5}: flight HAT{k:03d}"},
    ]


def build(path, *, held: bool = True) -> None:
    """A store with two namespaces, many add batches, a logged (digested) add, and a
    held tool call."""
    with Memory.open(path, encoder=ENCODER) as mem:
        for k in range(24):
            mem.add_messages(turn(k), namespace="trip")  # one batch per turn
        mem.add_messages(turn(99), namespace="trip", on_duplicate="skip")  # a digest
        for k in range(6):
            mem.add_messages(turn(k) + turn(k + 50), namespace="other")
        if held:
            mem.add_messages(turn(7)[:2], namespace="other")  # the call waits: held
