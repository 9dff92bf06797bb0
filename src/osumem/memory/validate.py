"""Validation and message bookkeeping of the agent memory (boundary checks, held tool
calls, subgoal segments that continue across adds)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from osumem.errors import InvalidInputError, show_value
from osumem.memory.rows import StepRow
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


#: Deepest nesting of lists and objects accepted inside a message or argument dict.
MAX_DEPTH = 32
#: Largest magnitude of an integer inside a message (a signed 64-bit integer, what
#: SQLite and most JSON readers hold exactly).
MAX_INT = 2**63 - 1
#: Longest role name, namespace and caller-given log id.
MAX_ROLE_CHARS = 64
MAX_NAMESPACE_CHARS = 1024
#: Most entities one step may carry.
MAX_ENTITIES = 10_000


def message_limit(max_text_chars: int) -> int:
    """Most characters (all strings of a message, keys included) one message may hold:
    room for a full-size content plus full-size tool-call arguments."""
    return 2 * max_text_chars + 4096


def check_json_data(value: Any, where: str, *, max_chars: int, total: int) -> None:
    """Reject anything in ``value`` a store cannot hold exactly: non-JSON types,
    non-string keys, nesting deeper than :data:`MAX_DEPTH`, integers beyond
    :data:`MAX_INT`, NaN/infinite floats, invalid Unicode, a string longer than
    ``max_chars`` or more than ``total`` characters in all (iterative: no recursion)."""
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    used = 0
    while stack:
        v, at, depth = stack.pop()
        if isinstance(v, str):
            if len(v) > max_chars:
                raise OversizedInputError(
                    f"{at}: {len(v)} characters; max_text_chars is {max_chars}"
                )
            used += len(v)
            _check_utf8(v, at, "text")
        elif v is None or isinstance(v, bool):
            pass
        elif isinstance(v, int):
            if abs(v) > MAX_INT:
                raise InvalidInputError(f"{at}: integer beyond the 64-bit range")
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise InvalidInputError(f"{at}: {v} is not a finite number")
        elif isinstance(v, Mapping | list | tuple):
            if depth >= MAX_DEPTH:
                raise InvalidInputError(f"{at}: nested deeper than {MAX_DEPTH} levels")
            if isinstance(v, Mapping):
                for k, item in v.items():
                    if not isinstance(k, str):
                        raise InvalidInputError(
                            f"{at}: key {_show(k)} is not a string ({type(k).__name__})"
                        )
                    if len(k) > max_chars:
                        raise OversizedInputError(f"{at}: a key has {len(k)} characters")
                    _check_utf8(k, at, "a key")
                    used += len(k)
                    stack.append((item, at if len(at) > 120 else at + _key_label(k), depth + 1))
            else:
                stack.extend(
                    (item, at if len(at) > 120 else f"{at}[{j}]", depth + 1)
                    for j, item in enumerate(v)
                )
        else:
            raise InvalidInputError(f"{at}: {type(v).__name__} is not JSON data")
        if used > total:
            raise OversizedInputError(
                f"{where}: more than {total} characters in all; max_text_chars is {max_chars}"
            )


def _key_label(key: str) -> str:
    """``.key`` for a printable key, ``['…']`` (escaped) otherwise: error messages stay
    one line whatever the keys hold."""
    k = key[:40]
    return f".{k}" if k.isprintable() and k else f"[{k!r}]"


def check_messages(messages: Sequence[Any], limit: int) -> list[dict[str, Any]]:
    """Validate every message for storage (see :func:`check_json_data`; content at most
    ``limit`` characters, ids strings) and return canonical JSON copies of them, so
    what is validated is exactly what a held message is stored as."""
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        at = f"messages[{i}]"
        if not isinstance(msg, Mapping):
            from osumem.ingest.openai_chat import LogFormatError

            raise LogFormatError(f"{at}: expected a message object, got {type(msg).__name__}")
        content = msg.get("content")
        size = len(content) if isinstance(content, str) else 0
        if isinstance(content, list):
            size = sum(
                len(p["text"])
                for p in content
                if isinstance(p, Mapping) and isinstance(p.get("text"), str)
            )
        if size > limit:
            raise OversizedInputError(f"{at}.content: {size} characters; max_text_chars is {limit}")
        check_json_data(msg, at, max_chars=limit, total=message_limit(limit))
        if "tool_call_id" in msg and not isinstance(msg["tool_call_id"], str):
            raise InvalidInputError(f"{at}.tool_call_id: expected a string")
        role = msg.get("role")
        if isinstance(role, str) and len(role) > MAX_ROLE_CHARS:
            raise InvalidInputError(f"{at}.role: longer than {MAX_ROLE_CHARS} characters")
        calls = msg.get("tool_calls")
        if isinstance(calls, list):
            for j, call in enumerate(calls):
                if isinstance(call, Mapping) and "id" in call and not isinstance(call["id"], str):
                    raise InvalidInputError(f"{at}.tool_calls[{j}].id: expected a string")
                fn = call.get("function") if isinstance(call, Mapping) else None
                raw = fn.get("arguments") if isinstance(fn, Mapping) else None
                if isinstance(raw, str) and raw:
                    _check_arguments_text(raw, f"{at}.tool_calls[{j}]", limit)
        out.append(json.loads(json.dumps(msg, ensure_ascii=False, allow_nan=False)))
    return out


def _check_arguments_text(raw: str, where: str, limit: int) -> None:
    """Parse tool-call arguments given as JSON text and check the parsed data as well
    (1e999 parses to infinity, a 5000-digit number or 5000 nested brackets break the
    JSON reader)."""
    from osumem.ingest.openai_chat import LogFormatError

    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)[:80]
        raise LogFormatError(f"{where}: arguments are not valid JSON ({detail})") from None
    check_json_data(parsed, f"{where}.arguments", max_chars=limit, total=message_limit(limit))


def check_message_sizes(messages: Sequence[Any], limit: int) -> None:
    """Reject a message whose content is longer than ``limit`` characters (kept for
    callers of the earlier API; :func:`check_messages` checks everything)."""
    check_messages(messages, limit)


def log_digest(messages: Sequence[Mapping[str, Any]], log_id: str | None = None) -> str:
    """The identity of one added log: ``id:<log_id>`` when the caller names it, else
    ``sha256:<hash of its canonical JSON>``."""
    if log_id is not None:
        return f"id:{log_id}"
    data = _CANONICAL_JSON.encode(list(messages))
    return "sha256:" + hashlib.sha256(data.encode("utf-8")).hexdigest()


#: What ``json.dumps(..., ensure_ascii=False, sort_keys=True, separators=(",", ":"))``
#: builds at every call (its only arguments here), made once.
_CANONICAL_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))


#: The largest token cost one step may carry (a sanity bound: sums of costs stay exact).
MAX_STEP_COST = 2**31 - 1


def _check_utf8(value: str, where: str, name: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{where}: {name} is not valid Unicode text (position {exc.start})"
        ) from None


def check_cost(cost: Any, where: str) -> None:
    """A step's token cost: a positive integer of at most :data:`MAX_STEP_COST`."""
    if isinstance(cost, bool) or not isinstance(cost, int | np.integer) or cost <= 0:
        raise InvalidInputError(f"{where}: cost must be a positive integer, got {_show(cost)}")
    if cost > MAX_STEP_COST:
        raise InvalidInputError(f"{where}: cost {_show(cost)} exceeds the maximum {MAX_STEP_COST}")


def step_row(s: Any, where: str, namespace: str, max_text_chars: int) -> StepRow:
    """Validate one :class:`Step` and turn it into a store row (``where`` names it)."""
    if not isinstance(s, Step):
        raise InvalidInputError(f"{where}: expected a Step, got {type(s).__name__}")
    if not isinstance(s.role, str) or not s.role:
        raise InvalidInputError(f"{where}: role must be a non-empty string")
    # labels derived from a namespace (``<source>:sg<k>``, ``<source>::<entity>``) get
    # room for the longest accepted namespace, so an accepted namespace never makes a
    # later add fail
    label_limit = max_text_chars + MAX_NAMESPACE_CHARS + 64
    for name in ("role", "text", "tool_action", "tool_signature", "subgoal", "source"):
        value = getattr(s, name)
        if not isinstance(value, str):
            raise InvalidInputError(f"{where}: {name} must be a string")
        _check_utf8(value, where, name)
        limit = max_text_chars if name in ("text", "tool_action") else label_limit
        if len(value) > limit:
            raise OversizedInputError(
                f"{where}: {name} has {len(value)} characters; at most {limit} "
                f"(max_text_chars is {max_text_chars})"
            )
    if len(s.role) > MAX_ROLE_CHARS:
        raise InvalidInputError(f"{where}: role longer than {MAX_ROLE_CHARS} characters")
    check_cost(s.cost, where)
    try:
        entities = list(s.entities)
    except TypeError:
        raise InvalidInputError(f"{where}: entities must be a set of strings") from None
    if not all(isinstance(e, str) for e in entities):
        raise InvalidInputError(f"{where}: entities must be strings")
    if len(entities) > MAX_ENTITIES:
        raise InvalidInputError(f"{where}: {len(entities)} entities; at most {MAX_ENTITIES}")
    for e in entities:
        _check_utf8(e, where, "an entity")
        if len(e) > label_limit:
            raise OversizedInputError(f"{where}: an entity has {len(e)} characters")
    if not isinstance(s.arguments, Mapping):
        raise InvalidInputError(f"{where}: arguments must be a dict")
    try:
        check_json_data(
            s.arguments, "arguments", max_chars=max_text_chars, total=message_limit(max_text_chars)
        )
    except OversizedInputError as exc:
        raise OversizedInputError(f"{where}: {exc}") from None
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where}: arguments are not JSON data ({exc})") from None
    try:
        args = json.dumps(dict(s.arguments), sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInputError(f"{where}: arguments are not JSON data ({exc})") from None
    return StepRow(
        role=s.role,
        text=s.text,
        tool_action=s.tool_action,
        arguments_json=args,
        tool_signature=s.tool_signature,
        entities=tuple(sorted(entities)),
        subgoal=s.subgoal,
        source=s.source or namespace,
        cost=int(s.cost),
    )


#: A short, always printable rendering of a rejected value.
_show = show_value


def check_metadata(metadata: Any, where: str, max_text_chars: int) -> str:
    """A step's metadata (``None``: none) as the JSON text a store keeps: an object of
    JSON data (see :func:`check_json_data`), keys sorted."""
    if metadata is None:
        return "{}"
    if not isinstance(metadata, Mapping):
        raise InvalidInputError(f"{where}: expected a dict of JSON data, got {_show(metadata)}")
    check_json_data(metadata, where, max_chars=max_text_chars, total=message_limit(max_text_chars))
    return json.dumps(dict(metadata), sort_keys=True, ensure_ascii=False, allow_nan=False)


def check_time(value: Any, where: str) -> float | None:
    """A step time (``None``: unknown): seconds since the epoch, or a ``datetime``
    (UTC when naive)."""
    if value is None:
        return None
    from datetime import UTC, datetime

    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInputError(
            f"{where}: expected seconds since the epoch or a datetime, got {_show(value)}"
        )
    return float(value)


def check_namespace(namespace: Any, what: str = "namespace") -> None:
    """A namespace is a non-empty string of valid Unicode, at most
    :data:`MAX_NAMESPACE_CHARS` characters."""
    if not isinstance(namespace, str) or not namespace:
        raise InvalidInputError(f"{what}: expected a non-empty string, got {_show(namespace)}")
    if len(namespace) > MAX_NAMESPACE_CHARS:
        raise InvalidInputError(
            f"{what}: {len(namespace)} characters; at most {MAX_NAMESPACE_CHARS}"
        )
    _check_utf8(namespace, what, "the name")


def _call_ids(msg: Mapping[str, Any]) -> list[str]:
    calls = msg.get("tool_calls") if msg.get("role") == "assistant" else None
    if not isinstance(calls, list):
        return []
    return [c["id"] for c in calls if isinstance(c, Mapping) and isinstance(c.get("id"), str)]


def open_call_start(messages: Sequence[Any]) -> int:
    """Where the held (not yet stepped) tail of ``messages`` starts: at the first
    assistant message of the trailing run of tool-call and tool messages whose calls
    are not all answered, moved back so that every held tool response sits with the
    call it answers; ``len(messages)`` when nothing waits. Both parts are then
    readable on their own, so a held tail can never make a later add fail."""
    n = len(messages)
    start = n
    while start > 0:
        msg = messages[start - 1]
        if not isinstance(msg, Mapping):
            return n
        if msg.get("role") == "tool" or _call_ids(msg):
            start -= 1
        else:
            break
    cut = n
    for i in range(start, n):
        ids = _call_ids(messages[i])
        later = {m.get("tool_call_id") for m in messages[i + 1 :]}
        if any(c not in later for c in ids):
            cut = i
            break
    if cut == n:
        return n
    moved = True
    while moved:  # a held response must travel with its call
        moved = False
        for k in range(cut, n):
            msg = messages[k]
            if msg.get("role") != "tool":
                continue
            cid = msg.get("tool_call_id")
            if any(cid in _call_ids(messages[j]) for j in range(cut, k)):
                continue
            origin = next(
                (j for j in range(cut - 1, -1, -1) if cid in _call_ids(messages[j])), None
            )
            if origin is not None:
                cut, moved = origin, True
                break
    return cut


def text_message(text: Any, role: Any) -> dict[str, str]:
    """The chat message ``Memory.add(text, role=...)`` stores: a user or assistant turn
    of non-empty text."""
    if role not in ("user", "assistant"):
        raise InvalidInputError(
            f"role: add takes 'user' or 'assistant' text, got {_show(role)} (tool calls "
            "and their results go through add_messages; other step kinds through add_steps)"
        )
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(f"text: expected a non-empty text, got {_show(text)}")
    return {"role": role, "content": text}
