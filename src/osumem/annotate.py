"""Annotation extraction for real trajectories: entities, tool signatures,
source prefixes (the paper's namespace prefixing)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

#: Tools that get no tool OSU (configurable everywhere a reader takes ``boilerplate``).
DEFAULT_BOILERPLATE: frozenset[str] = frozenset(
    {"think", "finish", "calculate", "transfer_to_human_agents"}
)

MIN_ENTITY_LEN = 2
MAX_ENTITY_LEN = 80


def _walk(value: Any) -> Iterator[str]:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, str):
        s = value.strip()
        if MIN_ENTITY_LEN <= len(s) <= MAX_ENTITY_LEN:
            yield s
    elif isinstance(value, int | float):
        if value == value and value not in (float("inf"), float("-inf")):
            yield str(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list | tuple | set | frozenset):
        for v in value:
            yield from _walk(v)


def extract_entities(arguments: Any) -> frozenset[str]:
    """Entities of a tool call's argument dict, walked recursively: string values of
    length 2 to 80 (stripped) and numeric values as strings. Booleans and None are
    not entities; keys are not entities."""
    return frozenset(_walk(arguments))


def tool_signature(
    action: str,
    arguments: Mapping[str, Any] | None,
    boilerplate: Iterable[str] = DEFAULT_BOILERPLATE,
) -> str:
    """``action(sorted,argument,keys)``; empty for no action or a boilerplate tool
    (matched case-insensitively)."""
    if not action:
        return ""
    if action.lower() in {b.lower() for b in boilerplate}:
        return ""
    keys = ",".join(sorted(arguments or {}))
    return f"{action}({keys})"


def prefix(source: str, value: str) -> str:
    """Prefix an entity or signature with its step's source (``source::value``; the
    paper's namespace prefixing); empty stays empty."""
    if not value or not source:
        return value
    return f"{source}::{value}"


def prefix_entities(source: str, entities: Iterable[str]) -> frozenset[str]:
    """Prefix every entity with the source (see :func:`prefix`)."""
    return frozenset(prefix(source, e) for e in entities)
