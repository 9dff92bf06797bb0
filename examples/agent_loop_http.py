"""An agent loop that keeps its trajectory in a running OSU-Mem server.

Before each model call it retrieves context for the new user message; after each turn
it stores the turn's messages. Start a server first:

    export OSUMEM_TOKEN=$(python -c "import secrets; print(secrets.token_hex(16))")
    osumem serve --store agent-memory.db --transport http &
    python examples/agent_loop_http.py --server http://127.0.0.1:8765

`call_model` is a stand-in that answers with a canned tool call; replace it with your
model client (any chat-completions API takes the same `messages`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from osumem.serve.client import MemoryClient

USER_TURNS = [
    "I need to change reservation R1001 to a later flight.",
    "The passenger on R1001 is Ana Diaz; she also has reservation R2002.",
    "Add one checked bag to R2002, paid with the voucher.",
    "Which card did I use for R1001 again?",
]


def call_model(messages: list[dict[str, Any]], turn: int) -> list[dict[str, Any]]:
    """Stand-in for the model: one tool call, its (fake) result, and a reply."""
    reservation = "R1001" if turn % 2 == 0 else "R2002"
    call_id = f"call-{turn}"
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": "get_reservation",
                        "arguments": json.dumps({"reservation_id": reservation}),
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": call_id,
            "content": f"{reservation}: flight HAT{100 + turn}, paid with card ending 4242",
        },
        {"role": "assistant", "content": f"Done, I checked {reservation}."},
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="http://127.0.0.1:8765")
    parser.add_argument("--namespace", default="agent-demo")
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--turns", type=int, default=len(USER_TURNS))
    args = parser.parse_args()

    with MemoryClient(args.server) as memory:  # token from OSUMEM_TOKEN
        for turn, text in enumerate(USER_TURNS[: args.turns]):
            user = {"role": "user", "content": text}
            context = memory.retrieve(text, args.budget, namespace=args.namespace)
            prompt = [
                {"role": "system", "content": "You are an airline agent.\n" + context.render()},
                user,
            ]
            print(f"--- turn {turn}: {text}\n{context.render()}\n")
            reply = call_model(prompt, turn)
            stored = memory.add_messages([user, *reply], namespace=args.namespace)
            print(
                f"stored {len(stored['step_ids'])} steps "
                f"({stored['steps_in_namespace']} in {args.namespace!r})\n"
            )


if __name__ == "__main__":
    main()
