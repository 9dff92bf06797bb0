"""tau-bench trajectories: load the results JSON, read each trajectory with
the OpenAI chat reader, and match each task's ground-truth actions to the tool-call
steps that executed them.

Matching (``match``):

* ``"exact"``: a ground-truth action matches a tool-call step with the same action name
  and the same arguments (JSON-equal, key order ignored);
* ``"relaxed"`` (default): as exact when possible; otherwise the step with the same
  action name that agrees on the most top-level arguments (ties: the earliest). This
  counts a step that executed the action with slightly different arguments (a failed
  trajectory) as the step that executed it.

Each step matches at most one action; actions are matched in their listed order.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osumem.annotate import DEFAULT_BOILERPLATE
from osumem.errors import ConfigError, DataFileError, InvalidInputError
from osumem.ingest.openai_chat import read_messages
from osumem.types import Step

MATCH_MODES: tuple[str, ...] = ("exact", "relaxed")


@dataclass(frozen=True, kw_only=True)
class TauSource:
    """One tau-bench trajectory as steps, with its matched ground-truth evidence.

    ``evidence`` holds positions into ``steps`` (sorted); ``n_exact`` / ``n_relaxed``
    count ground-truth actions matched exactly / by the relaxed rule (relaxed ⊇ exact).
    """

    task_id: int
    trial: int
    reward: float
    source: str
    instruction: str
    steps: tuple[Step, ...]
    evidence: tuple[int, ...]
    n_actions: int
    n_exact: int
    n_relaxed: int


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def match_actions(
    steps: Sequence[Step], actions: Sequence[Mapping[str, Any]], *, match: str = "relaxed"
) -> tuple[tuple[int, ...], int, int]:
    """Match ground-truth ``actions`` (``{"name", "kwargs"}``) to tool-call ``steps``.

    Returns ``(positions, n_exact, n_relaxed)``: the matched step positions under
    ``match`` (sorted), how many actions matched exactly, and how many matched under
    the relaxed rule. See the module docstring for the rules.
    """
    if match not in MATCH_MODES:
        raise ConfigError(f"match must be one of {MATCH_MODES}, got {match!r}")
    calls = [(i, s) for i, s in enumerate(steps) if s.tool_action]
    used_exact: set[int] = set()
    used_relaxed: set[int] = set()
    n_exact = n_relaxed = 0
    for a in actions:
        name = a.get("name")
        kwargs = dict(a.get("kwargs") or {})
        cands = [(i, s) for i, s in calls if s.tool_action == name]
        want = _canon(kwargs)
        exact = [i for i, s in cands if _canon(dict(s.arguments)) == want]
        free_exact = [i for i in exact if i not in used_exact]
        if free_exact:
            used_exact.add(free_exact[0])
            n_exact += 1
        free = [(i, s) for i, s in cands if i not in used_relaxed]
        if free:
            best = max(
                free,
                key=lambda c: (
                    _canon(dict(c[1].arguments)) == want,
                    sum(
                        k in c[1].arguments and _canon(c[1].arguments[k]) == _canon(v)
                        for k, v in kwargs.items()
                    ),
                    -c[0],
                ),
            )
            used_relaxed.add(best[0])
            n_relaxed += 1
    chosen = used_exact if match == "exact" else used_relaxed
    return tuple(sorted(chosen)), n_exact, n_relaxed


def load_taubench(
    path: str | Path,
    *,
    prefix_namespace: bool = True,
    boilerplate: Iterable[str] = DEFAULT_BOILERPLATE,
    match: str = "relaxed",
    max_observation_chars: int | None = None,
) -> list[TauSource]:
    """Read a tau-bench results file (a list of ``{task_id, trial, reward, info: {task:
    {instruction, actions}}, traj}``) into :class:`TauSource` records, one per
    trajectory, source ``t<task_id>r<trial>``. ``max_observation_chars`` cuts each
    tool response in the step texts (:func:`osumem.ingest.openai_chat.read_messages`).

    Raises :class:`DataFileError` when the file is missing and
    :class:`InvalidInputError` naming the record for a malformed one.
    """
    p = Path(path)
    if not p.is_file():
        raise DataFileError(f"tau-bench file not found: {p}")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{p}: invalid JSON ({exc.msg})") from None
    if not isinstance(data, list):
        raise InvalidInputError(f"{p}: expected a list of trajectories")
    boiler = frozenset(boilerplate)
    out: list[TauSource] = []
    for r, rec in enumerate(data):
        where = f"{p.name}[{r}]"
        try:
            task = rec["info"]["task"]
            traj = rec["traj"]
            task_id = int(rec["task_id"])
            trial = int(rec.get("trial", 0))
        except (KeyError, TypeError, ValueError):
            raise InvalidInputError(
                f"{where}: expected task_id, traj and info.task (instruction, actions)"
            ) from None
        source = f"t{task_id}r{trial}"
        steps = read_messages(
            traj,
            source=source,
            boilerplate=boiler,
            prefix_namespace=prefix_namespace,
            max_observation_chars=max_observation_chars,
            where=f"{where}.traj",
        )
        actions = task.get("actions") or []
        evidence, n_exact, n_relaxed = match_actions(steps, actions, match=match)
        out.append(
            TauSource(
                task_id=task_id,
                trial=trial,
                reward=float(rec.get("reward", 0.0)),
                source=source,
                instruction=str(task.get("instruction", "")),
                steps=tuple(steps),
                evidence=evidence,
                n_actions=len(actions),
                n_exact=n_exact,
                n_relaxed=n_relaxed,
            )
        )
    return out


def match_stats(sources: Sequence[TauSource], *, min_evidence: int = 2) -> dict[str, Any]:
    """How many ground-truth actions matched (exact, relaxed) and how many trajectories
    have at least ``min_evidence`` evidence steps (focal candidates)."""
    return {
        "trajectories": len(sources),
        "steps": sum(len(s.steps) for s in sources),
        "gt_actions": sum(s.n_actions for s in sources),
        "matched_exact": sum(s.n_exact for s in sources),
        "matched_relaxed": sum(s.n_relaxed for s in sources),
        "focal_candidates": sum(len(s.evidence) >= min_evidence for s in sources),
    }
