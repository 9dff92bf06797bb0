"""Reader for agent logs in OpenAI chat format: messages → steps.

Product code: agent builders feed it their own logs. The log is a list of messages,
each a dict with a ``role``:

* ``system`` / ``developer``: not a step (the prompt is not trajectory evidence);
* ``user``: one step, text ``"user: <content>"``; each user message starts a new
  subgoal segment;
* ``assistant``: one step for its text content (if non-empty), text
  ``"assistant: <content>"``, then one step per entry of ``tool_calls``;
* ``tool``: the response to an earlier tool call (matched by ``tool_call_id``); it
  becomes the observation of that call's step.

Tool-call step text (documented format, what is embedded and token-counted)::

    call: <name>(<arguments as compact JSON, keys sorted>)
    result: <tool response content>

The ``result:`` line is absent while a call has no response. Tool errors are ordinary
responses (their text is the observation). With ``max_observation_chars`` set, an
observation longer than that is cut to its first ``max_observation_chars`` characters
followed by :data:`CUT_MARKER` (the default ``None`` keeps it whole). Entities come from the call's argument dict
(:func:`osumem.annotate.extract_entities`), except for control tools
(:data:`CONTROL_TOOLS`, e.g. ToolBench's ``Finish``) whose arguments are control values
(``return_type: give_answer``), not entities; the tool signature is
:func:`osumem.annotate.tool_signature` (empty for boilerplate tools). Subgoal: a
message's explicit ``"subgoal"`` field if present, else ``"<source>:sg<k>"`` where
``k`` counts the user messages seen so far (steps before the first user message are in
segment 0). Every malformed message raises :class:`LogFormatError` naming its index.

This reader takes the current OpenAI shape only. A message in another shape (the legacy
``function_call`` / ``role: "function"`` fields, Anthropic content blocks, ToolBench
answer trees) is an error here, never a silent drop: convert it first with
:func:`osumem.ingest.normalize_messages`.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from osumem.annotate import (
    DEFAULT_BOILERPLATE,
    extract_entities,
    prefix,
    prefix_entities,
    tool_signature,
)
from osumem.embed import Encoder
from osumem.errors import ConfigError, DataFileError, InvalidInputError
from osumem.types import MemoryView, Step

#: Roles that never become steps.
SYSTEM_ROLES: frozenset[str] = frozenset({"system", "developer"})
#: Appended to an observation cut by ``max_observation_chars``.
CUT_MARKER = " …[cut]"
#: Every role the reader accepts.
KNOWN_ROLES: frozenset[str] = SYSTEM_ROLES | {"user", "assistant", "tool"}
#: Tools whose arguments are control values, not entities (matched case-insensitively):
#: ToolBench's ``Finish(return_type="give_answer", ...)`` would otherwise make
#: ``give_answer`` the most common entity, linking unrelated trajectories.
CONTROL_TOOLS: frozenset[str] = frozenset({"finish"})
#: Content-part types that carry tool calls or results in another format (Anthropic);
#: dropping them as "no text" would lose steps, so they are an error here.
FOREIGN_PARTS: frozenset[str] = frozenset({"tool_use", "tool_result", "server_tool_use"})


class LogFormatError(InvalidInputError):
    """A chat log is malformed; the message says which message and what is wrong."""


def _content_text(content: Any, where: str) -> str:
    """Message content as text: a string, None, or a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, Mapping) and part.get("type") in FOREIGN_PARTS:
                raise LogFormatError(
                    f"{where}.content[{j}]: {part.get('type')!r} block of another log format; "
                    "convert the log with osumem.ingest.normalize_messages (format 'auto')"
                )
            elif isinstance(part, Mapping):
                continue  # images, audio: no text to keep
            else:
                raise LogFormatError(f"{where}.content[{j}]: expected a content part dict")
        return "\n".join(parts)
    raise LogFormatError(f"{where}: 'content' must be a string, a list of parts or null")


def _parse_arguments(raw: Any, where: str) -> dict[str, Any]:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise LogFormatError(f"{where}: arguments are not valid JSON ({exc.msg})") from None
    if not isinstance(raw, Mapping):
        raise LogFormatError(f"{where}: arguments must be a JSON object, got {type(raw).__name__}")
    return dict(raw)


def cut_observation(observation: str, max_chars: int | None) -> str:
    """``observation`` cut to ``max_chars`` characters plus :data:`CUT_MARKER` when it
    is longer; unchanged when ``max_chars`` is None or it fits."""
    if max_chars is None or len(observation) <= max_chars:
        return observation
    return observation[:max_chars] + CUT_MARKER


def call_text(name: str, arguments: Mapping[str, Any], observation: str | None) -> str:
    """The text of a tool-call step (see the module docstring for the format)."""
    args = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    text = f"call: {name}({args})"
    return text if observation is None else f"{text}\nresult: {observation}"


def read_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    source: str = "",
    boilerplate: Iterable[str] = DEFAULT_BOILERPLATE,
    prefix_namespace: bool = False,
    max_observation_chars: int | None = None,
    where: str = "messages",
    namespace: str | None = None,
) -> list[Step]:
    """Turn one OpenAI-format chat log into steps.

    Args:
        messages: the log, oldest first.
        source: the source name stored on every step (and used in subgoal labels).
        boilerplate: tool names that get no tool signature (no tool OSU).
        prefix_namespace: prefix entities and tool signatures with ``source::`` (the
            paper's namespace prefixing) so strings from different sources never
            collide when logs are concatenated.
        max_observation_chars: cut each tool response stored in the step text to this
            many characters (plus :data:`CUT_MARKER`); ``None`` (default) keeps it whole.
        where: how error messages name the log (e.g. a file name).
        namespace: deprecated name of ``source`` (a :class:`DeprecationWarning`).

    Returns:
        Steps with cost 1; :func:`steps_to_view` assigns real token costs.

    Raises:
        LogFormatError: naming the offending message index, for a non-dict message,
            a missing or unknown role, a user message without content, a malformed
            tool call, or a tool message without a matching ``tool_call_id``.
    """
    if namespace is not None:
        warnings.warn(
            "read_messages(namespace=...) is deprecated; pass source=...",
            DeprecationWarning,
            stacklevel=2,
        )
        if source:
            raise ConfigError("read_messages: give source or the deprecated namespace, not both")
        source = namespace
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise LogFormatError(f"{where}: expected a list of messages")
    if max_observation_chars is not None and (
        isinstance(max_observation_chars, bool)
        or not isinstance(max_observation_chars, int)
        or max_observation_chars < 0
    ):
        raise ConfigError(
            f"max_observation_chars must be None or an integer >= 0, got {max_observation_chars!r}"
        )
    boiler = frozenset(boilerplate)
    steps: list[Step] = []
    # tool_call_id -> indices (into steps) of calls still waiting for a response, oldest
    # first; real logs (tau-bench) sometimes reuse an id, each response answers the
    # oldest open call with that id.
    pending: dict[str, list[int]] = {}
    segment = 0

    def label(msg: Mapping[str, Any]) -> str:
        explicit = msg.get("subgoal")
        if isinstance(explicit, str) and explicit:
            return explicit
        return f"{source}:sg{segment}" if source else f"sg{segment}"

    for i, msg in enumerate(messages):
        at = f"{where}[{i}]"
        if not isinstance(msg, Mapping):
            raise LogFormatError(f"{at}: expected a message object, got {type(msg).__name__}")
        role = msg.get("role")
        if not isinstance(role, str):
            raise LogFormatError(f"{at}: message has no 'role'")
        if role == "function" or "function_call" in msg:
            raise LogFormatError(
                f"{at}: legacy OpenAI function-calling message ('function_call' or role "
                "'function'); convert the log with osumem.ingest.normalize_messages "
                "(format 'openai-legacy' or 'auto')"
            )
        if role not in KNOWN_ROLES:
            raise LogFormatError(
                f"{at}: unknown role {role!r}; expected one of {sorted(KNOWN_ROLES)}"
            )
        if role in SYSTEM_ROLES:
            continue
        if role == "user":
            if "content" not in msg:
                raise LogFormatError(f"{at}: user message has no 'content'")
            segment += 1
            text = _content_text(msg["content"], at)
            steps.append(Step(role="user", text=f"user: {text}", subgoal=label(msg), source=source))
        elif role == "assistant":
            calls = msg.get("tool_calls") or []
            if "content" not in msg and not calls:
                raise LogFormatError(
                    f"{at}: assistant message has neither 'content' nor 'tool_calls'"
                )
            text = _content_text(msg.get("content"), at)
            if text.strip():
                steps.append(
                    Step(
                        role="assistant",
                        text=f"assistant: {text}",
                        subgoal=label(msg),
                        source=source,
                    )
                )
            if not isinstance(calls, list):
                raise LogFormatError(f"{at}: 'tool_calls' must be a list")
            for j, call in enumerate(calls):
                cat = f"{at}.tool_calls[{j}]"
                fn = call.get("function") if isinstance(call, Mapping) else None
                name = fn.get("name") if isinstance(fn, Mapping) else None
                if not isinstance(fn, Mapping) or not isinstance(name, str) or not name:
                    raise LogFormatError(f"{cat}: tool call has no function name")
                call_id = call.get("id")
                if not isinstance(call_id, str) or not call_id:
                    raise LogFormatError(f"{cat}: tool call {name!r} has no 'id'")
                args = _parse_arguments(fn.get("arguments"), cat)
                ents = frozenset() if name.lower() in CONTROL_TOOLS else extract_entities(args)
                sig = tool_signature(name, args, boiler)
                if prefix_namespace:
                    ents = prefix_entities(source, ents)
                    sig = prefix(source, sig)
                pending.setdefault(call_id, []).append(len(steps))
                steps.append(
                    Step(
                        role="tool",
                        text=call_text(name, args, None),
                        tool_action=name,
                        arguments=args,
                        tool_signature=sig,
                        entities=ents,
                        subgoal=label(msg),
                        source=source,
                    )
                )
        else:  # tool response
            call_id = msg.get("tool_call_id")
            if not isinstance(call_id, str) or not pending.get(call_id):
                raise LogFormatError(
                    f"{at}: tool message without a matching tool_call_id ({call_id!r})"
                )
            if "content" not in msg:
                raise LogFormatError(f"{at}: tool message has no 'content'")
            k = pending[call_id].pop(0)
            s = steps[k]
            obs = cut_observation(_content_text(msg["content"], at), max_observation_chars)
            steps[k] = replace(s, text=call_text(s.tool_action, s.arguments, obs))
    return steps


def _as_messages(obj: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(obj, Mapping):
        for key in ("messages", "traj", "trajectory", "conversation"):
            if isinstance(obj.get(key), list):
                return list(obj[key])
        raise LogFormatError(f"{where}: object has no 'messages' list")
    if isinstance(obj, list):
        return list(obj)
    raise LogFormatError(f"{where}: expected a list of messages or an object with 'messages'")


def read_log(path: str | Path) -> list[list[dict[str, Any]]]:
    """Read chat logs from a file: ``.jsonl`` (one log per line) or ``.json`` holding
    one log (a message list, or an object with ``messages``/``traj``) or a list of logs.

    Returns a list of logs (each a list of message dicts), ready for
    :func:`read_messages`. Raises :class:`DataFileError` for a missing file and
    :class:`LogFormatError` for malformed JSON.
    """
    p = Path(path)
    if not p.is_file():
        raise DataFileError(f"chat log not found: {p}")
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".jsonl":
        logs = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    logs.append(_as_messages(json.loads(line), f"{p}:{n}"))
                except json.JSONDecodeError as exc:
                    raise LogFormatError(f"{p}:{n}: invalid JSON ({exc.msg})") from None
        return logs
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LogFormatError(f"{p}: invalid JSON at line {exc.lineno} ({exc.msg})") from None
    if isinstance(data, list) and data and all(isinstance(x, list | Mapping) for x in data):
        if all(isinstance(x, Mapping) and "role" in x for x in data):
            return [list(data)]
        return [_as_messages(x, f"{p}[{i}]") for i, x in enumerate(data)]
    return [_as_messages(data, str(p))]


def steps_to_view(steps: Sequence[Step], encoder: Encoder) -> MemoryView:
    """The memory view of ``steps``: embeddings from ``encoder.encode`` and token costs
    from ``encoder.count_tokens`` on the step texts (the one cost source every method
    uses)."""
    texts = [s.text for s in steps]
    if not texts:
        return MemoryView.build(
            np.zeros((0, encoder.dim), dtype=np.float32), np.zeros(0, dtype=np.int64)
        )
    costs = encoder.count_tokens(texts)
    emb = encoder.encode(texts)
    steps = [replace(s, cost=int(c)) for s, c in zip(steps, costs, strict=True)]
    return MemoryView.from_steps(steps, emb)
