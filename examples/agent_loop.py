"""A tool-using agent loop with OSU-Mem as its long-term memory, in process.

Each turn: retrieve the past steps that best support the current request under a token
budget, put them in the prompt, let the model act, then add the turn's messages to the
memory. The "model" here is a small scripted policy so the loop runs offline, with no
API key; swap ``scripted_model`` for a real chat-completions call. The memory uses the
light hashing encoder (no torch); pass ``encoder="sbert"`` (the ``sbert`` extra) for
real embeddings.

Run:  python examples/agent_loop.py [--store agent.db]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from osumem.memory import Memory

#: The tools the agent may call: name -> function of the arguments.
ORDERS = {"A-17": "blue kettle, shipped 2024-05-02", "B-42": "desk lamp, not shipped"}
TOOLS = {
    "get_order": lambda order_id: ORDERS.get(order_id, "no such order"),
    "refund_order": lambda order_id, reason: f"refund for {order_id} opened ({reason})",
}

#: The user's requests over one long session.
REQUESTS = [
    "Where is my order A-17?",
    "And what about B-42?",
    "The kettle from A-17 arrived broken, please refund it.",
    "Which of my orders was refunded, and why?",
]


def scripted_model(request: str, context: str, turn: int) -> dict[str, Any]:
    """Stand-in for an LLM: calls one tool per request, then answers from its result.

    Returns an OpenAI-format assistant message (with ``tool_calls`` or text)."""
    words = request.replace("?", " ").replace(".", " ").replace(",", " ").split()
    order = next((w for w in words if w in ORDERS), None)
    if "refund" in request and order:
        name, args = "refund_order", {"order_id": order, "reason": "arrived broken"}
    elif order:
        name, args = "get_order", {"order_id": order}
    else:  # nothing to look up: answer from the retrieved memory
        seen = [line for line in context.splitlines() if "refund_order" in line]
        answer = seen[0] if seen else "I found nothing about that in this session."
        return {"role": "assistant", "content": f"From earlier: {answer}"}
    call = {
        "id": f"call_{turn}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def run_tool(call: dict[str, Any]) -> dict[str, Any]:
    """Execute one tool call; its result is a ``role: tool`` message."""
    fn = call["function"]
    result = TOOLS[fn["name"]](**json.loads(fn["arguments"]))
    return {"role": "tool", "tool_call_id": call["id"], "content": result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", default=None, help="SQLite file (default: in memory)")
    parser.add_argument("--budget", type=int, default=128, help="context budget (tokens)")
    args = parser.parse_args()
    with Memory.open(args.store, encoder="hashing") as memory:
        for turn, request in enumerate(REQUESTS):
            user = {"role": "user", "content": request}
            # 1. retrieve before the model call (only earlier steps are visible)
            context = memory.retrieve(request, args.budget, namespace="session").render()
            # 2. the model acts; tool calls are executed and answered
            reply = scripted_model(request, context, turn)
            turn_messages = [user, reply]
            for call in reply.get("tool_calls", []):
                turn_messages.append(run_tool(call))
            # 3. add the whole turn to the memory (one transaction)
            memory.add_messages(turn_messages, namespace="session")
            print(f"--- turn {turn}: {request}")
            print(context if context.strip() else "(memory empty)")
            last = turn_messages[-1]
            print(f">>> {last.get('content')}\n")
        print(f"memory holds {memory.n_steps('session')} steps")


if __name__ == "__main__":
    main()
