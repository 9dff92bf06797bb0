"""Step filters: which steps a retrieval (or a listing) may see.

A filter is a JSON object, the shape MongoDB, Chroma and LangGraph's stores use::

    {"role": "user"}                                  # equality
    {"time": {"$gte": "2026-05-01T00:00:00Z"}}        # a range
    {"user_id": "ana", "tool": {"$in": ["book", "cancel"]}}
    {"$or": [{"priority": {"$gt": 2}}, {"pinned": True}]}

Every key must hold (an implicit ``$and``). A key is a step field, ``role``,
``tool`` (the tool action), ``source``, ``time`` (when the step was added) or
``updated`` (when it was last changed), or else a metadata key; dots go into nested
objects (``"order.id"``), and ``metadata.<key>`` names a metadata key that is spelled
like a field (``"metadata.role"``). A value is either the value to equal, or an object
of operators, all of which must hold: ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``,
``$lte`` (numbers with numbers, text with text), ``$in``, ``$nin`` (a list),
``$exists`` (true or false). ``$and`` and ``$or`` take a list of filters, ``$not`` a
filter. Times are seconds since the Unix epoch, ISO 8601 text or a ``datetime`` (UTC
when no offset is given).

A step without the key fails every operator but ``$ne``, ``$nin`` and
``$exists: false``; a key that no step of the namespace holds at all is an error (a
misspelt key would otherwise filter everything out silently), as is an unknown
operator or a value of the wrong type (:class:`~osumem.errors.InvalidFilterError`,
naming the clause).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import InvalidFilterError, StoreCorruptError, UnknownFilterKeyError, show_value
from osumem.memory.rows import NamespaceData

#: The step fields a filter may name (every other key is a metadata key).
FIELDS = ("role", "tool", "source", "time", "updated")
#: The comparison operators.
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists")
#: The operators that combine filters.
COMBINATORS = ("$and", "$or", "$not")
#: Deepest nesting of ``$and`` / ``$or`` / ``$not``.
MAX_DEPTH = 16
#: Most clauses in one filter.
MAX_CLAUSES = 256

_TIME_FIELDS = ("time", "updated")
_MISSING: Any = object()


def _where(at: str, key: str) -> str:
    return f"{at}[{key!r}]"


def as_time(value: Any, where: str) -> float:
    """A time operand as seconds since the epoch: a number, ISO 8601 text or a
    ``datetime`` (UTC when naive)."""
    if isinstance(value, bool):
        raise InvalidFilterError(f"{where}: expected a time, got {show_value(value)}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise InvalidFilterError(f"{where}: {value} is not a finite time")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            value = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        except ValueError:
            raise InvalidFilterError(
                f"{where}: {show_value(value)} is not an ISO 8601 time "
                "(e.g. '2026-05-01T12:00:00Z') nor seconds since the epoch"
            ) from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.timestamp()
    raise InvalidFilterError(f"{where}: expected a time, got {show_value(value)}")


@dataclass(frozen=True)
class _Compare:
    """One operator on one key."""

    field: str  # a name of FIELDS, or "" for metadata
    path: tuple[str, ...]  # the metadata path
    op: str
    operand: Any
    where: str


@dataclass(frozen=True)
class _Combine:
    op: str  # "$and", "$or", "$not"
    parts: tuple[Any, ...]


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _check_operand(op: str, operand: Any, field: str, where: str) -> Any:
    """The operand of ``op``, checked (times converted)."""
    if op == "$exists":
        if not isinstance(operand, bool):
            raise InvalidFilterError(
                f"{where}: $exists takes true or false, got {show_value(operand)}"
            )
        return operand
    if op in ("$in", "$nin"):
        if not isinstance(operand, list | tuple):
            raise InvalidFilterError(f"{where}: {op} takes a list, got {show_value(operand)}")
        return tuple(
            _check_operand("$eq", v, field, f"{where}[{i}]") for i, v in enumerate(operand)
        )
    if field in _TIME_FIELDS:
        return as_time(operand, where)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        if isinstance(operand, bool) or not isinstance(operand, int | float | str):
            raise InvalidFilterError(
                f"{where}: {op} compares numbers or text, got {show_value(operand)}"
            )
        if isinstance(operand, float) and not math.isfinite(operand):
            raise InvalidFilterError(f"{where}: {operand} is not a finite number")
        return operand
    if field in ("role", "tool", "source") and not isinstance(operand, str):
        raise InvalidFilterError(f"{where}: {field} is text, got {show_value(operand)}")
    try:
        json.dumps(operand, allow_nan=False)
    except (TypeError, ValueError):
        raise InvalidFilterError(f"{where}: {show_value(operand)} is not JSON data") from None
    return operand


def _key(key: str, where: str) -> tuple[str, tuple[str, ...]]:
    """``(field, metadata path)`` of a filter key."""
    if key in FIELDS:
        return key, ()
    name = key[len("metadata.") :] if key.startswith("metadata.") else key
    path = tuple(name.split("."))
    if not name or any(not part for part in path):
        raise InvalidFilterError(f"{where}: {key!r} is not a key (empty part)")
    return "", path


def _parse(spec: Any, where: str, depth: int, count: list[int]) -> _Combine:
    if not isinstance(spec, Mapping):
        raise InvalidFilterError(f"{where}: expected an object of clauses, got {show_value(spec)}")
    if depth > MAX_DEPTH:
        raise InvalidFilterError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    parts: list[Any] = []
    for key, value in spec.items():
        if not isinstance(key, str):
            raise InvalidFilterError(f"{where}: key {show_value(key)} is not text")
        at = _where(where, key)
        count[0] += 1
        if count[0] > MAX_CLAUSES:
            raise InvalidFilterError(f"filter: more than {MAX_CLAUSES} clauses")
        if key.startswith("$"):
            if key == "$not":
                parts.append(_Combine("$not", (_parse(value, at, depth + 1, count),)))
            elif key in ("$and", "$or"):
                if not isinstance(value, list | tuple) or not value:
                    raise InvalidFilterError(f"{at}: expected a non-empty list of filters")
                parts.append(
                    _Combine(
                        key,
                        tuple(
                            _parse(v, f"{at}[{i}]", depth + 1, count) for i, v in enumerate(value)
                        ),
                    )
                )
            else:
                raise InvalidFilterError(
                    f"{at}: unknown operator {key!r} at the top of a filter (known: "
                    f"{', '.join(COMBINATORS)}; comparisons go inside a key: "
                    f"{{'key': {{'{key}': ...}}}})"
                )
            continue
        field, path = _key(key, at)
        dollars = [str(k).startswith("$") for k in value] if isinstance(value, Mapping) else []
        if any(dollars) and not all(dollars):
            raise InvalidFilterError(
                f"{at}: mixes operators and keys; give operators only "
                "({'$gte': 1, '$lt': 5}) or a value to equal"
            )
        ops = (
            value
            if isinstance(value, Mapping) and value and all(str(k).startswith("$") for k in value)
            else {"$eq": value}
        )
        for op, operand in ops.items():
            if op not in OPERATORS:
                raise InvalidFilterError(
                    f"{at}: unknown operator {op!r} (known: {', '.join(OPERATORS)})"
                )
            where_op = f"{at}[{op!r}]" if ops is value else at
            checked = _check_operand(op, operand, field, where_op)
            parts.append(_Compare(field, path, op, checked, where_op))
    return _Combine("$and", tuple(parts))


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


def _ordered(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` can be ordered (two numbers or two texts)."""
    if isinstance(a, str) and isinstance(b, str):
        return True
    number = (int, float)
    return (
        isinstance(a, number)
        and isinstance(b, number)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    )


_RANGES: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}


def _holds(op: str, value: Any, operand: Any) -> bool:
    """Whether a step's ``value`` (or :data:`_MISSING`) satisfies ``op operand``."""
    if op == "$exists":
        return (value is not _MISSING) == operand
    if value is _MISSING:
        return op in ("$ne", "$nin")
    if op == "$eq":
        return _equal(value, operand)
    if op == "$ne":
        return not _equal(value, operand)
    if op == "$in":
        return any(_equal(value, v) for v in operand)
    if op == "$nin":
        return not any(_equal(value, v) for v in operand)
    return _ordered(value, operand) and _RANGES[op](value, operand)


_PARSED: dict[int, tuple[tuple[str, ...], list[dict[str, Any]]]] = {}


def parsed_metadata(data: NamespaceData) -> list[dict[str, Any]]:
    """The steps' metadata as dicts (parsed once per loaded namespace state)."""
    texts = data.metadata
    hit = _PARSED.get(id(texts))
    if hit is not None and hit[0] is texts:
        return hit[1]
    out: list[dict[str, Any]] = []
    cache: dict[str, dict[str, Any]] = {}
    for k, text in enumerate(texts):
        got = cache.get(text)
        if got is None:
            got = cache[text] = _parse_metadata(text, k)
        out.append(got)
    if len(_PARSED) > 64:
        _PARSED.clear()
    _PARSED[id(texts)] = (texts, out)
    return out


def metadata_at(data: NamespaceData, positions: list[int]) -> dict[int, dict[str, Any]]:
    """The metadata of ``positions`` as dicts (from the parsed namespace state when it
    is cached, else only these are parsed: a retrieve after an add does not parse
    every step's metadata again)."""
    texts = data.metadata
    hit = _PARSED.get(id(texts))
    if hit is not None and hit[0] is texts:
        return {p: hit[1][p] for p in positions}
    return {p: _parse_metadata(texts[p], p) for p in positions}


def _parse_metadata(text: str, position: int) -> dict[str, Any]:
    """One step's stored metadata text as a dict (``StoreCorruptError`` otherwise)."""
    if text == "{}":
        return {}  # most steps carry none: no JSON parse
    try:
        got = json.loads(text)
    except ValueError:
        got = None
    if not isinstance(got, dict):
        raise StoreCorruptError(f"step at position {position}: metadata is not a JSON object")
    return got


def _lookup(meta: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = meta
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


class StepFilter:
    """A checked filter (see the module doc); :meth:`mask` applies it to a namespace."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec
        self._root = _parse(spec, "filter", 0, [0])

    def __repr__(self) -> str:
        return f"StepFilter({self.spec!r})"

    def _compares(self, node: Any) -> list[_Compare]:
        if isinstance(node, _Compare):
            return [node]
        return [c for part in node.parts for c in self._compares(part)]

    def mask(self, data: NamespaceData, namespace: str) -> NDArray[np.bool_]:
        """Which steps of ``data`` (the namespace ``namespace``) pass.

        Raises:
            UnknownFilterKeyError: a metadata key that no step of the namespace holds.
        """
        n = data.view.n
        compares = self._compares(self._root)
        meta = parsed_metadata(data) if any(not c.field for c in compares) else []
        columns: dict[tuple[str, tuple[str, ...]], list[Any]] = {}
        for c in compares:
            key = (c.field, c.path)
            if key in columns:
                continue
            columns[key] = values = self._values(data, meta, c.field, c.path)
            held = not c.field and n and all(v is _MISSING for v in values)
            if held and any(o.op != "$exists" for o in compares if (o.field, o.path) == key):
                raise UnknownFilterKeyError(
                    f"{c.where}: no step of namespace {namespace!r} has metadata "
                    f"{'.'.join(c.path)!r}{_known_keys(meta)}"
                )

        def evaluate(node: Any) -> NDArray[np.bool_]:
            if isinstance(node, _Compare):
                values = columns[(node.field, node.path)]
                return np.fromiter(
                    (_holds(node.op, v, node.operand) for v in values), dtype=bool, count=n
                )
            masks = [evaluate(p) for p in node.parts]
            if node.op == "$not":
                return ~masks[0]
            if not masks:
                return np.ones(n, dtype=bool)
            combine = np.logical_and if node.op == "$and" else np.logical_or
            return combine.reduce(masks) if len(masks) > 1 else masks[0]

        return evaluate(self._root)

    @staticmethod
    def _values(
        data: NamespaceData, meta: Sequence[Mapping[str, Any]], field: str, path: tuple[str, ...]
    ) -> list[Any]:
        v = data.view
        if field == "role":
            return [str(x) for x in v.roles]
        if field == "source":
            return [str(x) for x in v.sources]
        if field == "tool":
            return [str(x) if x else _MISSING for x in v.tool_actions]
        if field in _TIME_FIELDS:
            times = data.times if field == "time" else data.updated
            return [_MISSING if math.isnan(t) else float(t) for t in times.tolist()]
        return [_lookup(m, path) for m in meta]


def _known_keys(meta: Sequence[Mapping[str, Any]]) -> str:
    keys = sorted({k for m in meta for k in m})
    if not keys:
        return " (its steps have no metadata)"
    shown = ", ".join(repr(k) for k in keys[:10])
    return f" (keys held: {shown}{', ...' if len(keys) > 10 else ''})"


def compile_filter(spec: Mapping[str, Any] | StepFilter | None) -> StepFilter | None:
    """A checked :class:`StepFilter` of ``spec`` (``None`` or ``{}``: no filter).

    Raises:
        InvalidFilterError: an unknown operator, a value of the wrong type, a
            malformed clause (named).
    """
    if spec is None or isinstance(spec, StepFilter):
        return spec
    if not isinstance(spec, Mapping):
        raise InvalidFilterError(f"filter: expected an object of clauses, got {show_value(spec)}")
    return StepFilter(spec) if spec else None
