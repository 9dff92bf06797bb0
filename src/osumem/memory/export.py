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
     "subgoal": ..., "source": ..., "cost": 12, "metadata": {...}, "time": 1767225600.0,
     "embedding": "<base64>"}
    ...
    {"kind": "end", "namespaces": 1, "steps": 3}

A step's ``metadata`` (a JSON object), ``time`` (when it was added) and ``updated``
(when it was last changed; seconds since the epoch) are written only when it has
them; a reader of an earlier release ignores them.

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
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import (
    DataFileError,
    IncompatibleStoreError,
    InvalidInputError,
    UnknownNamespaceError,
)
from osumem.memory.encoders import EXTERNAL_PREFIX, resolve_encoder
from osumem.memory.validate import check_namespace
from osumem.types import l2_normalise

if TYPE_CHECKING:
    from osumem.memory.api import Memory

from osumem.memory.export_format import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    ExportData,
    ExportFormatError,
    ImportConflictError,
    ImportSummary,
    NamespaceExport,
    _check_encoder,
    read_export,
    read_export_file,
)

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "ExportData",
    "ExportFormatError",
    "ImportConflictError",
    "ImportSummary",
    "NamespaceExport",
    "check_namespaces",
    "export_lines",
    "import_export",
    "import_file",
    "read_export",
    "read_export_file",
    "write_export",
]


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
            raise UnknownNamespaceError(
                f"namespace {ns!r} is not in {memory.store.name}; namespaces there: {known}"
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
            if data.metadata[p] != "{}":
                record["metadata"] = json.loads(data.metadata[p])
            for key, values in (("time", data.times), ("updated", data.updated)):
                if not np.isnan(values[p]):
                    record[key] = float(values[p])
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
            data.metadata[p],
            _known(data.times[p]),
            _known(data.updated[p]),
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
            r.metadata_json,
            r.time,
            r.updated,
        )
        if stored != mine:
            return False
    if has_embeddings and ns.embeddings is not None:
        return bool(np.array_equal(v.embeddings.view(np.uint32), ns.embeddings.view(np.uint32)))
    return True


def _known(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


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
        store.location,
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
                f"{store.name}; pass replace to overwrite it"
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
