"""Held tool calls of interleaved writers: each belongs to the source that added it.

A namespace's held messages (an assistant tool call still waiting for its result, see
:meth:`osumem.memory.Memory.add_messages`) are stored with the source of each
(``held_sources``). An add from source ``S`` continues only ``S``'s held messages (and
those held before sources were recorded, which go with any source): another writer's
add to the same namespace leaves them held, and ``S``'s later result lands on its
call's step. A tool result that answers a call held for another source is refused,
naming that source. Within one source the rule is the single-writer one: the next add
steps a call that is still unanswered (the conversation moved on).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: What an add continues: its source's held messages, the namespace's user-step count,
#: the other sources' held messages and their sources.
HeldSnapshot = tuple[list[dict[str, Any]], int, list[dict[str, Any]], list[str | None]]


def split_held(
    held: Sequence[dict[str, Any]], sources: Sequence[str | None], source: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str | None]]:
    """``(mine, others, their sources)``: the held messages an add from ``source``
    continues, and the rest (kept held, in order)."""
    mine: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    of: list[str | None] = []
    for message, owner in zip(held, sources, strict=True):
        if owner is None or owner == source:
            mine.append(message)
        else:
            others.append(message)
            of.append(owner)
    return mine, others, of


def _call_owners(
    messages: Sequence[Mapping[str, Any]], owners: Sequence[str | None]
) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for message, owner in zip(messages, owners, strict=True):
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                out[call["id"]] = owner
    return out


def check_answers(
    messages: Sequence[Mapping[str, Any]],
    mine: Sequence[Mapping[str, Any]],
    others: Sequence[Mapping[str, Any]],
    their_sources: Sequence[str | None],
    source: str,
) -> None:
    """Refuse a tool result in ``messages`` (an add from ``source``) that answers a
    call held for another source and none of this add's own."""
    foreign = _call_owners(others, their_sources)
    if not foreign:
        return
    own = set(_call_owners([*mine, *messages], [None] * (len(mine) + len(messages))))
    for i, message in enumerate(messages):
        cid = message.get("tool_call_id") if message.get("role") == "tool" else None
        if isinstance(cid, str) and cid in foreign and cid not in own:
            # here, not at the top: the log readers are not on a query's path
            from osumem.ingest.openai_chat import LogFormatError

            raise LogFormatError(
                f"messages[{i}]: answers tool call {cid!r}, which is held for source "
                f"{foreign[cid]!r}, not {source!r}; add the result with "
                f"source={foreign[cid]!r}"
            )
