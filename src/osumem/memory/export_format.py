"""The export file's format: its records and the reader that checks a whole file
(every line, in order) before an import writes anything. See
:mod:`osumem.memory.export` for the format and for export and import."""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import (
    DataFileError,
    DuplicateInputError,
    IncompatibleStoreError,
    InvalidInputError,
)
from osumem.memory.rows import STEP_TEXT_COLUMNS, StepRow
from osumem.memory.validate import check_messages, check_metadata, check_namespace, step_row
from osumem.types import Step

if TYPE_CHECKING:
    pass

#: The format name in an export's header line.
EXPORT_FORMAT = "osumem-export"
#: The version this osumem writes and reads.
EXPORT_VERSION = 1
#: The step fields of an export line and the JSON type of each.
STEP_FIELDS: dict[str, type] = {
    **{name: str for name in STEP_TEXT_COLUMNS},
    "arguments": dict,
    "entities": list,
    "cost": int,
}


class ExportFormatError(InvalidInputError):
    """An export file cannot be imported: the message names the file and line."""


class ImportConflictError(DuplicateInputError):
    """An imported namespace already holds other content in the store (pass
    ``replace=True`` to overwrite it)."""


@dataclass(frozen=True)
class NamespaceExport:
    """One namespace of an export, checked.

    Attributes:
        name: the namespace.
        rows: its steps as store rows, in position order.
        embeddings: ``(n, dim)`` float32 (``None`` when the file holds none).
        batch_ends: the add-batch end positions, increasing, the last one ``n``.
        held: the held messages.
        digests: ``(digest, end position)`` of the logs added.
        line: the line of its namespace record (for error messages).
    """

    name: str
    rows: tuple[StepRow, ...]
    embeddings: NDArray[np.float32] | None
    batch_ends: tuple[int, ...]
    held: tuple[dict[str, Any], ...]
    digests: tuple[tuple[str, int], ...]
    line: int = 0


@dataclass(frozen=True)
class ExportData:
    """A whole export file, read and checked (see :func:`read_export`)."""

    encoder: str
    dim: int
    has_embeddings: bool
    namespaces: tuple[NamespaceExport, ...]
    library_version: str = ""


@dataclass(frozen=True)
class ImportSummary:
    """What :func:`import_export` did: per namespace, ``"imported"``, ``"replaced"``
    or ``"unchanged"`` (already held with the same content), and the steps written."""

    outcome: dict[str, str] = field(default_factory=dict)
    steps_written: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {"namespaces": dict(self.outcome), "steps_written": self.steps_written}


# --- reading an export ------------------------------------------------------------------


class _Reader:
    """Checks the lines of one export file in order (every error names its line)."""

    def __init__(self, where: str, max_text_chars: int) -> None:
        self.where = where
        self.limit = max_text_chars

    def fail(self, number: int, message: str) -> ExportFormatError:
        return ExportFormatError(f"{self.where} line {number}: {message}")

    def field(self, obj: Mapping[str, Any], key: str, kind: Any, number: int) -> Any:
        if key not in obj:
            raise self.fail(number, f"{obj.get('kind', 'record')} record without {key!r}")
        value = obj[key]
        bad_bool = kind is not bool and isinstance(value, bool)
        if bad_bool or not isinstance(value, kind):
            name = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise self.fail(number, f"{key!r}: expected {name}, got {_shown(value)}")
        return value

    def header(self, obj: Mapping[str, Any], number: int) -> tuple[str, int, bool, list[str]]:
        if obj.get("kind") != "header" or obj.get("format") != EXPORT_FORMAT:
            raise self.fail(
                number, f"not an {EXPORT_FORMAT} file (the first line is not its header)"
            )
        version = self.field(obj, "version", int, number)
        if version != EXPORT_VERSION:
            raise self.fail(
                number,
                f"export format version {version} (written by osumem "
                f"{obj.get('library_version', '?')}); this osumem reads version {EXPORT_VERSION}",
            )
        encoder = self.field(obj, "encoder", str, number)
        dim = self.field(obj, "dim", int, number)
        if dim < 0 or (dim == 0) != (encoder == ""):
            raise self.fail(number, f"encoder {encoder!r} with dimension {dim}")
        has = self.field(obj, "embeddings", bool, number)
        names = self.field(obj, "namespaces", list, number)
        for ns in names:
            try:
                check_namespace(ns)
            except InvalidInputError as exc:
                raise self.fail(number, str(exc)) from None
        if len(set(names)) != len(names):
            raise self.fail(number, "a namespace is listed twice")
        return encoder, dim, has, list(names)

    def namespace(
        self, obj: Mapping[str, Any], number: int, expected: str
    ) -> tuple[int, tuple[int, ...], tuple[dict[str, Any], ...], tuple[tuple[str, int], ...]]:
        name = self.field(obj, "name", str, number)
        if name != expected:
            raise self.fail(number, f"namespace {name!r}, the header lists {expected!r} here")
        n = self.field(obj, "steps", int, number)
        if n < 0:
            raise self.fail(number, f"'steps': {n} is negative")
        ends = self.field(obj, "batch_ends", list, number)
        if not all(isinstance(e, int) and not isinstance(e, bool) for e in ends):
            raise self.fail(number, "'batch_ends': expected a list of positions")
        if any(b <= a for a, b in zip([0, *ends], ends, strict=False)) or (
            (ends[-1] if ends else 0) != n
        ):
            raise self.fail(
                number, f"'batch_ends' {_shown(ends)} do not increase from 1 up to {n} steps"
            )
        held = self.field(obj, "held", list, number)
        try:
            clean = check_messages(held, self.limit)
        except InvalidInputError as exc:
            raise self.fail(number, f"held messages: {exc}") from None
        digests = self.field(obj, "digests", list, number)
        allowed = {0, *ends}
        out: list[tuple[str, int]] = []
        for d in digests:
            ok = (
                isinstance(d, list)
                and len(d) == 2
                and isinstance(d[0], str)
                and d[0]
                and isinstance(d[1], int)
                and not isinstance(d[1], bool)
            )
            if not ok:
                raise self.fail(number, f"'digests': expected [digest, end] pairs, got {_shown(d)}")
            if d[1] not in allowed:
                raise self.fail(number, f"'digests': end {d[1]} is not an add-batch end")
            out.append((d[0], d[1]))
        if len({d for d, _ in out}) != len(out):
            raise self.fail(number, "'digests': a digest is listed twice")
        return n, tuple(ends), tuple(clean), tuple(sorted(out, key=lambda x: (x[1], x[0])))

    def extras(self, obj: Mapping[str, Any], number: int) -> dict[str, Any]:
        """A step line's optional ``metadata``, ``time`` and ``updated``, checked."""
        out: dict[str, Any] = {}
        if "metadata" in obj:
            meta = self.field(obj, "metadata", dict, number)
            try:
                out["metadata_json"] = check_metadata(meta, "metadata", self.limit)
            except InvalidInputError as exc:
                raise self.fail(number, f"'metadata': {exc}") from None
        for key in ("time", "updated"):
            if key in obj:
                value = obj[key]
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise self.fail(number, f"'{key}': expected a number, got {_shown(value)}")
                if not math.isfinite(value):
                    raise self.fail(number, f"'{key}': {value} is not finite")
                out[key] = float(value)
        return out

    def step(
        self,
        obj: Mapping[str, Any],
        number: int,
        namespace: str,
        position: int,
        dim: int,
        has_embeddings: bool,
    ) -> tuple[StepRow, NDArray[np.float32] | None]:
        ns = self.field(obj, "namespace", str, number)
        if ns != namespace:
            raise self.fail(number, f"a step of namespace {ns!r} inside namespace {namespace!r}")
        p = self.field(obj, "position", int, number)
        if p != position:
            raise self.fail(number, f"step at position {p}, expected position {position}")
        values = {name: self.field(obj, name, kind, number) for name, kind in STEP_FIELDS.items()}
        if not values["source"]:
            raise self.fail(number, "'source': empty (every stored step has a source)")
        try:
            row = step_row(
                Step(**{**values, "entities": frozenset(values["entities"])}),
                f"{self.where} line {number}",
                namespace,
                self.limit,
            )
        except InvalidInputError as exc:
            raise ExportFormatError(str(exc)) from None
        if len(row.entities) != len(values["entities"]):
            raise self.fail(number, "'entities': an entity is listed twice")
        row = replace(row, **self.extras(obj, number))
        if not has_embeddings:
            if "embedding" in obj:
                raise self.fail(number, "an embedding in a file whose header says it has none")
            return row, None
        raw = self.field(obj, "embedding", str, number)
        try:
            blob = base64.b64decode(raw.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise self.fail(number, "'embedding': not base64 text") from None
        if len(blob) != 4 * dim:
            raise self.fail(
                number,
                f"'embedding': {len(blob)} bytes, expected {4 * dim} ({dim} float32 values)",
            )
        vec = np.frombuffer(blob, dtype="<f4").astype(np.float32)
        if not np.isfinite(vec).all():
            raise self.fail(number, "'embedding': NaN or infinite values")
        return row, vec


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind_name(value: Any) -> str:
    return {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def read_export(
    lines: Iterable[str],
    where: str = "export",
    *,
    max_text_chars: int = 100_000,
    store_encoder: tuple[str, int] | None = None,
) -> ExportData:
    """Read and check a whole export (its lines, with or without newlines).

    ``store_encoder``: the ``(encoder id, dim)`` of the store the file is for; a header
    naming another encoder is refused at line 1, before the steps are read.

    Raises:
        IncompatibleStoreError: the header's encoder is not ``store_encoder``.
        ExportFormatError: naming ``where`` and the line: a line that is not a JSON
            object, a missing or misplaced record, a wrong type, a step out of place,
            counts that do not add up, or a file that ends before its end record
            (cut short).
    """
    reader = _Reader(where, max_text_chars)
    header: tuple[str, int, bool, list[str]] | None = None
    spaces: list[NamespaceExport] = []
    current: dict[str, Any] | None = None
    ended = False
    number = 0

    def close(at: int) -> None:
        nonlocal current
        if current is None:
            return
        if len(current["rows"]) != current["n"]:
            raise reader.fail(
                at,
                f"namespace {current['name']!r} ends after {len(current['rows'])} of its "
                f"{current['n']} steps",
            )
        assert header is not None
        vectors = current["vectors"]
        emb = None
        if header[2]:
            emb = (
                np.stack(vectors).astype(np.float32)
                if vectors
                else np.zeros((0, header[1]), dtype=np.float32)
            )
        spaces.append(
            NamespaceExport(
                name=current["name"],
                rows=tuple(current["rows"]),
                embeddings=emb,
                batch_ends=current["ends"],
                held=current["held"],
                digests=current["digests"],
                line=current["line"],
            )
        )
        current = None

    for number, raw in enumerate(lines, start=1):
        text = raw.rstrip("\n").rstrip("\r")
        if ended:
            if text.strip():
                raise reader.fail(number, "content after the end record")
            continue
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as exc:
            detail = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise reader.fail(
                number, f"not valid JSON ({detail}); the file may be cut short or damaged"
            ) from None
        if not isinstance(obj, dict):
            raise reader.fail(number, f"expected a JSON object, got {_kind_name(obj)}")
        kind = obj.get("kind")
        if header is None:
            header = reader.header(obj, number)
            _check_encoder(header[0], header[1], store_encoder, f"{where} line {number}")
            continue
        if kind == "namespace":
            close(number)
            k = len(spaces)
            if k >= len(header[3]):
                raise reader.fail(number, "a namespace the header does not list")
            n, ends, held, digests = reader.namespace(obj, number, header[3][k])
            current = {
                "name": header[3][k],
                "n": n,
                "ends": ends,
                "held": held,
                "digests": digests,
                "rows": [],
                "vectors": [],
                "line": number,
            }
        elif kind == "step":
            if current is None:
                raise reader.fail(number, "a step before any namespace record")
            if len(current["rows"]) >= current["n"]:
                raise reader.fail(
                    number, f"namespace {current['name']!r} has only {current['n']} steps"
                )
            row, vec = reader.step(
                obj, number, current["name"], len(current["rows"]), header[1], header[2]
            )
            current["rows"].append(row)
            if vec is not None:
                current["vectors"].append(vec)
        elif kind == "end":
            close(number)
            if len(spaces) != len(header[3]):
                raise reader.fail(
                    number, f"end record after {len(spaces)} of {len(header[3])} namespaces"
                )
            total = sum(len(s.rows) for s in spaces)
            if obj.get("namespaces") != len(spaces) or obj.get("steps") != total:
                raise reader.fail(
                    number,
                    f"end record counts {obj.get('namespaces')!r} namespaces and "
                    f"{obj.get('steps')!r} steps; the file holds {len(spaces)} and {total}",
                )
            ended = True
        else:
            raise reader.fail(number, f"unknown record kind {_shown(kind)}")
    if header is None:
        raise reader.fail(1, "empty file, expected the export header")
    if not ended:
        raise reader.fail(
            number + 1, "the file ends before its end record (cut short, or not a whole export)"
        )
    return ExportData(
        encoder=header[0],
        dim=header[1],
        has_embeddings=header[2],
        namespaces=tuple(spaces),
    )


def _check_encoder(
    encoder: str, dim: int, store: tuple[str, int] | None, where: str, name: str = ""
) -> None:
    """Refuse a file of another encoder than the store's (both known)."""
    if store is None or not store[0] or not encoder:
        return
    if store != (encoder, dim):
        label = f" {name}" if name else ""
        raise IncompatibleStoreError(
            f"{where}: exported with encoder {encoder!r} (dim {dim}); memory store{label} "
            f"holds encoder {store[0]!r} (dim {store[1]})"
        )


def read_export_file(
    path: str | Path,
    *,
    max_text_chars: int = 100_000,
    store_encoder: tuple[str, int] | None = None,
) -> ExportData:
    """:func:`read_export` of a file (UTF-8); a missing file is a ``DataFileError``."""
    p = Path(path)
    try:
        with open(p, encoding="utf-8", newline="") as fh:
            return read_export(
                fh, str(p), max_text_chars=max_text_chars, store_encoder=store_encoder
            )
    except FileNotFoundError:
        raise DataFileError(f"export file not found: {p}") from None
    except IsADirectoryError:
        raise DataFileError(f"export file {p}: is a directory") from None
    except UnicodeDecodeError as exc:
        raise ExportFormatError(f"{p}: not UTF-8 text (byte {exc.start})") from None
