"""The resolved method table: what each method label of a run was.

A run's method labels are specs (``osumem``, ``osumem[max_memberships=3]``) plus the
``--set`` overrides applied to them. :func:`method_table` resolves them once, when the
rows are written, into one record per label: the registry name, every parameter of the
resulting config, whether it is an oracle, and the registered method whose config it
equals (``alias``: the paper's numbers for that method apply; ``None`` when no
registered method has this exact config). It is stored beside the rows in
``<name>.json`` under ``method_table``; the report reads it back with
:func:`read_method_table` instead of re-deriving anything from the labels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from osumem.errors import OSUMemError, UnknownMethodError
from osumem.evaluate.runner import MethodRun, parse_method_runs
from osumem.retrieve.registry import available, get_class, get_spec, make_config

#: The key of the method table in a row file's metadata.
TABLE_KEY = "method_table"


@dataclass(frozen=True, kw_only=True)
class ResolvedMethod:
    """One method label of a run, resolved."""

    label: str
    method: str
    params: Mapping[str, Any]
    is_oracle: bool
    alias: str | None

    def display(self) -> str:
        """The label for a table: the spec, ``(= alias)`` when it is configured like a
        differently named registered method, ``(oracle)`` for oracles."""
        text = self.label
        if self.alias is not None and self.alias != self.label:
            text += f" (= {self.alias})"
        return text + (" (oracle)" if self.is_oracle else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what the metadata stores)."""
        return {**dataclasses.asdict(self), "params": dict(self.params)}


def _alias(run: MethodRun, config: Any) -> str | None:
    target = get_spec(run.method).target
    for name in dict.fromkeys([run.method, *available()]):
        if get_spec(name).target == target and make_config(name) == config:
            return name
    return None


def resolve(runs: Iterable[MethodRun]) -> list[ResolvedMethod]:
    """Resolve parsed runs (:func:`~osumem.evaluate.runner.parse_method_runs`)."""
    out = []
    for run in runs:
        config = make_config(run.method, run.params)
        out.append(
            ResolvedMethod(
                label=run.label,
                method=run.method,
                params=config.to_dict(),
                is_oracle=bool(get_class(run.method).is_oracle),
                alias=_alias(run, config),
            )
        )
    return out


def method_table(runs: Iterable[MethodRun]) -> list[dict[str, Any]]:
    """The JSON-ready method table of ``runs`` (one dict per label)."""
    return [m.to_dict() for m in resolve(runs)]


def _unresolved(label: str) -> ResolvedMethod:
    """A label that names no registered method (e.g. rows renamed by hand)."""
    return ResolvedMethod(label=label, method=label, params={}, is_oracle=False, alias=label)


def read_method_table(meta: Mapping[str, Any], labels: Sequence[str]) -> dict[str, ResolvedMethod]:
    """Every label of ``labels`` resolved: from the metadata's method table when the
    rows were written with one; for result directories written without one, each label
    is resolved as a method spec with no overrides (a label that is no valid spec
    stays unresolved: itself, not an oracle)."""
    table = {
        d["label"]: ResolvedMethod(**{k: d[k] for k in ResolvedMethod.__dataclass_fields__})
        for d in meta.get(TABLE_KEY, [])
    }
    out = {}
    for label in dict.fromkeys(labels):
        if label in table:
            out[label] = table[label]
            continue
        try:
            (resolved,) = resolve(parse_method_runs([label]))
        except OSUMemError:
            resolved = _unresolved(label)
        out[label] = resolved
    return out


def runnable_methods() -> list[str]:
    """Every registered method that is not an oracle and whose module imports (an
    optional dependency may be missing), in registry order."""
    names = []
    for name in available():
        try:
            cls = get_class(name)
        except (UnknownMethodError, ImportError):
            continue
        if not cls.is_oracle:
            names.append(name)
    return names
