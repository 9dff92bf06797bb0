"""Anthropic Messages logs → OpenAI ``tool_calls`` messages.

An Anthropic log is a ``messages`` list (roles ``user`` and ``assistant``) with an
optional top-level ``system`` (a string or text blocks). ``content`` is a string or a
list of blocks:

* ``text``: kept as the message's text (blocks of one message joined by newlines);
* ``tool_use`` / ``server_tool_use`` (assistant): a tool call ``{id, name, input}``;
* ``tool_result`` (user) and ``*_tool_result`` (assistant, server tools): the response
  to the call with ``tool_use_id``; its text is the observation, prefixed ``error: ``
  when ``is_error`` is true;
* ``thinking`` / ``redacted_thinking``, images, documents and other blocks without
  text: not steps; each is reported as a skip (see
  :class:`osumem.ingest.formats.Skip`), never dropped silently.

The ``system`` field becomes a system message (not a step). A user message holding only
tool results becomes tool messages (the observations of earlier calls), not a user turn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from osumem.ingest.openai_chat import LogFormatError

#: Blocks that are reasoning, not trajectory evidence.
THINKING_BLOCKS: frozenset[str] = frozenset({"thinking", "redacted_thinking"})
#: Blocks that call a tool.
CALL_BLOCKS: frozenset[str] = frozenset({"tool_use", "server_tool_use"})


def _block_text(content: Any, where: str, skips: list[tuple[str, str]]) -> str:
    """Text of a tool result's ``content`` (string, blocks, or other JSON)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, block in enumerate(content):
            if isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif isinstance(block, Mapping):
                skips.append((f"{where}[{j}]", f"non-text block {block.get('type')!r}"))
            else:
                raise LogFormatError(f"{where}[{j}]: expected a content block object")
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


def _system_text(system: Any, where: str) -> str:
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(
            b["text"] for b in system if isinstance(b, Mapping) and isinstance(b.get("text"), str)
        )
    raise LogFormatError(f"{where}: 'system' must be a string or a list of text blocks")


def anthropic_to_openai(
    messages: Sequence[Mapping[str, Any]],
    *,
    system: Any = None,
    where: str = "messages",
) -> tuple[list[dict[str, Any]], list[int], list[tuple[int, str, str]]]:
    """The messages of an Anthropic log in the OpenAI shape, and what maps to no step.

    Returns:
        ``(messages, origin, skips)``: ``origin[k]`` is the index of the input message
        that output message ``k`` came from (-1: the ``system`` field); each skip is ``(message index, where, reason)`` for a
        block that is not a step (thinking, images, ...); index -1 is the log's
        ``system`` field.

    Raises:
        LogFormatError: naming the message and block, for an unknown role, a block
            that is not an object or has no ``type``, a tool call without id or name,
            a tool result without ``tool_use_id``, or a field of another format
            (``tool_calls``, ``function_call``).
    """
    out: list[dict[str, Any]] = []
    origin: list[int] = []
    skips: list[tuple[int, str, str]] = []
    if system is not None:
        out.append({"role": "system", "content": _system_text(system, f"{where}: system")})
        origin.append(-1)
    for i, msg in enumerate(messages):
        n_before = len(out)
        _one_message(i, msg, f"{where}[{i}]", out, skips)
        origin.extend([i] * (len(out) - n_before))
    return out, origin, skips


def _one_message(
    i: int,
    msg: Any,
    at: str,
    out: list[dict[str, Any]],
    skips: list[tuple[int, str, str]],
) -> None:
    """Append the OpenAI messages of Anthropic message ``i`` to ``out``."""
    if not isinstance(msg, Mapping):
        raise LogFormatError(f"{at}: expected a message object, got {type(msg).__name__}")
    role = msg.get("role")
    if role == "system":
        out.append({"role": "system", "content": _system_text(msg.get("content"), at)})
        return
    if role not in ("user", "assistant"):
        raise LogFormatError(
            f"{at}: role {role!r} is not an Anthropic message role ('user', 'assistant')"
        )
    for foreign in ("tool_calls", "function_call"):
        if foreign in msg:
            raise LogFormatError(
                f"{at}: {foreign!r} is an OpenAI field, not Anthropic; use format 'auto'"
            )
    if "content" not in msg:
        raise LogFormatError(f"{at}: message has no 'content'")
    content = msg["content"]
    if isinstance(content, str):
        out.append({"role": role, "content": content})
        return
    if not isinstance(content, list):
        raise LogFormatError(f"{at}: 'content' must be a string or a list of blocks")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []

    def flush(role: str = str(role)) -> None:
        if role == "assistant" and (texts or calls):
            new: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
            if calls:
                new["tool_calls"] = list(calls)
            out.append(new)
        elif role == "user" and texts:
            out.append({"role": "user", "content": "\n".join(texts)})
        texts.clear()
        calls.clear()

    n_before = len(out)
    block_skips: list[tuple[str, str]] = []
    for j, block in enumerate(content):
        bat = f"{at}.content[{j}]"
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise LogFormatError(f"{bat}: expected a content block with a 'type'")
        kind = block["type"]
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise LogFormatError(f"{bat}: text block without 'text'")
            texts.append(block["text"])
        elif kind in CALL_BLOCKS:
            if role != "assistant":
                raise LogFormatError(f"{bat}: {kind!r} block in a {role} message")
            cid, name = block.get("id"), block.get("name")
            if not isinstance(cid, str) or not cid or not isinstance(name, str) or not name:
                raise LogFormatError(f"{bat}: {kind} block needs an 'id' and a 'name'")
            args = block.get("input", {})
            if not isinstance(args, Mapping):
                raise LogFormatError(f"{bat}: 'input' of tool {name!r} must be an object")
            calls.append(
                {
                    "id": cid,
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": json.dumps(args, ensure_ascii=False),
                    },
                }
            )
        elif kind == "tool_result" or kind.endswith("_tool_result"):
            cid = block.get("tool_use_id")
            if not isinstance(cid, str) or not cid:
                raise LogFormatError(f"{bat}: {kind} block has no 'tool_use_id'")
            flush()  # the result follows the calls (and text) before it
            text = _block_text(block.get("content"), f"{bat}.content", block_skips)
            if block.get("is_error") is True:
                text = f"error: {text}"
            out.append({"role": "tool", "tool_call_id": cid, "content": text})
        elif kind in THINKING_BLOCKS:
            block_skips.append((bat, f"{kind} block (reasoning, not a step)"))
        else:
            block_skips.append((bat, f"non-text block {kind!r}"))
    flush()
    skips.extend((i, w, r) for w, r in block_skips)
    if len(out) == n_before and not block_skips:
        skips.append((i, at, f"empty {role} message"))
