"""Changing stored steps in the SQLite file store: delete, replace (a new text or
embedding), metadata, and the bookkeeping they share (the edit counter, retired ids,
snapshots past an edited position); the base of :class:`SQLiteStore`."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from osumem.errors import IncompatibleStoreError, StoreError
from osumem.memory.backends.base import checked_positions, moved_time, position_after_delete
from osumem.memory.backends.codec import batch_end_moves
from osumem.memory.backends.connected import ConnectedStore
from osumem.memory.backends.sqlite import schema, sql
from osumem.memory.backends.sqlite.connection import guarded
from osumem.memory.backends.sqlite.rows import content_params, metadata_params
from osumem.memory.rows import StepRow

#: Up to this many positions, their ids are looked up one by one.
_FEW = 64


class SQLiteEdits(ConnectedStore):
    """The step-changing methods of :class:`SQLiteStore`."""

    @guarded
    def edits(self, namespace: str) -> int:
        if not self._has_edits:
            return 0
        row = self.conn.execute(sql.SELECT_EDITS, (namespace,)).fetchone()
        return 0 if row is None else int(row[0])

    def _edited(self, namespace: str) -> None:
        """Count one edit of ``namespace`` (inside the write transaction); its old
        content is scrubbed from the write-ahead log at the commit."""
        if self._has_edits:
            self.conn.execute(sql.COUNT_EDIT, (namespace,))
        self.conn.scrub_on_commit = True

    def _retire(self, ids: Sequence[int]) -> None:
        """Remember the largest of ``ids`` (being deleted) so it is never given again."""
        if not ids:
            return
        meta = schema.meta_rows(self.conn)
        retired = meta.get(sql.RETIRED_ID_KEY, "0")
        top = max(max(ids), int(retired) if retired.isdigit() else 0)
        self.conn.execute(sql.UPSERT_META, (sql.RETIRED_ID_KEY, str(top)))

    def _step_ids_at(self, namespace: str, positions: Sequence[int]) -> list[int]:
        """The ids of the steps at ``positions`` (checked: distinct and stored), in
        position order: a lookup each for a few, one scan from the first for many."""
        n = self.n_steps(namespace)
        ordered = checked_positions(self.name, namespace, positions, n)
        if len(ordered) <= _FEW:
            return [
                int(self.conn.execute(sql.STEP_AT, (namespace, p)).fetchone()[0]) for p in ordered
            ]
        at = {p: i for i, p in enumerate(ordered)}
        ids = [0] * len(ordered)
        for step_id, pos in self.conn.execute(sql.IDS_FROM, (namespace, ordered[0])):
            if pos in at:
                ids[at[pos]] = int(step_id)
        return ids

    def _close_gaps(self, namespace: str, gone: Sequence[int], n: int) -> None:
        """Move the steps after the deleted positions ``gone`` (sorted) of a namespace
        that held ``n`` steps down over the gaps, one statement per run of steps
        between two gaps. SQLite checks the unique positions row by row: the steps
        are updated in position order (the order of both its index and its row ids),
        so each lands on a position just left free; should a statement meet a taken
        one anyway, SQLite backs it out and its run moves past every position first
        (two statements, right in any order)."""
        conn = self.conn
        bounds = [*gone, n]
        for k in range(len(gone)):
            lo, hi = bounds[k], bounds[k + 1]
            if hi - lo < 2:
                continue  # no step between these two gaps
            try:
                conn.execute(sql.MOVE_RUN, (k + 1, namespace, lo, hi))
            except sqlite3.IntegrityError:
                conn.execute(sql.MOVE_RUN, (-n, namespace, lo, hi))
                conn.execute(sql.MOVE_RUN, (n + k + 1, namespace, lo + n, hi + n))

    def _drop_snapshot_from(self, namespace: str, position: int) -> None:
        """Delete the namespace's snapshot if it covers ``position``."""
        if not self._has_snapshots:
            return
        row = self.conn.execute(sql.SNAPSHOT_STEPS, (namespace,)).fetchone()
        if row is not None and (not isinstance(row[0], int) or row[0] > position):
            self.conn.execute(sql.DELETE_SNAPSHOT, (namespace,))

    @guarded
    def delete_steps(self, namespace: str, positions: Sequence[int]) -> list[int]:
        conn = self.conn
        with conn.transaction():
            ids = self._step_ids_at(namespace, positions)
            if not ids:
                return []
            gone = sorted(int(p) for p in positions)
            n = self.n_steps(namespace)
            self._drop_snapshot_from(namespace, gone[0])
            conn.executemany(sql.DELETE_STEP, [(i,) for i in ids])
            self._close_gaps(namespace, gone, n)
            self._move_ends(namespace, gone)
            self._retire(ids)
            self._edited(namespace)
        return ids

    def _move_ends(self, namespace: str, gone: Sequence[int]) -> None:
        """Batch and digest end positions after deleting the positions ``gone``."""
        conn = self.conn
        batches = conn.execute(sql.SELECT_BATCHES, (namespace,)).fetchall()
        drops, moves, top = batch_end_moves(batches, gone)
        conn.executemany(sql.DELETE_BATCH, drops)
        conn.executemany(sql.MOVE_BATCH, [(top + new, i) for new, i in moves])
        conn.executemany(sql.MOVE_BATCH, moves)
        if self._has_digests:
            conn.executemany(
                sql.MOVE_DIGEST,
                [
                    (position_after_delete(end, gone), namespace, digest)
                    for digest, end in conn.execute(sql.SELECT_DIGEST_ENDS, (namespace,))
                ],
            )

    @guarded
    def replace_steps(
        self,
        namespace: str,
        positions: Sequence[int],
        rows: Sequence[StepRow],
        embeddings: Any,
    ) -> None:
        conn = self.conn
        emb = np.ascontiguousarray(embeddings, dtype="<f4")
        if len(rows) != len(positions) or emb.ndim != 2 or emb.shape[0] != len(rows):
            raise StoreError(
                f"replace_steps: {len(positions)} positions, {len(rows)} rows, embeddings "
                f"of shape {emb.shape}"
            )
        with conn.transaction():
            if len(rows) and emb.shape[1] != self.dim:
                raise IncompatibleStoreError(
                    f"{self.name}: holds dimension {self.dim}; got {emb.shape[1]}"
                )
            ids = self._step_ids_at(namespace, positions)
            order = {int(p): k for k, p in enumerate(positions)}
            by_pos = sorted(order)
            if not by_pos:
                return
            self._drop_snapshot_from(namespace, by_pos[0])
            was = self._updated_of(ids)
            for step_id, p in zip(ids, by_pos, strict=True):
                r = rows[order[p]]
                conn.execute(sql.UPDATE_STEP, (*content_params(r, emb[order[p]]), step_id))
                if self._has_metadata:
                    r = replace(r, updated=moved_time(r.updated, was.get(step_id)))
                    conn.execute(sql.REPLACE_METADATA, metadata_params(step_id, r))
            self._edited(namespace)

    @guarded
    def set_metadata(
        self,
        namespace: str,
        positions: Sequence[int],
        metadata: Sequence[str],
        updated: float,
    ) -> None:
        conn = self.conn
        if len(metadata) != len(positions):
            raise StoreError(f"set_metadata: {len(positions)} positions, {len(metadata)} values")
        if not self._has_metadata:
            raise StoreError(f"{self.name}: a store of an earlier release read as it is")
        with conn.transaction():
            ids = self._step_ids_at(namespace, positions)
            value = dict(zip((int(p) for p in positions), metadata, strict=True))
            was = self._updated_of(ids)
            for step_id, p in zip(ids, sorted(value), strict=True):
                at = moved_time(float(updated), was.get(step_id))
                conn.execute(sql.UPSERT_METADATA, (step_id, value[p], None, at))
            self._edited(namespace)

    def _updated_of(self, ids: Sequence[int]) -> dict[int, float | None]:
        """The stored change times of the steps ``ids`` (those with a metadata row)."""
        if not self._has_metadata:
            return {}
        out: dict[int, float | None] = {}
        for lo in range(0, len(ids), _FEW):
            part = list(ids[lo : lo + _FEW])
            marks = ", ".join("?" * len(part))
            query = f"SELECT id, updated FROM step_metadata WHERE id IN ({marks})"
            out.update((int(i), u) for i, u in self.conn.execute(query, part))
        return out
