"""The base of the project's frozen, keyword-only configuration dataclasses.

:class:`FrozenConfig` gives every config the same three operations: :meth:`replace`
(unknown names are an error), :meth:`with_strings` (command-line / TOML strings coerced
to the declared field types, every problem reported at once) and :meth:`to_dict`
(JSON-ready, what run metadata records). Validation of values stays in each config's
``__post_init__``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Self

from osumem.errors import ConfigError


def coerce(value: Any, annotation: Any, where: str) -> Any:
    """Turn a command-line string into the type a config field declares (bool, int,
    float, a tuple of those written ``a,b`` or ``a+b``, optional ``none``); other values
    pass through. A string that cannot be read raises :class:`ConfigError` naming
    ``where``."""
    if not isinstance(value, str):
        return value
    ann = annotation
    if isinstance(ann, str):
        ann = {"int": int, "float": float, "bool": bool, "str": str}.get(ann, ann)
    origin = typing.get_origin(ann)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if value.lower() in ("none", "null"):
            return None
        ann = args[0] if args else str
        origin = typing.get_origin(ann)
    try:
        if ann is bool:
            low = value.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if ann is int:
            return int(value)
        if ann is float:
            return float(value)
        if origin is tuple:
            inner = typing.get_args(ann)
            item = inner[0] if inner else str
            parts = [p for p in value.replace("+", ",").split(",") if p]
            return tuple(coerce(p, item, where) for p in parts)
    except ValueError:
        raise ConfigError(f"{where}: cannot read {value!r} as {ann}") from None
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class FrozenConfig:
    """Base of a frozen keyword-only config dataclass (subclasses add the fields)."""

    #: The name errors use for this config (default: the class name).
    config_name: typing.ClassVar[str] = ""

    @classmethod
    def _label(cls) -> str:
        return cls.config_name or cls.__name__

    @classmethod
    def field_names(cls) -> list[str]:
        """The config's parameter names, in declaration order."""
        return [f.name for f in dataclasses.fields(cls)]

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied; unknown names raise :class:`ConfigError`."""
        known = self.field_names()
        unknown = sorted(set(changes) - set(known))
        if unknown:
            raise ConfigError(
                f"{self._label()}: unknown parameter(s) {unknown}; known: {sorted(known)}"
            )
        return dataclasses.replace(self, **changes)

    def with_strings(self, values: Mapping[str, Any], where: str | None = None) -> Self:
        """A copy with ``values`` applied, strings coerced to each field's declared type
        (:func:`coerce`); unknown names and unreadable values are reported together in
        one :class:`ConfigError`."""
        where = where or self._label()
        hints = typing.get_type_hints(type(self))
        known = set(self.field_names())
        problems = []
        unknown = sorted(set(values) - known)
        if unknown:
            problems.append(f"{where}: unknown parameter(s) {unknown}; known: {sorted(known)}")
        coerced = {}
        for k, v in values.items():
            if k not in known:
                continue
            try:
                coerced[k] = coerce(v, hints.get(k, str), f"{where}.{k}")
            except ConfigError as exc:
                problems.append(str(exc))
        if problems:
            raise ConfigError("; ".join(problems))
        return dataclasses.replace(self, **coerced)

    def to_dict(self) -> dict[str, Any]:
        """Every parameter by name: the JSON-ready form run metadata records."""
        return dataclasses.asdict(self)
