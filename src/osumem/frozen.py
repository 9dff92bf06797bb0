"""The base of the project's frozen, keyword-only configuration dataclasses.

:class:`FrozenConfig` gives every config the same operations: :meth:`~FrozenConfig.replace`
(unknown names are an error), :meth:`~FrozenConfig.with_strings` (command-line / TOML
strings coerced to the declared field types, every problem reported at once),
:meth:`~FrozenConfig.to_dict` (JSON-ready, what run metadata records) and
:meth:`~FrozenConfig.part` (the fields a base config declares, as that config).

Values are validated declaratively, in the spirit of scikit-learn's
``_parameter_constraints``: a config lists, per field, the constraint its value must
meet (:class:`Interval`, :class:`Options`, :class:`Subset`, :class:`Permutation`,
:class:`Boolean`, :class:`Weights`, :class:`IncreasingPair`, :class:`TupleOf`, or a tuple of alternatives
where ``None`` admits ``None``). Construction checks every field and raises one
:class:`~osumem.errors.ConfigError` that names each bad field and its value. Checks
that involve several fields go in :meth:`FrozenConfig._cross_check`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any, ClassVar, Literal, Self, TypeVar

from osumem.errors import ConfigError


def describe_type(annotation: Any) -> str:
    """A field type in words, for error messages (``int`` → "an integer",
    ``tuple[float, float]`` → "2 numbers written a,b")."""
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return f"{describe_type(options[0]) if options else 'a value'} or none"
    if origin is tuple:
        items = typing.get_args(annotation)
        word = {int: "integers", float: "numbers", str: "names"}.get(items[0] if items else str)
        if items and items[-1] is not Ellipsis:
            return f"{len(items)} {word} written {','.join('abcdefgh'[: len(items)])}"
        return f"{word} written a,b,..."
    words = {int: "an integer", float: "a number", bool: "true or false", str: "text"}
    return words.get(annotation, str(annotation))


def _read(value: str, ann: Any) -> Any:
    """``value`` read as ``ann``; ``ValueError`` when it cannot be."""
    origin = typing.get_origin(ann)
    if origin in (types.UnionType, typing.Union):
        if value.lower() in ("none", "null"):
            return None
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        return _read(value, args[0] if args else str)
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
        parts = [p for p in value.replace("+", ",").split(",") if p]
        if inner and inner[-1] is not Ellipsis and len(parts) != len(inner):
            raise ValueError(value)
        return tuple(_read(p, inner[0] if inner else str) for p in parts)
    return value


def coerce(value: Any, annotation: Any, where: str) -> Any:
    """Turn a command-line string into the type a config field declares (bool, int,
    float, a tuple of those written ``a,b`` or ``a+b`` (of the declared length when
    the tuple has one), optional ``none``); other values pass through. A string that
    cannot be read raises :class:`ConfigError` naming ``where`` and the type in
    words (:func:`describe_type`)."""
    if not isinstance(value, str):
        return value
    ann = annotation
    if isinstance(ann, str):
        ann = {"int": int, "float": float, "bool": bool, "str": str}.get(ann, ann)
    try:
        return _read(value, ann)
    except ValueError:
        raise ConfigError(f"{where}: expected {describe_type(ann)}, got {value!r}") from None


# --- constraints ------------------------------------------------------------------


class Constraint(ABC):
    """What one field's value must be. :meth:`is_type` says whether the value has
    the right type (cross-field checks run only over well-typed values);
    :meth:`holds` whether it meets the whole constraint; :meth:`describe` completes
    the sentence "``field`` must be ...".
    """

    def is_type(self, value: Any) -> bool:
        """Whether ``value`` has a type this constraint can judge."""
        return True

    @abstractmethod
    def holds(self, value: Any) -> bool:
        """Whether ``value`` meets the constraint."""

    @abstractmethod
    def describe(self) -> str:
        """What a valid value is, e.g. ``">= 1"`` or ``"in [0, 1]"``."""

    def describe_for(self, value: Any) -> str:
        """:meth:`describe` worded for the rejected ``value`` (e.g. naming the type
        when the value has the wrong one)."""
        return self.describe()


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _num(x: float) -> str:
    if x == math.inf:
        return "inf"
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclasses.dataclass(frozen=True)
class Interval(Constraint):
    """A number of ``kind`` (``int``: integers; ``float``: any real, ints included)
    between ``left`` and ``right`` (``None``: unbounded), each end included or not as
    ``closed`` says. ``right=math.inf`` with an open right end asks for a finite
    number. NaN never holds."""

    kind: type
    left: float | None
    right: float | None
    closed: Literal["both", "left", "right", "neither"] = "both"

    def is_type(self, value: Any) -> bool:
        return _is_int(value) if self.kind is int else _is_real(value)

    def holds(self, value: Any) -> bool:
        if not self.is_type(value) or value != value:  # NaN
            return False
        lo_in = self.closed in ("both", "left")
        hi_in = self.closed in ("both", "right")
        above = self.left is None or (value >= self.left if lo_in else value > self.left)
        below = self.right is None or (value <= self.right if hi_in else value < self.right)
        return bool(above and below)

    def describe(self) -> str:
        lo_in = self.closed in ("both", "left")
        hi_in = self.closed in ("both", "right")
        left, right = self.left, self.right
        lo = None if left is None else f"{'>=' if lo_in else '>'} {_num(left)}"
        if right == math.inf and not hi_in:
            return f"a finite number {lo}" if lo else "a finite number"
        if right is None:
            return lo or "a number"
        if left is None:
            return f"{'<=' if hi_in else '<'} {_num(right)}"
        return f"in {'[' if lo_in else '('}{_num(left)}, {_num(right)}{']' if hi_in else ')'}"

    def describe_for(self, value: Any) -> str:
        text = self.describe()
        if self.is_type(value) or text.startswith("a "):
            return text
        return f"{'an integer' if self.kind is int else 'a number'} {text}"


def _options_text(options: Sequence[Any]) -> str:
    words = [repr(o) for o in options]
    if len(words) == 2:
        return f"{words[0]} or {words[1]}"
    return "one of " + ", ".join(words)


@dataclasses.dataclass(frozen=True)
class Options(Constraint):
    """One of a fixed set of values (strings, usually)."""

    options: tuple[Any, ...]

    def holds(self, value: Any) -> bool:
        try:
            return value in self.options
        except TypeError:  # unhashable or incomparable
            return False

    def describe(self) -> str:
        return _options_text(self.options)


def _is_seq(value: Any) -> bool:
    return isinstance(value, tuple | list)


@dataclasses.dataclass(frozen=True)
class Subset(Constraint):
    """A tuple of values drawn from ``options`` (at least one unless ``nonempty``
    is false)."""

    options: tuple[Any, ...]
    nonempty: bool = True

    def is_type(self, value: Any) -> bool:
        return _is_seq(value)

    def holds(self, value: Any) -> bool:
        if not _is_seq(value) or (self.nonempty and not value):
            return False
        return all(Options(self.options).holds(v) for v in value)

    def describe(self) -> str:
        return f"{'a non-empty' if self.nonempty else 'a'} subset of {self.options}"


@dataclasses.dataclass(frozen=True)
class Permutation(Constraint):
    """A tuple holding every one of ``options`` exactly once, in any order."""

    options: tuple[Any, ...]

    def is_type(self, value: Any) -> bool:
        return _is_seq(value)

    def holds(self, value: Any) -> bool:
        return _is_seq(value) and sorted(map(str, value)) == sorted(map(str, self.options))

    def describe(self) -> str:
        return f"an ordering of all of {self.options}"


@dataclasses.dataclass(frozen=True)
class TupleOf(Constraint):
    """A tuple whose every item meets ``item`` (at least one unless ``nonempty`` is
    false)."""

    item: Constraint
    nonempty: bool = True

    def is_type(self, value: Any) -> bool:
        return _is_seq(value) and all(self.item.is_type(v) for v in value)

    def holds(self, value: Any) -> bool:
        if not _is_seq(value) or (self.nonempty and not value):
            return False
        return all(self.item.holds(v) for v in value)

    def describe(self) -> str:
        return (
            f"{'a non-empty' if self.nonempty else 'a'} tuple of values each {self.item.describe()}"
        )


@dataclasses.dataclass(frozen=True)
class Boolean(Constraint):
    """``True`` or ``False``."""

    def is_type(self, value: Any) -> bool:
        return isinstance(value, bool) or type(value).__name__ == "bool_"

    def holds(self, value: Any) -> bool:
        return self.is_type(value)

    def describe(self) -> str:
        return "True or False"


@dataclasses.dataclass(frozen=True)
class Weights(Constraint):
    """A tuple of ``size`` finite numbers >= 0, not all zero."""

    size: int

    def is_type(self, value: Any) -> bool:
        return _is_seq(value) and all(_is_real(w) for w in value)

    def holds(self, value: Any) -> bool:
        if not self.is_type(value) or len(value) != self.size:
            return False
        return all(0.0 <= w < math.inf for w in value) and sum(value) > 0

    def describe(self) -> str:
        return "finite numbers >= 0, not all zero"

    def describe_for(self, value: Any) -> str:
        if _is_seq(value) and len(value) == self.size:
            return self.describe()
        return f"{self.size} {self.describe()}"


@dataclasses.dataclass(frozen=True)
class IncreasingPair(Constraint):
    """An inclusive integer range ``(lo, hi)`` with ``low <= lo <= hi``."""

    low: int = 1

    def is_type(self, value: Any) -> bool:
        return _is_seq(value) and len(value) == 2 and all(_is_int(v) for v in value)

    def holds(self, value: Any) -> bool:
        return self.is_type(value) and self.low <= value[0] <= value[1]

    def describe(self) -> str:
        return f"an increasing range (lo, hi) of integers >= {self.low}"


#: A field's declaration: one constraint, or a tuple of alternatives (``None`` in it
#: admits the value ``None``).
ConstraintSpec = Constraint | tuple[Constraint | None, ...]


#: A config's declarations: field name → constraint.
Constraints = Mapping[str, ConstraintSpec]
#: A config's paper symbols: field name → symbol.
Symbols = Mapping[str, str]


def _alternatives(spec: ConstraintSpec) -> tuple[Constraint | None, ...]:
    return spec if isinstance(spec, tuple) else (spec,)


def check_value(spec: ConstraintSpec, value: Any) -> tuple[bool, bool]:
    """``(typed, holds)`` of ``value`` under ``spec``: whether some alternative can
    judge its type, and whether some alternative holds."""
    alts = _alternatives(spec)
    if value is None and None in alts:
        return True, True
    cons = [c for c in alts if c is not None]
    return any(c.is_type(value) for c in cons), any(c.holds(value) for c in cons)


def describe_spec(spec: ConstraintSpec, value: Any) -> str:
    """The sentence end of ``spec`` for the rejected ``value`` (alternatives joined
    with "or")."""
    return " or ".join("None" if c is None else c.describe_for(value) for c in _alternatives(spec))


# --- the base ---------------------------------------------------------------------

C = TypeVar("C", bound="FrozenConfig")


#: Per-class facts computed once: (class, what) → value.
_CLASS_CACHE: dict[tuple[type, str], Any] = {}


def _merged(cls: type, attribute: str) -> Mapping[str, Any]:
    """``attribute`` (a mapping) merged along ``cls``'s hierarchy, a subclass's entry
    winning; computed once per class."""
    key = (cls, attribute)
    if key not in _CLASS_CACHE:
        merged: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            merged.update(klass.__dict__.get(attribute, {}))
        _CLASS_CACHE[key] = merged
    return _CLASS_CACHE[key]


def _field_names(cls: type) -> tuple[str, ...]:
    key = (cls, "fields")
    if key not in _CLASS_CACHE:
        _CLASS_CACHE[key] = tuple(f.name for f in dataclasses.fields(cls))
    return _CLASS_CACHE[key]


def _type_hints(cls: type) -> dict[str, Any]:
    key = (cls, "hints")
    if key not in _CLASS_CACHE:
        _CLASS_CACHE[key] = typing.get_type_hints(cls)
    return _CLASS_CACHE[key]


@dataclasses.dataclass(frozen=True, kw_only=True)
class FrozenConfig:
    """Base of a frozen keyword-only config dataclass (subclasses add the fields).

    Subclasses declare ``parameter_constraints`` (field name → constraint; merged
    along the class hierarchy, a subclass's entry wins) and, for a field with a paper
    symbol, ``parameter_symbols`` (field name → symbol, shown in messages). Every
    field is checked at construction; all problems raise one :class:`ConfigError`.
    """

    #: The name errors use for this config (default: the class name).
    config_name: ClassVar[str] = ""
    #: Field name → what its value must be (see the module docstring).
    parameter_constraints: ClassVar[Constraints] = {}
    #: Field name → the paper's symbol for it (e.g. ``"Δ_gap"``), used in messages.
    parameter_symbols: ClassVar[Symbols] = {}

    def __post_init__(self) -> None:
        problems, typed = self._field_problems()
        if typed:
            problems.extend(self._cross_check())
        if problems:
            raise ConfigError(f"{self._label()}: " + "; ".join(problems))

    @classmethod
    def constraints(cls) -> dict[str, ConstraintSpec]:
        """Every declared constraint, merged along the class hierarchy."""
        return dict(_merged(cls, "parameter_constraints"))

    @classmethod
    def symbols(cls) -> dict[str, str]:
        """Every declared parameter symbol, merged along the class hierarchy."""
        return dict(_merged(cls, "parameter_symbols"))

    @classmethod
    def describe_field(cls, name: str) -> str:
        """The field's name with its paper symbol, e.g. ``"gap (Δ_gap)"``."""
        symbol = cls.symbols().get(name)
        return f"{name} ({symbol})" if symbol else name

    def _field_problems(self) -> tuple[list[str], bool]:
        """Every field that breaks its constraint, in declaration order, and whether
        every constrained value at least had the right type."""
        constraints = _merged(type(self), "parameter_constraints")
        problems: list[str] = []
        all_typed = True
        for name in _field_names(type(self)):
            spec = constraints.get(name)
            if spec is None:
                continue
            value = getattr(self, name)
            typed, holds = check_value(spec, value)
            all_typed &= typed
            if not holds:
                problems.append(
                    f"{self.describe_field(name)} must be {describe_spec(spec, value)}, got {value!r}"
                )
        return problems, all_typed

    def _cross_check(self) -> list[str]:
        """Problems that involve several fields (override; runs once every
        constrained field has the right type)."""
        return []

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
        (:func:`coerce`); unknown names, unreadable values and values that break their
        constraints are all reported together in one :class:`ConfigError`."""
        where = where or self._label()
        hints = _type_hints(type(self))
        known = set(_field_names(type(self)))
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
        try:  # the readable values' range problems join the others
            changed = dataclasses.replace(self, **coerced)
        except ConfigError as exc:
            problems.append(str(exc))
        if problems:
            raise ConfigError("; ".join(problems))
        return changed

    def to_dict(self) -> dict[str, Any]:
        """Every parameter by name: the JSON-ready form run metadata records (paths
        as strings, sets as sorted lists)."""
        return {k: _plain(v) for k, v in dataclasses.asdict(self).items()}

    def part(self, base: type[C]) -> C:
        """The fields ``base`` declares, read from this config, as a ``base`` (a
        config that extends another, e.g. OSU-Mem's over the OSU construction
        config, hands the construction part on without copying fields by hand)."""
        if isinstance(self, base) and type(self) is base:
            return self
        if not isinstance(self, base):
            raise ConfigError(f"{self._label()} does not extend {base.__name__}")
        return base(**{name: getattr(self, name) for name in base.field_names()})


def _plain(value: Any) -> Any:
    """``value`` with paths as strings and sets as sorted lists, at any depth."""
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, frozenset | set):
        return sorted(_plain(v) for v in value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return type(value)(_plain(v) for v in value)
    return value
