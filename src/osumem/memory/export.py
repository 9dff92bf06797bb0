"""Export a memory to JSON Lines and import it back, exactly.

An export holds everything needed to rebuild the memory: every step with its
annotations, arguments and token cost, its embedding (optional), the add-batch
boundaries (a reopened memory replays its retriever along them, so a rebuilt memory
answers every query exactly as the original), the held messages (tool calls still
waiting for their results), the digests of the logs added (so ``on_duplicate="skip"``
still recognises them) and the encoder id. Retriever snapshots are a cache and are not
exported.

The file (format :data:`EXPORT_FORMAT`, version :data:`EXPORT_VERSION`) is one JSON
object per line::

    {"kind": "header", "format": "osumem-export", "version": 1, "encoder": ..., "dim": ...,
     "embeddings": true, "namespaces": [...], "library_version": ...}
    {"kind": "namespace", "name": "task-0", "steps": 3, "batch_ends": [2, 3],
     "held": [...], "digests": [["sha256:…", 2]]}
    {"kind": "step", "namespace": "task-0", "position": 0, "role": "user", "text": ...,
     "tool_action": "", "arguments": {}, "tool_signature": "", "entities": [...],
     "subgoal": ..., "source": ..., "cost": 12, "embedding": "<base64>"}
    ...
    {"kind": "end", "namespaces": 1, "steps": 3}

An embedding is the base64 text of its ``dim`` little-endian float32 values, the bytes
the store holds (exact, and a quarter of the size of decimal numbers). Without
embeddings (``embeddings=False``) the importer encodes the texts again with the
header's encoder.

Import reads and checks the whole file before it writes anything, then writes every
namespace in one transaction: a file cut short, a line that is not a JSON object, a
step out of place, a file from another encoder: one typed error naming the line, and
the store unchanged. Importing a namespace the store already holds with the same
content changes nothing (import is idempotent); a namespace holding other content is
refused unless ``replace=True``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import (
    DataFileError,
    DuplicateInputError,
    IncompatibleStoreError,
    InvalidInputError,
    UnknownNamespaceError,
)
from osumem.memory.encoders import EXTERNAL_PREFIX, resolve_encoder
from osumem.memory.integrity import STEP_TEXT_COLUMNS
from osumem.memory.store import StepRow
from osumem.memory.validate import check_messages, check_namespace, step_row
from osumem.types import Step, l2_normalise

if TYPE_CHECKING:
    from osumem.memory.api import Memory

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


# --- export ---------------------------------------------------------------------------


def _b64(vector: NDArray[np.float32]) -> str:
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")


def _line(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def check_namespaces(memory: Memory, namespaces: Sequence[str] | None) -> list[str]:
    """The namespaces to read: all of the store's (``None``), or those named, each of
    which must hold steps or held messages (:class:`UnknownNamespaceError` otherwise)."""
    known = memory.namespaces()
    if namespaces is None:
        return known
    out: list[str] = []
    for ns in namespaces:
        check_namespace(ns)
        if ns not in known:
            where = memory.store.path if memory.store.path is not None else ":memory:"
            raise UnknownNamespaceError(
                f"namespace {ns!r} is not in memory store {where}; namespaces there: {known}"
            )
        if ns not in out:
            out.append(ns)
    return out


def export_lines(
    memory: Memory, namespaces: Sequence[str] | None = None, *, embeddings: bool = True
) -> Iterator[str]:
    """The export of ``namespaces`` (default: every namespace) as JSON lines (without
    newlines), header first and end record last.

    Raises:
        UnknownNamespaceError: a named namespace is not in the store.
        InvalidInputError: ``embeddings=False`` for a store whose vectors came from the
            caller (``external`` encoder): they could not be computed again.
    """
    names = check_namespaces(memory, namespaces)
    store = memory.store
    encoder, dim = store.encoder_id, store.dim
    if not embeddings and encoder.startswith(EXTERNAL_PREFIX):
        raise InvalidInputError(
            f"this store's vectors were given by the caller (encoder {encoder!r}); "
            "export them with the embeddings"
        )
    from osumem import __version__

    yield _line(
        {
            "kind": "header",
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "library_version": __version__,
            "encoder": encoder,
            "dim": dim,
            "embeddings": bool(embeddings),
            "namespaces": names,
        }
    )
    total = 0
    for ns in names:
        data = store.load(ns)
        v = data.view
        yield _line(
            {
                "kind": "namespace",
                "name": ns,
                "steps": v.n,
                "batch_ends": list(data.batch_ends),
                "held": memory.held(ns),
                "digests": [list(d) for d in store.digests(ns)],
            }
        )
        for p in range(v.n):
            record: dict[str, Any] = {
                "kind": "step",
                "namespace": ns,
                "position": p,
                "role": str(v.roles[p]),
                "text": str(v.texts[p]),
                "tool_action": str(v.tool_actions[p]),
                "arguments": json.loads(data.arguments[p]),
                "tool_signature": str(v.tool_signatures[p]),
                "entities": sorted(v.entities[p]),
                "subgoal": str(v.subgoals[p]),
                "source": str(v.sources[p]),
                "cost": int(v.costs[p]),
            }
            if embeddings:
                record["embedding"] = _b64(v.embeddings[p])
            yield _line(record)
        total += v.n
    yield _line({"kind": "end", "namespaces": len(names), "steps": total})


def write_export(
    memory: Memory,
    out: str | Path | IO[str],
    namespaces: Sequence[str] | None = None,
    *,
    embeddings: bool = True,
) -> int:
    """Write the export to ``out`` (a path, written to a temporary file beside it and
    renamed into place, so a failed export leaves no partial file; or an open text
    stream); returns the number of lines."""
    lines = export_lines(memory, namespaces, embeddings=embeddings)
    if not isinstance(out, str | Path):
        n = 0
        for text in lines:
            out.write(text + "\n")
            n += 1
        return n
    path = Path(out)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    n = 0
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            for text in lines:
                fh.write(text + "\n")
                n += 1
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise DataFileError(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return n


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


# --- import ---------------------------------------------------------------------------------


def _same(memory: Memory, ns: NamespaceExport, has_embeddings: bool) -> bool:
    """Whether the store's namespace holds exactly what ``ns`` holds."""
    store = memory.store
    data = store.load(ns.name)
    v = data.view
    if v.n != len(ns.rows) or data.batch_ends != ns.batch_ends:
        return False
    if tuple(memory.held(ns.name)) != ns.held or tuple(store.digests(ns.name)) != ns.digests:
        return False
    for p, r in enumerate(ns.rows):
        stored = (
            str(v.roles[p]),
            str(v.texts[p]),
            str(v.tool_actions[p]),
            data.arguments[p],
            str(v.tool_signatures[p]),
            tuple(sorted(v.entities[p])),
            str(v.subgoals[p]),
            str(v.sources[p]),
            int(v.costs[p]),
        )
        mine = (
            r.role,
            r.text,
            r.tool_action,
            r.arguments_json,
            r.tool_signature,
            r.entities,
            r.subgoal,
            r.source,
            r.cost,
        )
        if stored != mine:
            return False
    if has_embeddings and ns.embeddings is not None:
        return bool(np.array_equal(v.embeddings.view(np.uint32), ns.embeddings.view(np.uint32)))
    return True


def import_export(
    memory: Memory,
    data: ExportData,
    *,
    namespaces: Sequence[str] | None = None,
    replace: bool = False,
    where: str = "export",
) -> ImportSummary:
    """Write the namespaces of ``data`` (all, or those named) into ``memory``'s store in
    one transaction.

    A namespace the store already holds with the same content is left as it is
    (``"unchanged"``: importing a file twice changes nothing); one holding other content
    is an :class:`ImportConflictError` unless ``replace`` (then it is deleted and
    written again, in the same transaction).

    Raises:
        IncompatibleStoreError: the file's encoder or dimension is not the store's.
        UnknownNamespaceError: a named namespace is not in the file.
        ImportConflictError: see above. Nothing is written when anything fails.
    """
    store = memory.store
    _check_encoder(
        data.encoder,
        data.dim,
        (store.encoder_id, store.dim),
        f"{where} line 1",
        str(store.path or ":memory:"),
    )
    by_name = {ns.name: ns for ns in data.namespaces}
    chosen = list(by_name) if namespaces is None else list(dict.fromkeys(namespaces))
    for name in chosen:
        if name not in by_name:
            raise UnknownNamespaceError(
                f"{where}: namespace {name!r} is not in the file; it holds {list(by_name)}"
            )
    existing = set(memory.namespaces())
    plan: list[tuple[NamespaceExport, str]] = []
    for name in chosen:
        ns = by_name[name]
        if name not in existing:
            plan.append((ns, "imported"))
        elif _same(memory, ns, data.has_embeddings):
            plan.append((ns, "unchanged"))
        elif replace:
            plan.append((ns, "replaced"))
        else:
            raise ImportConflictError(
                f"{where} line {ns.line}: namespace {name!r} already holds other content in "
                f"memory store {store.path or ':memory:'}; pass replace to overwrite it"
            )
    vectors = _vectors(data, [ns for ns, what in plan if what != "unchanged"], where)
    written = 0
    with memory.transaction():
        for ns, what in plan:
            if what == "unchanged":
                continue
            # deleting first also drops the memory's cached view of the namespace
            memory.delete_namespace(ns.name)
            written += _write(memory, ns, vectors[ns.name], data.encoder)
    return ImportSummary({ns.name: what for ns, what in plan}, written)


def _vectors(
    data: ExportData, spaces: list[NamespaceExport], where: str
) -> dict[str, NDArray[np.float32]]:
    """The embeddings to write per namespace: the file's, or the texts encoded again
    with the header's encoder (a file exported without embeddings)."""
    out: dict[str, NDArray[np.float32]] = {}
    need = [ns for ns in spaces if ns.rows]
    if data.has_embeddings or not need:
        for ns in spaces:
            emb = ns.embeddings
            out[ns.name] = emb if emb is not None else np.zeros((0, data.dim), np.float32)
        return out
    if data.encoder.startswith(EXTERNAL_PREFIX):
        raise ExportFormatError(
            f"{where} line 1: no embeddings, and encoder {data.encoder!r} cannot compute them"
        )
    encoder = resolve_encoder(data.encoder)
    assert encoder is not None
    if encoder.encoder_id != data.encoder or encoder.dim != data.dim:
        raise IncompatibleStoreError(
            f"{where} line 1: encoder {data.encoder!r} (dim {data.dim}) loads as "
            f"{encoder.encoder_id!r} (dim {encoder.dim}) here"
        )
    for ns in spaces:
        texts = [r.text for r in ns.rows]
        emb = encoder.encode(texts) if texts else np.zeros((0, data.dim), np.float32)
        out[ns.name] = l2_normalise(emb, what=f"encoder {encoder.encoder_id}")
    return out


def _write(memory: Memory, ns: NamespaceExport, emb: NDArray[np.float32], encoder: str) -> int:
    """Append one namespace batch by batch (inside the caller's transaction), with its
    digests at their batch ends and its held messages last."""
    store = memory.store
    start = 0
    digests = list(ns.digests)
    dim = emb.shape[1] if emb.ndim == 2 else 0
    empty = np.zeros((0, dim), dtype=np.float32)
    for end in sorted({0, *ns.batch_ends}):
        here = [d for d, e in digests if e == end]
        rows = list(ns.rows[start:end])
        first = here[0] if here else None
        if rows or first is not None:
            store.append(ns.name, rows, emb[start:end], encoder_id=encoder, digest=first)
        for d in here[1:]:
            store.append(ns.name, [], empty, encoder_id=encoder, digest=d)
        start = end
    if ns.held:
        store.append(ns.name, [], empty, encoder_id=encoder, pending=list(ns.held))
    return len(ns.rows)


def import_file(
    memory: Memory,
    path: str | Path,
    *,
    namespaces: Sequence[str] | None = None,
    replace: bool = False,
) -> ImportSummary:
    """:func:`read_export_file` then :func:`import_export` (errors name the file)."""
    store = memory.store
    data = read_export_file(
        path,
        max_text_chars=memory.config.max_text_chars,
        store_encoder=(store.encoder_id, store.dim),
    )
    return import_export(memory, data, namespaces=namespaces, replace=replace, where=str(path))
