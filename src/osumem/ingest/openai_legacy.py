"""Legacy OpenAI function calling → current OpenAI ``tool_calls`` messages.

The legacy shape (OpenAI's API before tool calls; ToolBench's DFS answer trees, older
LangChain and AutoGen runs) has an assistant message with one ``function_call``
(``{"name", "arguments"}``, ``content`` often null) answered by a message with
``role: "function"``, ``name`` and ``content``. Each becomes:

* the assistant message with ``tool_calls: [{"id": "function_call:<name>", ...}]``
  (its text content kept);
* a ``role: "tool"`` message with ``tool_call_id: "function_call:<name>"``.

The id is derived from the function name so a response that arrives in a later batch
still finds its call (the reader answers the oldest open call with an id, and legacy
calls are answered in order). A ``function`` message without ``name`` answers the
latest open legacy call of the same batch; with none open it is an error. Messages
already in the current shape pass through unchanged, so a log mixing both is read
whole.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from osumem.ingest.openai_chat import LogFormatError

#: Prefix of the tool-call ids given to legacy function calls.
LEGACY_ID_PREFIX = "function_call:"


def _arguments_text(raw: Any, where: str) -> str:
    if raw is None:
        return "{}"
    if isinstance(raw, str):
        return raw
    if isinstance(raw, Mapping):
        return json.dumps(raw, ensure_ascii=False)
    raise LogFormatError(f"{where}: 'arguments' must be a JSON string or object")


def legacy_to_openai(
    messages: Sequence[Mapping[str, Any]], *, where: str = "messages"
) -> list[dict[str, Any]]:
    """The messages of a legacy function-calling log in the current OpenAI shape.

    Raises:
        LogFormatError: naming the message, for a ``function_call`` without a name, a
            ``function`` message without content, or one whose call is unknown.
    """
    out: list[dict[str, Any]] = []
    open_calls: list[str] = []  # names of this batch's calls not yet answered, in order
    for i, msg in enumerate(messages):
        at = f"{where}[{i}]"
        if not isinstance(msg, Mapping):
            raise LogFormatError(f"{at}: expected a message object, got {type(msg).__name__}")
        role = msg.get("role")
        if role == "assistant" and msg.get("function_call") is not None:
            fc = msg["function_call"]
            name = fc.get("name") if isinstance(fc, Mapping) else None
            if not isinstance(name, str) or not name:
                raise LogFormatError(f"{at}.function_call: no function name")
            new = {k: v for k, v in msg.items() if k != "function_call"}
            new["content"] = msg.get("content")
            call = {
                "id": LEGACY_ID_PREFIX + name,
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": _arguments_text(fc.get("arguments"), f"{at}.function_call"),
                },
            }
            new["tool_calls"] = [*(msg.get("tool_calls") or []), call]
            open_calls.append(name)
            out.append(new)
        elif role == "function":
            name = msg.get("name")
            if not isinstance(name, str) or not name:
                if not open_calls:
                    raise LogFormatError(
                        f"{at}: function message has no 'name' and no call is open before it"
                    )
                name = open_calls[-1]
            if "content" not in msg:
                raise LogFormatError(f"{at}: function message {name!r} has no 'content'")
            if name in open_calls:
                open_calls.remove(name)
            content = msg["content"]
            if content is not None and not isinstance(content, str | list):
                content = json.dumps(content, ensure_ascii=False)
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": LEGACY_ID_PREFIX + name,
                    "name": name,
                    "content": "" if content is None else content,
                }
            )
        else:
            out.append(dict(msg))
    return out
