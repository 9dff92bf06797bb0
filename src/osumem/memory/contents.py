"""What a memory holds, for a person to look at: the namespaces with their counts, the
steps of a namespace with their units (``osumem show``), and the data of the viewer
page (``osumem view``, ``/ui``).

Everything here reads through :class:`~osumem.memory.Memory`'s public API
(``namespaces``, ``n_steps``, ``held``, ``view``, ``retriever``, ``retrieve``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from osumem.errors import InvalidInputError
from osumem.memory.export import check_namespaces
from osumem.memory.retrieved import osu_handles

if TYPE_CHECKING:
    from osumem.memory.api import Memory

#: Format version of the viewer page's data.
PAGE_DATA_VERSION = 1
#: Longest step text the viewer page carries by default (characters; longer ones are cut
#: and marked), which keeps a 10,000-step page small.
PAGE_TEXT_CHARS = 300


def namespace_info(memory: Memory) -> list[dict[str, Any]]:
    """Every namespace with its step count and held messages, sorted by name."""
    return [
        {"namespace": ns, "steps": memory.n_steps(ns), "held_messages": len(memory.held(ns))}
        for ns in memory.namespaces()
    ]


def _grep(pattern: str | None) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise InvalidInputError(f"grep: not a regular expression ({exc})") from None


def step_records(
    memory: Memory,
    namespace: str,
    *,
    start: int | None = None,
    stop: int | None = None,
    grep: str | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """The steps of ``namespace`` at positions ``start <= p < stop`` (default: all),
    those whose text, tool or entities match the regular expression ``grep`` (case
    insensitive), at most ``limit`` of them: each with position, role, tool, token cost,
    source, subgoal, entities, its units (OSUs of the memory's method, as
    ``view:key@first-last``) and text. ``total`` counts every match, ``next`` is the
    position to continue from when ``limit`` cut the list (else ``None``).

    Raises:
        UnknownNamespaceError: the namespace is not in the store.
        InvalidInputError: a bad range, limit or pattern.
    """
    check_namespaces(memory, [namespace])
    for name, value in (("from", start), ("to", stop), ("limit", limit)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidInputError(f"{name}: expected an integer, got {value!r}")
        if value is not None and value < 0:
            raise InvalidInputError(f"{name}: expected a position >= 0, got {value}")
    pattern = _grep(grep)
    view = memory.view(namespace)
    lo = 0 if start is None else min(start, view.n)
    hi = view.n if stop is None else min(stop, view.n)
    picked = []
    for p in range(lo, hi):
        if pattern is not None:
            hay = [str(view.texts[p]), str(view.tool_actions[p]), *view.entities[p]]
            if not any(pattern.search(h) for h in hay):
                continue
        picked.append(p)
    total = len(picked)
    more = limit is not None and total > limit
    if limit is not None:
        picked = picked[:limit]
    retriever = memory.retriever(namespace) if picked else None
    handles = osu_handles(retriever, np.asarray(picked, dtype=np.int64)) if picked else []
    steps = [
        {
            "position": p,
            "role": str(view.roles[p]),
            "tool_action": str(view.tool_actions[p]),
            "cost": int(view.costs[p]),
            "source": str(view.sources[p]),
            "subgoal": str(view.subgoals[p]),
            "entities": sorted(view.entities[p]),
            "osus": [str(h) for h in handles[i]],
            "text": str(view.texts[p]),
        }
        for i, p in enumerate(picked)
    ]
    return {
        "namespace": namespace,
        "method": memory.config.method,
        "steps_in_namespace": view.n,
        "total": total,
        "next": picked[-1] + 1 if more and picked else None,
        "steps": steps,
    }


def _index(values: Sequence[str]) -> tuple[list[str], list[int]]:
    """A column as (distinct values, index of each value): compact in JSON."""
    table: dict[str, int] = {}
    index = [table.setdefault(v, len(table)) for v in values]
    return list(table), index


def page_data(
    memory: Memory,
    namespace: str,
    *,
    query: str | None = None,
    budget: int | None = None,
    text_chars: int = PAGE_TEXT_CHARS,
) -> dict[str, Any]:
    """The data the viewer page shows for ``namespace``: its steps as compact columns
    (role, tool, cost, source, subgoal and text, cut at ``text_chars`` characters; 0
    keeps whole texts), its units (view, key, members) and, with ``query``, the
    memory's answer for it under ``budget`` with its explanation.

    Raises:
        UnknownNamespaceError: the namespace is not in the store.
    """
    check_namespaces(memory, [namespace])
    if isinstance(text_chars, bool) or not isinstance(text_chars, int) or text_chars < 0:
        raise InvalidInputError(f"text_chars: expected an integer >= 0, got {text_chars!r}")
    view = memory.view(namespace)
    n = view.n
    texts, cut = [], []
    for p in range(n):
        t = str(view.texts[p])
        if text_chars and len(t) > text_chars:
            t = t[:text_chars]
            cut.append(p)
        texts.append(t)
    roles, role_idx = _index([str(r) for r in view.roles])
    tools, tool_idx = _index([str(t) for t in view.tool_actions])
    sources, source_idx = _index([str(s) for s in view.sources])
    subgoals, subgoal_idx = _index([str(s) for s in view.subgoals])
    data: dict[str, Any] = {
        "version": PAGE_DATA_VERSION,
        "namespace": namespace,
        "method": memory.config.method,
        "encoder": memory.store.encoder_id,
        "n": n,
        "held_messages": len(memory.held(namespace)),
        "steps": {
            "roles": roles,
            "role": role_idx,
            "tools": tools,
            "tool": tool_idx,
            "sources": sources,
            "source": source_idx,
            "subgoals": subgoals,
            "subgoal": subgoal_idx,
            "cost": [int(c) for c in view.costs.tolist()],
            "text": texts,
            "cut": cut,
            "text_chars": text_chars,
        },
        "units": _units(memory.retriever(namespace) if n else None),
        "query": None,
    }
    if query is not None:
        result = memory.retrieve(query, budget, namespace=namespace)
        data["query"] = answer_for_page(result.to_dict(explain=True))
    return data


def answer_for_page(result: dict[str, Any]) -> dict[str, Any]:
    """A retrieval result for the page: without the step texts (the page has them)."""
    return {
        **result,
        "steps": [{k: v for k, v in s.items() if k != "text"} for s in result["steps"]],
    }


def _units(retriever: Any) -> dict[str, Any]:
    """The units of a retriever over an OSU pool as columns, members in CSR form
    (``indptr``/``indices``); empty for other methods."""
    pool = retriever.osu_pool() if retriever is not None else None
    if pool is None or pool.n_osus == 0:
        return {"views": [], "view": [], "key": [], "indptr": [0], "indices": []}
    members = pool.members
    names = [str(v) for v in pool.view_names().tolist()]
    views, view_idx = _index(names)
    return {
        "views": views,
        "view": view_idx,
        "key": [str(k) for k in pool.keys.tolist()],
        "indptr": [int(x) for x in members.indptr.tolist()],
        "indices": [int(x) for x in members.indices.tolist()],
    }
