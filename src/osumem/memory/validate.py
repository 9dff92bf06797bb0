"""Validation and message bookkeeping of the agent memory (boundary checks, held tool
calls, subgoal segments that continue across adds)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from osumem.errors import InvalidInputError
from osumem.memory.store import StepRow
from osumem.types import Step


class OversizedInputError(InvalidInputError):
    """A message or step text is longer than the memory's ``max_text_chars``."""


def continue_segments(steps: list[Step], users_before: int, source: str) -> list[Step]:
    """Renumber the reader's automatic subgoal labels (segment k = k-th user turn of
    this add) to continue the namespace's segment count across adds."""
    out, local = [], 0
    for s in steps:
        if s.role == "user":
            local += 1
        auto = f"{source}:sg{local}" if source else f"sg{local}"
        if s.subgoal == auto and users_before:
            k = users_before + local
            s = replace(s, subgoal=f"{source}:sg{k}" if source else f"sg{k}")
        out.append(s)
    return out


def check_message_sizes(messages: Sequence[Any], limit: int) -> None:
    """Reject a message whose content is longer than ``limit`` characters."""
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            continue  # the reader names the malformed message
        content = msg.get("content")
        size = len(content) if isinstance(content, str) else 0
        if isinstance(content, list):
            size = sum(len(str(p.get("text", ""))) for p in content if isinstance(p, Mapping))
        if size > limit:
            raise OversizedInputError(
                f"messages[{i}].content: {size} characters; max_text_chars is {limit}"
            )


#: The largest token cost one step may carry (a sanity bound: sums of costs stay exact).
MAX_STEP_COST = 2**31 - 1


def _check_utf8(value: str, where: str, name: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{where}: {name} is not valid Unicode text (position {exc.start})"
        ) from None


def step_row(s: Any, where: str, namespace: str, max_text_chars: int) -> StepRow:
    """Validate one :class:`Step` and turn it into a store row (``where`` names it)."""
    if not isinstance(s, Step):
        raise InvalidInputError(f"{where}: expected a Step, got {type(s).__name__}")
    if not isinstance(s.role, str) or not s.role:
        raise InvalidInputError(f"{where}: role must be a non-empty string")
    for name in ("role", "text", "tool_action", "tool_signature", "subgoal", "namespace"):
        if not isinstance(getattr(s, name), str):
            raise InvalidInputError(f"{where}: {name} must be a string")
        _check_utf8(getattr(s, name), where, name)
    if len(s.text) > max_text_chars:
        raise OversizedInputError(
            f"{where}: text has {len(s.text)} characters; max_text_chars is {max_text_chars}"
        )
    if isinstance(s.cost, bool) or not isinstance(s.cost, int | np.integer) or s.cost <= 0:
        raise InvalidInputError(f"{where}: cost must be a positive integer, got {s.cost!r}")
    if s.cost > MAX_STEP_COST:
        raise InvalidInputError(f"{where}: cost {s.cost} exceeds the maximum {MAX_STEP_COST}")
    if not all(isinstance(e, str) for e in s.entities):
        raise InvalidInputError(f"{where}: entities must be strings")
    for e in s.entities:
        _check_utf8(e, where, "an entity")
    try:
        args = json.dumps(dict(s.arguments), sort_keys=True, ensure_ascii=False, allow_nan=False)
        args.encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidInputError(f"{where}: arguments are not JSON data ({exc})") from None
    return StepRow(
        role=s.role,
        text=s.text,
        tool_action=s.tool_action,
        arguments_json=args,
        tool_signature=s.tool_signature,
        entities=tuple(sorted(s.entities)),
        subgoal=s.subgoal,
        source=s.namespace or namespace,
        cost=int(s.cost),
    )


def check_namespace(namespace: Any) -> None:
    """A namespace is a non-empty string."""
    if not isinstance(namespace, str) or not namespace:
        raise InvalidInputError(f"namespace: expected a non-empty string, got {namespace!r}")


def open_call_start(messages: Sequence[Any]) -> int:
    """Index of the last assistant message whose tool calls are still unanswered when
    only tool messages follow it (the agent is waiting for tool results); otherwise
    ``len(messages)``."""
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        if not isinstance(msg, Mapping):
            return len(messages)
        role = msg.get("role")
        if role == "tool":
            continue
        if role != "assistant" or not isinstance(msg.get("tool_calls"), list):
            return len(messages)
        ids = {c.get("id") for c in msg["tool_calls"] if isinstance(c, Mapping)}
        answered = {m.get("tool_call_id") for m in messages[i + 1 :] if isinstance(m, Mapping)}
        return i if ids - answered else len(messages)
    return len(messages)
