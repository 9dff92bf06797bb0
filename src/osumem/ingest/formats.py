"""Agent logs in the shapes people have, turned into one canonical shape.

The canonical shape is OpenAI chat messages with ``tool_calls`` (what
:func:`osumem.ingest.openai_chat.read_messages` and the agent memory read). Formats:

``openai``
    OpenAI chat messages with ``tool_calls`` / ``role: "tool"`` (unchanged).
``openai-legacy``
    OpenAI function calling before tool calls: ``function_call`` and
    ``role: "function"`` (:mod:`osumem.ingest.openai_legacy`); current-shape messages in
    the same log pass through.
``anthropic``
    Anthropic Messages: ``tool_use`` / ``tool_result`` content blocks and a top-level
    ``system`` (:mod:`osumem.ingest.anthropic`).
``toolbench-dfs``
    A ToolBench DFS answer tree (``answer_generation.train_messages``, else the winning
    path of ``tree``, else its deepest explored path; :mod:`osumem.ingest.toolbench_dfs`).
``auto``
    The format is read from the log's fields (:func:`detect_format`).

Nothing is dropped silently: a malformed message raises :class:`LogFormatError` naming
it, and every message or content block that becomes no step (a system prompt, an empty
assistant message, a thinking block, an image) is a counted :class:`Skip` in the
result's report.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osumem.errors import ConfigError, DataFileError, show_value
from osumem.ingest.anthropic import CALL_BLOCKS, THINKING_BLOCKS, anthropic_to_openai
from osumem.ingest.openai_chat import SYSTEM_ROLES, LogFormatError
from osumem.ingest.openai_legacy import legacy_to_openai
from osumem.ingest.toolbench_dfs import is_dfs_record, read_dfs

#: Every value ``format`` takes.
FORMATS: tuple[str, ...] = ("auto", "openai", "openai-legacy", "anthropic", "toolbench-dfs")
#: Keys of a log object that hold its message list (first found wins).
MESSAGE_KEYS: tuple[str, ...] = ("messages", "traj", "trajectory", "conversation")


@dataclass(frozen=True, kw_only=True)
class Skip:
    """One message or content block of the input that became no step.

    ``index`` is the input message's position (-1: a log-level field such as the
    Anthropic ``system``); ``where`` names it in full; ``reason`` says why.
    """

    index: int
    where: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class NormalizedLog:
    """A log in the canonical OpenAI ``tool_calls`` shape, with what maps to no step."""

    #: canonical messages, ready for ``read_messages`` / ``Memory.add_messages``
    messages: tuple[dict[str, Any], ...]
    #: the format the log was read as (never ``"auto"``)
    format: str
    #: every input message or block that became no step, in input order
    skipped: tuple[Skip, ...] = ()

    def skip_counts(self) -> dict[str, int]:
        """How many skips per reason."""
        return dict(Counter(s.reason for s in self.skipped))


def _kind_of(obj: Any) -> str:
    """A readable name of a JSON value's type for error messages."""
    if isinstance(obj, Mapping):
        return "an object"
    if isinstance(obj, list):
        return "a list"
    if isinstance(obj, str):
        return "a string"
    return type(obj).__name__


def _unwrap(log: Any, where: str) -> tuple[Sequence[Any], Any, str]:
    """``(messages, system, where)`` of a log given as a message list or a log object
    (``where`` then names the message list)."""
    if isinstance(log, Mapping):
        for key in MESSAGE_KEYS:
            if isinstance(log.get(key), list):
                return log[key], log.get("system"), f"{where}.{key}"
        raise LogFormatError(
            f"{where}: log object has no message list (one of {', '.join(MESSAGE_KEYS)})"
        )
    if isinstance(log, list | tuple):
        return log, None, where
    raise LogFormatError(
        f"{where}: expected a list of messages or a log object, got {_kind_of(log)}"
    )


def detect_format(log: Any, *, where: str = "messages") -> str:
    """The format of ``log`` (a message list or a log object), from its fields.

    A ToolBench DFS record is an object with ``answer_generation`` (or ``tree`` and
    ``compare_candidates``); a log object with a top-level ``system`` and ``messages``,
    or any Anthropic content block (``tool_use``, ``tool_result``, ``thinking``), is
    ``anthropic``; ``function_call`` or ``role: "function"`` is ``openai-legacy``;
    anything else ``openai``. Raises :class:`LogFormatError` when a log mixes Anthropic
    blocks with OpenAI tool fields.
    """
    if is_dfs_record(log):
        return "toolbench-dfs"
    messages, system, _ = _unwrap(log, where)
    anthropic = system is not None and isinstance(log, Mapping)
    legacy = openai = False
    for msg in messages:
        if not isinstance(msg, Mapping):
            continue
        role = msg.get("role")
        legacy |= role == "function" or "function_call" in msg
        openai |= role == "tool" or "tool_calls" in msg
        content = msg.get("content")
        if isinstance(content, list):
            for block in content:
                kind = block.get("type") if isinstance(block, Mapping) else None
                if isinstance(kind, str) and (
                    kind in CALL_BLOCKS
                    or kind in THINKING_BLOCKS
                    or kind == "tool_result"
                    or kind.endswith("_tool_result")
                ):
                    anthropic = True
    if anthropic and (legacy or openai):
        raise LogFormatError(
            f"{where}: the log mixes Anthropic content blocks with OpenAI tool fields; "
            "split it or pass the format explicitly"
        )
    if anthropic:
        return "anthropic"
    return "openai-legacy" if legacy else "openai"


def _check_shapes(messages: Sequence[Any], where: str) -> None:
    """Fields every format types the same way: a ``role`` is a string and a content
    part's ``text`` is a string (anything else is a :class:`LogFormatError` naming it,
    before any reader compares or joins them)."""
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            continue  # each reader names a message that is not an object
        role = msg.get("role")
        if role is not None and not isinstance(role, str):
            raise LogFormatError(f"{where}[{i}].role: expected a string, got {_kind_of(role)}")
        content = msg.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, Mapping) and "text" in part and not isinstance(part["text"], str):
                raise LogFormatError(
                    f"{where}[{i}].content[{j}].text: expected a string, "
                    f"got {_kind_of(part['text'])}"
                )


def _audit(
    messages: Sequence[Mapping[str, Any]], origin: Sequence[int], fmt: str, where: str
) -> list[Skip]:
    """The skips of canonical ``messages`` (system prompts, empty assistant messages,
    content parts without text); in the ``openai`` format a legacy field is an error."""
    skips = []
    for k, msg in enumerate(messages):
        i = origin[k]
        at = f"{where}[{i}]" if i >= 0 else f"{where}: system"
        if not isinstance(msg, Mapping):
            raise LogFormatError(f"{at}: expected a message object, got {_kind_of(msg)}")
        role = msg.get("role")
        if fmt == "openai" and (role == "function" or "function_call" in msg):
            raise LogFormatError(
                f"{at}: legacy function-calling message ('function_call' or role 'function') "
                "in a log read as 'openai'; use format 'openai-legacy' or 'auto'"
            )
        if role in SYSTEM_ROLES:
            skips.append(Skip(index=i, where=at, reason=f"{role} prompt (not a step)"))
            continue
        content = msg.get("content")
        if role == "assistant" and not msg.get("tool_calls"):
            text = content if isinstance(content, str) else None
            if isinstance(content, list):
                parts = [p.get("text", "") if isinstance(p, Mapping) else p for p in content]
                # a part that is not text is left to the checks below (a typed error),
                # never turned into text here (str() of a huge int raises ValueError)
                text = "".join(parts) if all(isinstance(t, str) for t in parts) else "?"
            if not (text or "").strip():
                skips.append(Skip(index=i, where=at, reason="empty assistant message"))
                continue
        if isinstance(content, list) and fmt != "anthropic":
            for j, part in enumerate(content):
                if isinstance(part, Mapping) and not isinstance(part.get("text"), str):
                    skips.append(
                        Skip(
                            index=i,
                            where=f"{at}.content[{j}]",
                            reason=f"non-text content part {show_value(part.get('type'))}",
                        )
                    )
    return skips


def normalize_messages(
    messages: Sequence[Mapping[str, Any]] | Mapping[str, Any],
    format: str = "auto",
    *,
    where: str = "messages",
) -> NormalizedLog:
    """Convert one agent log to canonical OpenAI ``tool_calls`` messages.

    Args:
        messages: the log: a message list, or a log object (``{"messages": [...]}``,
            ``{"traj": [...]}``, an Anthropic request with ``system``, a ToolBench DFS
            answer record).
        format: one of :data:`FORMATS`; ``"auto"`` reads it from the log
            (:func:`detect_format`).
        where: how error messages and skips name the log.

    Returns:
        A :class:`NormalizedLog`: the canonical messages, the format read, and every
        input message or block that maps to no step (counted, never silent).

    Raises:
        ConfigError: for an unknown ``format``.
        LogFormatError: naming the message, for anything malformed in that format.
    """
    if format not in FORMATS:
        raise ConfigError(f"format must be one of {', '.join(FORMATS)}; got {format!r}")
    fmt = detect_format(messages, where=where) if format == "auto" else format
    skips: list[Skip] = []
    if fmt == "toolbench-dfs":
        if not isinstance(messages, Mapping):
            raise LogFormatError(
                f"{where}: a ToolBench DFS answer is an object, got {_kind_of(messages)}"
            )
        out, note = read_dfs(messages, where=where)
        origin = list(range(len(out)))
        if note is not None:
            skips.append(Skip(index=-1, where=f"{where}.tree", reason=note))
    else:
        msgs, system, where = _unwrap(messages, where)
        _check_shapes(msgs, where)
        if fmt == "anthropic":
            out, origin, block_skips = anthropic_to_openai(msgs, system=system, where=where)
            skips = [Skip(index=i, where=w, reason=r) for i, w, r in block_skips]
        elif fmt == "openai-legacy":
            out = legacy_to_openai(msgs, where=where)
            origin = list(range(len(out)))
        else:
            out = [dict(m) if isinstance(m, Mapping) else m for m in msgs]
            origin = list(range(len(out)))
    skips.extend(_audit(out, origin, fmt, where))
    skips.sort(key=lambda s: s.index)
    return NormalizedLog(messages=tuple(out), format=fmt, skipped=tuple(skips))


def read_logs(path: str | Path, format: str = "auto") -> list[NormalizedLog]:
    """Read every log of a file and normalize each (:func:`normalize_messages`).

    ``.jsonl``: one log per line. ``.json``: one log (a message list or a log object,
    e.g. one ToolBench DFS answer file) or a list of logs (e.g. a tau-bench results
    file). Raises :class:`DataFileError` for a missing or unreadable file and
    :class:`LogFormatError` naming the line or log for malformed content; nothing is
    returned half-read.
    """
    if format not in FORMATS:
        raise ConfigError(f"format must be one of {', '.join(FORMATS)}; got {format!r}")
    p = Path(path)
    if not p.is_file():
        raise DataFileError(f"log file not found: {p}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise LogFormatError(f"{p}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise DataFileError(f"{p}: unreadable ({exc.strerror})") from None
    if p.suffix == ".jsonl":
        logs: list[tuple[Any, str]] = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    logs.append((json.loads(line), f"{p}:{n}"))
                except json.JSONDecodeError as exc:
                    raise LogFormatError(f"{p}:{n}: invalid JSON ({exc.msg})") from None
        return [normalize_messages(log, format, where=w) for log, w in logs]
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LogFormatError(f"{p}: invalid JSON at line {exc.lineno} ({exc.msg})") from None
    if (
        isinstance(data, list)
        and data
        and not all(isinstance(x, Mapping) and "role" in x for x in data)
    ):
        return [normalize_messages(x, format, where=f"{p}[{i}]") for i, x in enumerate(data)]
    return [normalize_messages(data, format, where=str(p))]


def skip_summary(logs: Sequence[NormalizedLog]) -> str:
    """One line counting the skips of ``logs`` by reason (empty when there are none)."""
    counts: Counter[str] = Counter()
    for log in logs:
        counts.update(log.skip_counts())
    if not counts:
        return ""
    total = sum(counts.values())
    parts = ", ".join(f"{n} {reason}" for reason, n in counts.most_common())
    return f"{total} message(s) or block(s) became no step: {parts}"
