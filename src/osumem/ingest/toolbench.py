"""Reader for ToolBench tooleval answer files.

Each file (``G1_instruction.json``, ``G2_category.json``, ... or any name) maps a record id to
``{query, available_tools, answer: {method, total_steps, final_answer,
answer_details}}``; ``answer_details`` is a chain of ``{role, message, next: [...]}``
nodes whose message texts are cut at 100 characters. Tool-call messages look like
``{'name': 'vin_decode_for_vin_decoder_v4', 'arguments': '{\\n  "vin": "WB..."\\n}',
'respon`` and the cut may fall anywhere after the name (rarely inside it).

What a ToolBench *step* is (docs/decisions.md):

* every tool call (role ``tool``) is one step: its action is the function name, its
  argument dict is what survives the cut (complete ``"key": value`` pairs only; the
  raw, unescaped argument text is kept), its text is ``name`` plus that raw argument
  text; ``Finish`` is a boilerplate call (no tool signature and no entities: its
  arguments are control values such as ``give_answer``);
* every assistant text message is one step (role ``assistant``);
* the user message is *not* a step: it is the record's query (kept whole in
  ``query``), and the system prompt is not a step either.

Tool signature: ``tool_signature(action, keys)`` where ``keys`` are the parameter
names the tool *declares* in ``available_tools`` (whole, never cut), so truncation
cannot split one function into several signatures; ``signature_level="api"`` uses
the API part of ``<fname>_for_<api>`` instead (the paper's reading of T+ on ToolBench).
Entities come from the parsed argument dict (:func:`osumem.annotate.extract_entities`).
The subgoal of every step is the record's one user turn (``"<source>#task"``).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from osumem.annotate import DEFAULT_BOILERPLATE, extract_entities, tool_signature
from osumem.errors import DataFileError, InvalidInputError

#: File-name patterns the reader looks at; a file is read when its content has the
#: answer-file shape (:func:`is_answer_file`), whatever its name.
DEFAULT_PATTERNS: tuple[str, ...] = ("*.json",)

_NAME_RE = re.compile(r"^\{'name':\s*'(?P<name>[^']*)(?P<closed>')?")
_ARGS_RE = re.compile(r"'arguments':\s*'(?P<args>.*)$", re.S)
_PAIR_RE = re.compile(
    r'"(?P<key>(?:[^"\\]|\\.)*)"\s*:\s*'
    r'(?P<value>"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)'
    r"(?=\s*[,}\n])",
)


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """One parsed tool-call message.

    ``arguments`` holds only the complete ``key: value`` pairs that survived the cut;
    ``raw_arguments`` is the argument text as it survived (escape sequences decoded);
    ``truncated`` is True when the argument text was cut before its closing brace.
    """

    name: str
    arguments: Mapping[str, Any]
    raw_arguments: str
    truncated: bool


@dataclass(frozen=True, kw_only=True)
class ToolBenchStep:
    """A ToolBench step before embedding (see the module docstring for what counts)."""

    role: str
    text: str
    tool_action: str = ""
    api: str = ""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    raw_arguments: str = ""
    truncated: bool = False
    tool_signature: str = ""
    entities: frozenset[str] = frozenset()
    subgoal: str = ""
    source: str = ""
    #: position of this step's message in the record's chain (0 = system prompt)
    turn: int = 0

    @property
    def is_boilerplate(self) -> bool:
        """True for steps without a tool signature (Finish, assistant text)."""
        return not self.tool_signature


@dataclass(frozen=True, kw_only=True)
class ToolBenchRecord:
    """One ToolBench answer record: its query, the tools it offers and its steps."""

    record_id: str
    split: str
    query: str
    available_tools: tuple[str, ...]
    steps: tuple[ToolBenchStep, ...]

    @property
    def source(self) -> str:
        """Unique source name: ``<split>:<id>`` (ids repeat across split files)."""
        return f"{self.split}:{self.record_id}"

    @property
    def tool_steps(self) -> tuple[int, ...]:
        """Indices (into ``steps``) of the non-boilerplate tool calls."""
        return tuple(
            i for i, s in enumerate(self.steps) if s.role == "tool" and not s.is_boilerplate
        )


def api_of(function_name: str) -> str:
    """The API part of a ToolBench function name ``<fname>_for_<api>`` (the name
    itself when it has no ``_for_``)."""
    _, sep, api = function_name.rpartition("_for_")
    return api if sep and api else function_name


def _decode_escapes(text: str) -> str:
    """Decode the Python-repr escapes of a cut argument string (``\\n``, ``\\'``)."""
    return (
        text.replace("\\\\", "\x00").replace("\\n", "\n").replace("\\'", "'").replace("\x00", "\\")
    )


def parse_arguments(raw: str) -> tuple[dict[str, Any], bool]:
    """Parse a (possibly cut) JSON argument text into ``(arguments, truncated)``.

    A complete text is parsed with :func:`json.loads`; a cut one yields every
    ``"key": value`` pair whose value is complete (a string closed by its quote, a
    number, a boolean or null, followed by a separator). Values cut mid-way are dropped.
    Never raises on malformed text.
    """
    text = raw.strip()
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        value = None
    if isinstance(value, dict):
        return value, False
    args: dict[str, Any] = {}
    for m in _PAIR_RE.finditer(text):
        try:
            args[json.loads(f'"{m.group("key")}"')] = json.loads(m.group("value"))
        except (json.JSONDecodeError, ValueError):
            continue
    return args, True


def parse_tool_message(message: str, tool_names: Sequence[str] = ()) -> ToolCall | None:
    """Parse one tool-call message; ``None`` when it is not a tool call.

    When the cut falls inside the function name, the name is completed from
    ``tool_names`` (the record's available tools) if exactly one starts with it.
    """
    m = _NAME_RE.match(message)
    if not m:
        return None
    name = m.group("name")
    if not m.group("closed"):
        matches = [t for t in tool_names if t.startswith(name)]
        if len(matches) != 1:
            return None
        return ToolCall(name=matches[0], arguments={}, raw_arguments="", truncated=True)
    am = _ARGS_RE.search(message, m.end())
    if not am:
        return ToolCall(name=name, arguments={}, raw_arguments="", truncated=True)
    raw = am.group("args")
    # The argument string ends with an unescaped quote (then ``, 'respon...``).
    end = re.search(r"(?<!\\)'", raw)
    closed = end is not None
    if end is not None:
        raw = raw[: end.start()]
    decoded = _decode_escapes(raw)
    args, cut = parse_arguments(decoded)
    return ToolCall(name=name, arguments=args, raw_arguments=decoded, truncated=cut or not closed)


def _chain(details: Any, where: str) -> list[Mapping[str, Any]]:
    """Flatten the nested answer chain (depth first, first branch first)."""
    out: list[Mapping[str, Any]] = []
    stack = list(reversed(details)) if isinstance(details, list) else [details]
    while stack:
        node = stack.pop()
        if not isinstance(node, Mapping) or "role" not in node or "message" not in node:
            raise InvalidInputError(f"{where}: answer_details node without role/message")
        out.append(node)
        nxt = node.get("next", [])
        if not isinstance(nxt, list):
            raise InvalidInputError(f"{where}: answer_details 'next' is not a list")
        stack.extend(reversed(nxt))
    return out


def _declared_keys(tools: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for t in tools:
        props = (t.get("parameters") or {}).get("properties") or {}
        out[str(t.get("name", ""))] = tuple(sorted(props))
    return out


def parse_record(
    record_id: str,
    record: Mapping[str, Any],
    *,
    split: str = "",
    signature_level: str = "function",
    boilerplate: Iterable[str] = DEFAULT_BOILERPLATE,
) -> ToolBenchRecord:
    """Parse one record into a :class:`ToolBenchRecord`.

    Args:
        record_id: the record's id (its key in the file).
        record: ``{query, available_tools, answer: {answer_details, ...}}``.
        split: the file stem (``G1_instruction``), part of the source name.
        signature_level: ``"function"`` (signature = function name + declared keys)
            or ``"api"`` (signature = the API of ``<fname>_for_<api>``).
        boilerplate: tool names that get no signature (case-insensitive).

    Raises:
        InvalidInputError: naming the record when a required field is missing or has
            the wrong type.
    """
    where = f"ToolBench record {split + ':' if split else ''}{record_id}"
    if signature_level not in ("function", "api"):
        raise InvalidInputError(
            f"signature_level must be 'function' or 'api', got {signature_level!r}"
        )
    if not isinstance(record, Mapping):
        raise InvalidInputError(f"{where}: expected an object, got {type(record).__name__}")
    query = record.get("query")
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError(f"{where}: missing or empty 'query'")
    tools = record.get("available_tools", [])
    if not isinstance(tools, list) or not all(isinstance(t, Mapping) for t in tools):
        raise InvalidInputError(f"{where}: 'available_tools' must be a list of objects")
    answer = record.get("answer")
    if not isinstance(answer, Mapping) or "answer_details" not in answer:
        raise InvalidInputError(f"{where}: missing 'answer.answer_details'")
    declared = _declared_keys(tools)
    names = tuple(declared)
    source = f"{split}:{record_id}"
    subgoal = f"{source}#task"
    boiler = {b.lower() for b in boilerplate}
    steps: list[ToolBenchStep] = []
    for turn, node in enumerate(_chain(answer["answer_details"], where)):
        role, message = node["role"], node["message"]
        if not isinstance(message, str):
            raise InvalidInputError(f"{where}: message at turn {turn} is not a string")
        if role == "tool":
            call = parse_tool_message(message, names)
            if call is None:
                raise InvalidInputError(
                    f"{where}: tool message at turn {turn} has no parsable name: {message[:40]!r}"
                )
            api = api_of(call.name)
            if call.name.lower() in boiler:
                sig = ""
            elif signature_level == "api":
                sig = tool_signature(api, None, boiler)
            else:
                keys = declared.get(call.name) or tuple(sorted(call.arguments))
                sig = tool_signature(call.name, dict.fromkeys(keys), boiler)
            text = f"{call.name} {call.raw_arguments}".strip()
            steps.append(
                ToolBenchStep(
                    role="tool",
                    text=text,
                    tool_action=call.name,
                    api=api,
                    arguments=call.arguments,
                    raw_arguments=call.raw_arguments,
                    truncated=call.truncated,
                    tool_signature=sig,
                    # boilerplate (Finish) arguments are control values, not entities:
                    # "give_answer" would otherwise link every trajectory
                    entities=frozenset()
                    if call.name.lower() in boiler
                    else extract_entities(call.arguments),
                    subgoal=subgoal,
                    source=source,
                    turn=turn,
                )
            )
        elif role == "assistant" and message.strip():
            steps.append(
                ToolBenchStep(
                    role="assistant",
                    text=message.strip(),
                    subgoal=subgoal,
                    source=source,
                    turn=turn,
                )
            )
    return ToolBenchRecord(
        record_id=str(record_id),
        split=split,
        query=query.strip(),
        available_tools=names,
        steps=tuple(steps),
    )


def is_answer_file(data: Any) -> bool:
    """True when ``data`` (a parsed JSON file) has the shape of a ToolBench answer file:
    a non-empty object mapping ids to records with ``query`` and ``answer``."""
    if not isinstance(data, Mapping) or not data:
        return False
    first = next(iter(data.values()))
    return isinstance(first, Mapping) and "query" in first and "answer" in first


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataFileError(f"ToolBench file not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataFileError(f"ToolBench file {path} is unreadable: {exc}") from None


def _records(data: Any, path: Path, **kwargs: Any) -> list[ToolBenchRecord]:
    if not isinstance(data, Mapping):
        raise InvalidInputError(f"{path}: expected an object mapping id -> record")
    return [parse_record(str(k), v, split=path.stem, **kwargs) for k, v in data.items()]


def read_file(path: str | Path, **kwargs: Any) -> list[ToolBenchRecord]:
    """Parse every record of one answer file (its stem is the split name).

    Raises :class:`DataFileError` when the file is missing or not JSON, and
    :class:`InvalidInputError` naming the record when one is malformed; nothing is
    returned half-loaded.
    """
    path = Path(path)
    return _records(_load(path), path, **kwargs)


def read_toolbench(
    data_dir: str | Path, *, patterns: Sequence[str] = DEFAULT_PATTERNS, **kwargs: Any
) -> list[ToolBenchRecord]:
    """Parse every ToolBench answer file under ``data_dir`` (sorted file order).

    Every file matching ``patterns`` (default ``*.json``) whose content has the answer
    file shape (:func:`is_answer_file`) is read, whatever its name; JSON files of
    another shape are left out with a warning naming them. ``data_dir`` may also be the
    parent of a ``toolbench`` folder. Raises :class:`DataFileError` when no answer file
    is found.
    """
    root = Path(data_dir)
    if not root.is_dir():
        raise DataFileError(f"ToolBench data directory not found: {root}")
    files = sorted({f for p in patterns for f in root.glob(p) if f.is_file()})
    if not files and (root / "toolbench").is_dir():
        root = root / "toolbench"
        files = sorted({f for p in patterns for f in root.glob(p) if f.is_file()})
    records: list[ToolBenchRecord] = []
    other: list[str] = []
    for f in files:
        data = _load(f)
        if is_answer_file(data):
            records.extend(_records(data, f, **kwargs))
        else:
            other.append(f.name)
    if not records:
        found = f" (files of another shape: {', '.join(other)})" if other else ""
        raise DataFileError(
            f"no ToolBench answer files ({', '.join(patterns)} holding an object of "
            f"id -> {{query, available_tools, answer}}) in {root}{found}"
        )
    if other:
        warnings.warn(
            f"{root}: not ToolBench answer files, left out: {', '.join(other)}",
            stacklevel=2,
        )
    return records
