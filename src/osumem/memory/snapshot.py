"""Snapshots of a namespace's retriever, so a reopened memory need not replay every add.

OSU-Mem's pool depends on the add-batch boundaries (its similarity view refreshes in
batches), so a reopened memory rebuilds it by replaying every stored batch: seconds at
10k steps. A snapshot stores the pool's state after some batch (the arrays of
:meth:`~osumem.osu.pool.OSUPool.state`, NumPy ``.npz``, compressed, no pickle) in the
store's ``snapshots`` table; a reopened memory loads it and replays only the batches
after it, which gives the same state bit for bit (tests compare every array and the
answers).

A snapshot is used only when everything matches: the retriever settings and library
version (:func:`settings_key`), the steps it was built from (:func:`fingerprint`: step
ids, batch ends, costs and embeddings of the steps it covers), the step count is an
add-batch end, and the SHA-256 of the payload; anything else (a torn write, another
method, a namespace deleted and written again, a damaged blob) is ignored and the
memory replays, as without a snapshot.

When: at :meth:`Memory.close` and, while the memory is used, whenever the retriever has
grown by :data:`SNAPSHOT_MIN_STEPS` steps and :data:`SNAPSHOT_RATIO` of the last
snapshot (so the writes cost O(1) amortised per step and a crash replays a bounded
tail); such a one is compressed and hashed on a background thread (:func:`gather`) and
stored by the next call. Writes never wait for another writer's lock; a busy store
skips one.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import json
import zipfile
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.memory.rows import NamespaceData, SnapshotRow
from osumem.osu.background import BackgroundCall
from osumem.retrieve.base import Retriever
from osumem.types import MemoryView

#: Version of the snapshot layout (payload arrays, key, fingerprint).
SNAPSHOT_FORMAT = 1
#: A new snapshot is written once the retriever has grown by at least this many steps
#: and :data:`SNAPSHOT_RATIO` times the steps of the last one.
SNAPSHOT_MIN_STEPS = 1000
SNAPSHOT_RATIO = 0.25

#: What a damaged or foreign payload can raise while it is read.
_UNREADABLE = (
    ValueError,
    KeyError,
    IndexError,
    TypeError,
    OSError,
    EOFError,
    zipfile.BadZipFile,
    MemoryError,
)


def supports(retriever: Retriever) -> bool:
    """Whether ``retriever`` keeps a fitted state that a snapshot can restore."""
    return retriever.state_format() is not None


def settings_key(retriever: Retriever) -> str:
    """SHA-256 of everything besides the steps that shapes the retriever's state: the
    snapshot format, the state's layout version, library version, method, full
    configuration, seed and the construction switches of the state
    (:meth:`~osumem.retrieve.Retriever.state_format`)."""
    from osumem import __version__

    layout, *switches = retriever.state_format() or (None,)
    parts = [
        SNAPSHOT_FORMAT,
        layout,
        __version__,
        retriever.name,
        repr(retriever.config),
        int(retriever.seed),
        *switches,
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def fingerprint(data: NamespaceData, steps: int) -> str:
    """SHA-256 over the first ``steps`` steps as the retriever saw them: their step
    ids, the add-batch ends up to ``steps``, costs and embeddings."""
    return _digest(steps, _fingerprint_columns(data, steps))


def _fingerprint_columns(data: NamespaceData, steps: int) -> tuple[NDArray[Any], ...]:
    view = data.view
    ends = data.batch_ends
    covered = np.asarray(ends[: bisect.bisect_right(ends, steps)], dtype=np.int64)
    return (data.step_ids[:steps], covered, view.costs[:steps], view.embeddings[:steps])


def _digest(steps: int, columns: tuple[NDArray[Any], ...]) -> str:
    h = hashlib.sha256()
    h.update(np.int64(steps).tobytes())
    for arr in columns:
        h.update(np.ascontiguousarray(arr).data)
    return h.hexdigest()


#: zlib level of the payload: 1 compresses it several times faster than NumPy's
#: ``savez_compressed`` (level 6) for about 7% more bytes (docs/decisions.md,
#: "snapshots at zlib level 1"); the compression runs on a background thread, or at
#: close.
COMPRESS_LEVEL = 1


def npz_bytes(arrays: dict[str, Any]) -> bytes:
    """``arrays`` as the bytes of an ``.npz`` file (what ``numpy.savez_compressed``
    writes and ``numpy.load`` reads: one ``<name>.npy`` member each, deflated, no
    pickle), compressed at :data:`COMPRESS_LEVEL`."""
    buf = io.BytesIO()
    with zipfile.ZipFile(
        buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=COMPRESS_LEVEL
    ) as zf:
        for name, arr in arrays.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=False)
    return buf.getvalue()


def encode(retriever: Retriever, data: NamespaceData, steps: int) -> SnapshotRow:
    """The snapshot row of ``retriever``, fitted on the first ``steps`` steps of ``data``."""
    return gather(retriever, data, steps)()


def gather(retriever: Retriever, data: NamespaceData, steps: int) -> Callable[[], SnapshotRow]:
    """:func:`encode` in two parts: what must be read now, while ``retriever`` covers
    ``steps`` steps (its state arrays, copied, and its settings), and the rest,
    returned as a function that may run on another thread (the compression of the
    payload and the hashes, which release the interpreter lock). That function reads
    the steps' columns of ``data`` when it runs: a caller whose steps may change
    meanwhile (deleted, replaced) discards its result."""
    arrays = retriever.state_arrays_later()
    config = settings_key(retriever)
    columns = _fingerprint_columns(data, steps)

    def finish() -> SnapshotRow:
        payload = npz_bytes(arrays())
        return SnapshotRow(
            steps=steps,
            config=config,
            fingerprint=_digest(steps, columns),
            checksum=hashlib.sha256(payload).hexdigest(),
            payload=payload,
        )

    return finish


#: From this many bytes of fingerprinted columns on, :func:`restore` checks the
#: fingerprint on another thread while it loads the state (hashlib lets go of the
#: interpreter lock while it hashes): 0.15 s of SHA-256 at 200,000 steps of 256
#: dimensions no longer comes before the load.
FINGERPRINT_BESIDE_BYTES = 16 << 20


def restore(retriever: Retriever, row: SnapshotRow, data: NamespaceData, view: MemoryView) -> bool:
    """Load ``row`` into ``retriever`` (fresh, unfitted) over ``view`` (the first
    ``row.steps`` steps of ``data``); ``False`` when the snapshot does not match or
    cannot be read: ``retriever`` may then hold part of it (a large namespace's
    fingerprint is checked while the state loads) and is to be thrown away."""
    n = row.steps
    if not supports(retriever) or not 0 < n <= data.view.n or view.n != n:
        return False
    i = bisect.bisect_left(data.batch_ends, n)
    if i == len(data.batch_ends) or data.batch_ends[i] != n:
        return False
    if row.config != settings_key(retriever):
        return False
    if hashlib.sha256(row.payload).hexdigest() != row.checksum:
        return False
    columns = _fingerprint_columns(data, n)
    if sum(c.nbytes for c in columns) < FINGERPRINT_BESIDE_BYTES:
        return _digest(n, columns) == row.fingerprint and _load(retriever, row, view)
    check = BackgroundCall(lambda: _digest(n, columns), "osumem-snapshot-fingerprint")
    try:
        loaded = _load(retriever, row, view)
    except Exception:  # an interrupt is not a load's failure: it goes up at once
        if check.result() != row.fingerprint:
            return False  # the state of other steps: what it raised does not matter
        raise
    return check.result() == row.fingerprint and loaded


def _load(retriever: Retriever, row: SnapshotRow, view: MemoryView) -> bool:
    """Load the payload of ``row`` into ``retriever`` over ``view``; ``False`` when it
    cannot be read."""
    try:
        with np.load(io.BytesIO(row.payload), allow_pickle=False) as npz:
            arrays: dict[str, Any] = {k: npz[k] for k in npz.files}
        retriever.load_state(view, arrays)
    except _UNREADABLE:
        return False
    return True


def due(steps: int, last: int) -> bool:
    """Whether a retriever over ``steps`` steps is worth a new snapshot, the last one
    covering ``last``."""
    return steps - last >= max(SNAPSHOT_MIN_STEPS, SNAPSHOT_RATIO * last)
