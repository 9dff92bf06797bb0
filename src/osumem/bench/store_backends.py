"""The same benchmark rows through every store backend.

Each episode's steps are written into a store (one namespace per episode, one add per
episode, the episode's own embeddings) and read back from a fresh open; the benchmark's
rows are then computed on the view each store gives back, and the memory's own query
path (``Memory.retrieve`` with the query vector, every method and budget) is asked the
episode's queries. Rows and answers of every store are compared with each other and
with the rows of the episodes as built in process (no store): a store that loses or
changes anything a retriever reads (a bit of an embedding, an entity, a cost, the order
of the steps) shows up as a differing row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from osumem.types import Episode, MemoryView, Step

#: The columns of a row that a backend could change (the timing columns cannot match).
ROW_KEYS = ("episode", "query", "method", "budget", "hit1", "hit2", "recall", "n_found", "cost")


def episode_steps(view: MemoryView) -> list[Step]:
    """The steps of an episode's view, as an agent would add them."""
    return [
        Step(
            role=str(view.roles[p]) if view.roles is not None else "assistant",
            text=str(view.texts[p]) if view.texts is not None else "",
            tool_action=str(view.tool_actions[p]),
            tool_signature=str(view.tool_signatures[p]),
            entities=view.entities[p],
            subgoal=str(view.subgoals[p]),
            source=str(view.sources[p]),
            cost=int(view.costs[p]),
        )
        for p in range(view.n)
    ]


def _rows(
    episodes: Sequence[tuple[int, Episode]], methods: Sequence[str], budgets: Sequence[int]
) -> list[tuple[Any, ...]]:
    from osumem.evaluate.runner import evaluate_episode, parse_method_runs

    runs = parse_method_runs(methods)
    out = []
    for seed, ep in episodes:
        for row in evaluate_episode(ep, runs, budgets, benchmark="store", seed=seed):
            out.append((*(row[k] for k in ROW_KEYS), tuple(row["ev_found"])))
    return out


def compare_backends(
    episodes: Sequence[tuple[int, Episode]],
    locations: dict[str, str],
    methods: Sequence[str],
    budgets: Sequence[int],
) -> dict[str, Any]:
    """Write ``episodes`` into each store of ``locations`` (name -> location, each a new
    store), compute the rows on the views read back and ask every query through
    ``Memory.retrieve``; returns the counts of equal rows and answers."""
    from osumem.memory import Memory

    reference = _rows(episodes, methods, budgets)
    result: dict[str, Any] = {"rows": len(reference), "backends": {}}
    answers: dict[str, list[tuple[Any, ...]]] = {}
    for name, location in locations.items():
        with Memory.open(location, method=methods[0]) as mem:
            for _seed, ep in episodes:
                mem.add_steps(
                    episode_steps(ep.view), namespace=ep.episode_id, embeddings=ep.view.embeddings
                )
        loaded = []
        got: list[tuple[Any, ...]] = []
        for method in methods:
            with Memory.open(location, method=method) as mem:
                for seed, ep in episodes:
                    view = mem.view(ep.episode_id)
                    if method == methods[0]:
                        loaded.append(
                            (
                                seed,
                                Episode(
                                    episode_id=ep.episode_id,
                                    view=view,
                                    queries=ep.queries,
                                    meta=ep.meta,
                                ),
                            )
                        )
                    for q in ep.queries:
                        for b in budgets:
                            sel = mem.retrieve(q.vector, b, namespace=ep.episode_id, before=q.t)
                            got.append((ep.episode_id, q.qid, method, b, sel.positions))
        rows = _rows(loaded, methods, budgets)
        answers[name] = got
        result["backends"][name] = {
            "rows_equal_in_process": sum(a == b for a, b in zip(rows, reference, strict=True)),
        }
    names = list(locations)
    first = answers[names[0]]
    result["answers"] = len(first)
    for name in names[1:]:
        result["backends"][name][f"answers_equal_{names[0]}"] = sum(
            a == b for a, b in zip(answers[name], first, strict=True)
        )
    return result
