"""The base of :class:`PostgresStore` that changes stored steps (delete, a new text or
embedding, metadata) in one transaction under the namespace's row lock, with the edit
counter and the snapshots past an edited position kept right."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import IncompatibleStoreError, StoreError
from osumem.memory.backends.base import checked_positions, moved_time
from osumem.memory.backends.codec import batch_end_moves
from osumem.memory.backends.connected import ConnectedStore
from osumem.memory.backends.postgres import sql
from osumem.memory.backends.postgres.connection import guarded
from osumem.memory.backends.postgres.rows import content_params, metadata_params
from osumem.memory.rows import StepRow


class PostgresEdits(ConnectedStore):
    """The step-changing methods of :class:`PostgresStore`."""

    @guarded
    def edits(self, namespace: str) -> int:
        if not self._has_edits:
            return 0
        row = self.conn.fetchone(sql.SELECT_EDITS, (namespace,))
        return 0 if row is None else int(row[0])

    def _edited(self, c: Any, namespace: str) -> None:
        """Count one edit of ``namespace`` (inside its write transaction)."""
        if self._has_edits:
            c.execute(sql.COUNT_EDIT, (namespace,))

    def _ids_at(
        self, c: Any, namespace: str, positions: Sequence[int]
    ) -> tuple[list[int], list[int]]:
        """The checked positions (sorted) and the ids of their steps, in that order."""
        n = int(c.execute(sql.N_STEPS, (namespace,)).fetchone()[0])
        ordered = checked_positions(self.name, namespace, positions, n)
        found = {int(p): int(i) for i, p in c.execute(sql.IDS_AT, (namespace, ordered))}
        if len(found) != len(ordered):  # a gap: damage the integrity check names
            missing = next(p for p in ordered if p not in found)
            raise StoreError(f"{self.name}: namespace {namespace!r}: no step at {missing}")
        return ordered, [found[p] for p in ordered]

    def _updated_of(self, c: Any, ids: Sequence[int]) -> dict[int, float | None]:
        """The stored change times of the steps ``ids`` (those with a metadata row)."""
        rows = c.execute(sql.UPDATED_OF, (list(ids),))
        return {int(i): (None if u is None else float(u)) for i, u in rows}

    def _drop_snapshot_from(self, c: Any, namespace: str, position: int) -> None:
        """Delete the namespace's snapshot if it covers ``position``."""
        if not self._has_snapshots:
            return
        row = c.execute(sql.SNAPSHOT_STEPS, (namespace,)).fetchone()
        if row is not None and row[0] > position:
            c.execute(sql.DELETE_SNAPSHOT, (namespace,))

    @guarded
    def delete_steps(self, namespace: str, positions: Sequence[int]) -> list[int]:
        with self.conn.transaction(namespace), self.conn.cursor() as c:
            gone, ids = self._ids_at(c, namespace, positions)
            if not ids:
                return []
            n = int(c.execute(sql.N_STEPS, (namespace,)).fetchone()[0])
            self._drop_snapshot_from(c, namespace, gone[0])
            c.execute(sql.DELETE_STEPS_AT, (namespace, gone))  # their metadata goes along
            c.execute(sql.SHIFT_STEPS, (n, namespace, gone[0]))
            c.execute(sql.SETTLE_STEPS, (n, gone, n, namespace, n))
            drops, moves, top = batch_end_moves(
                [(int(i), int(e)) for i, e in c.execute(sql.SELECT_BATCHES, (namespace,))], gone
            )
            cur = c.cursor()
            if drops:
                cur.executemany(sql.DELETE_BATCH, drops)
            if moves:
                cur.executemany(sql.MOVE_BATCH, [(top + new, i) for new, i in moves])
                cur.executemany(sql.MOVE_BATCH, moves)
            if self._has_digests:
                c.execute(sql.MOVE_DIGESTS, (gone, namespace))
            self._edited(c, namespace)
        return ids

    @guarded
    def replace_steps(
        self,
        namespace: str,
        positions: Sequence[int],
        rows: Sequence[StepRow],
        embeddings: NDArray[np.float32],
    ) -> None:
        emb = np.ascontiguousarray(embeddings, dtype="<f4")
        if len(rows) != len(positions) or emb.ndim != 2 or emb.shape[0] != len(rows):
            raise StoreError(
                f"replace_steps: {len(positions)} positions, {len(rows)} rows, embeddings "
                f"of shape {emb.shape}"
            )
        with self.conn.transaction(namespace), self.conn.cursor() as c:
            if len(rows) and emb.shape[1] != self.dim:
                raise IncompatibleStoreError(
                    f"{self.name}: holds dimension {self.dim}; got {emb.shape[1]}"
                )
            ordered, ids = self._ids_at(c, namespace, positions)
            if not ordered:
                return
            order = {int(p): k for k, p in enumerate(positions)}
            self._drop_snapshot_from(c, namespace, ordered[0])
            cur = c.cursor()
            cur.executemany(
                sql.UPDATE_STEP,
                [
                    (*content_params(rows[order[p]], emb[order[p]]), i)
                    for p, i in zip(ordered, ids, strict=True)
                ],
            )
            if self._has_metadata:
                was = self._updated_of(c, ids)
                cur.executemany(
                    sql.REPLACE_METADATA,
                    [
                        metadata_params(
                            i,
                            replace(
                                rows[order[p]],
                                updated=moved_time(rows[order[p]].updated, was.get(i)),
                            ),
                        )
                        for p, i in zip(ordered, ids, strict=True)
                    ],
                )
            self._edited(c, namespace)

    @guarded
    def set_metadata(
        self,
        namespace: str,
        positions: Sequence[int],
        metadata: Sequence[str],
        updated: float,
    ) -> None:
        if len(metadata) != len(positions):
            raise StoreError(f"set_metadata: {len(positions)} positions, {len(metadata)} values")
        if not self._has_metadata:
            raise StoreError(f"{self.name}: a store of an earlier release read as it is")
        with self.conn.transaction(namespace), self.conn.cursor() as c:
            ordered, ids = self._ids_at(c, namespace, positions)
            value = dict(zip((int(p) for p in positions), metadata, strict=True))
            if ordered:
                was = self._updated_of(c, ids)
                c.cursor().executemany(
                    sql.UPSERT_METADATA,
                    [
                        (i, value[p], None, moved_time(float(updated), was.get(i)))
                        for p, i in zip(ordered, ids, strict=True)
                    ],
                )
            self._edited(c, namespace)
