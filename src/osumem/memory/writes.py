"""Writing a memory: adds of steps, messages and texts (one transaction each),
deletes and updates of stored steps; a base of :class:`~osumem.memory.Memory`.
"""

from __future__ import annotations

import time as _time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import (
    ConfigError,
    DuplicateInputError,
    InvalidInputError,
)
from osumem.memory.blas import limited
from osumem.memory.config import (
    DEFAULT_NAMESPACE,
    ON_DUPLICATE,
)
from osumem.memory.encoders import EXTERNAL_PREFIX
from osumem.memory.planner import canonical
from osumem.memory.reads import MemoryReads
from osumem.memory.retrieved import StoredStep
from osumem.memory.rows import StepRow
from osumem.memory.validate import (
    _show,
    check_messages,
    check_metadata,
    check_namespace,
    check_time,
    log_digest,
    text_message,
)
from osumem.types import Step


class MemoryWrites(MemoryReads):
    """The writing methods of :class:`~osumem.memory.Memory`."""

    @limited
    def add_steps(
        self,
        steps: Sequence[Step],
        *,
        namespace: str = DEFAULT_NAMESPACE,
        embeddings: NDArray[Any] | None = None,
        metadata: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        time: Any = None,
    ) -> list[int]:
        """Append ``steps`` to ``namespace`` (one transaction) and return their step ids.

        Each :class:`~osumem.types.Step` keeps its own annotations and ``cost`` (its
        token cost). ``embeddings`` (one row per step) are used as given; without them
        the step texts are encoded. A step with an empty ``source`` gets
        ``namespace`` as its source. ``metadata``: one dict for every step, or a list
        of one per step (JSON data; returned with each retrieved step, filtered on by
        ``retrieve(filter=...)``); ``time``: when the steps happened (seconds since the
        epoch or a ``datetime``; default: now). Nothing is written if any step is
        invalid.
        """
        check_namespace(namespace)
        rows = self._planner.step_rows(steps, namespace)
        if isinstance(metadata, Sequence) and not isinstance(metadata, str | bytes):
            if len(metadata) != len(rows):
                raise InvalidInputError(
                    f"metadata: {len(metadata)} dicts for {len(rows)} steps (give one per "
                    "step, or one dict for all)"
                )
            limit = self.config.max_text_chars
            texts = [check_metadata(m, f"metadata[{i}]", limit) for i, m in enumerate(metadata)]
            at = check_time(time, "time") if time is not None else _time.time()
            rows = [r.stamped(m, at) for r, m in zip(rows, texts, strict=True)]
        else:
            rows = self._stamped(rows, metadata, time)
        emb = self._planner.embed(rows, embeddings)
        with self.store.transaction(namespace):
            self._refresh()
            ids, n_steps = self._write(namespace, rows, emb, embeddings is not None, pending=None)
        self._views.extend(namespace, rows, emb, ids)
        # a bulk add builds now, not at the next query
        self._retrievers.prepare(namespace, n_steps, added=len(ids))
        return ids

    @limited
    def add_messages(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        namespace: str = DEFAULT_NAMESPACE,
        source: str | None = None,
        prefix_namespace: bool | None = None,
        hold_open_calls: bool = True,
        on_duplicate: str | None = None,
        log_id: str | None = None,
        format: str = "auto",
        metadata: Mapping[str, Any] | None = None,
        time: Any = None,
    ) -> list[int]:
        """Append an agent's chat messages to ``namespace``; return the new step ids.

        Messages become steps as :func:`osumem.ingest.openai_chat.read_messages`
        defines (one per user message, assistant text and tool call; a tool response
        is its call's observation). The messages may come a few at a time: when the
        last assistant message's tool calls have no response yet and
        ``hold_open_calls`` is set, that message is held (stored, not yet a step) and
        joins the next add, so its step carries the response (see :meth:`held` and
        :meth:`discard_held`). Subgoal segments and tool-call matching continue across
        adds. Everything, the held messages included, is validated before anything
        is written, so an accepted add never makes a later valid add fail.

        Args:
            source: the steps' source name (default: ``namespace``); it labels subgoals
                and, with ``prefix_namespace``, prefixes entities and signatures.
            prefix_namespace: default: the memory's ``prefix_namespace`` setting.
            on_duplicate: what to do when these messages (same content, or the same
                ``log_id``) were added to the namespace before: ``"skip"`` (add
                nothing, return ``[]``, so a re-run or a retried add stores nothing
                twice), ``"append"`` (add them again) or ``"error"``
                (``DuplicateInputError``); ``None``: the memory's ``on_duplicate``
                setting (``"skip"`` unless opened with another). Adds made with ``"append"`` and no
                ``log_id`` are not remembered for this. An agent that may send the
                same message twice on purpose passes a ``log_id`` per message (its
                index or id in the run) or ``"append"``.
            log_id: a caller-given identity of the messages (instead of their content).
            format: the messages' shape: ``"openai"`` (``tool_calls``),
                ``"openai-legacy"`` (``function_call`` / ``role: "function"``),
                ``"anthropic"`` (``tool_use`` / ``tool_result`` blocks) or ``"auto"``
                (default: read from the messages); see
                :func:`osumem.ingest.normalize_messages`. Messages that make no step
                (a system prompt, an empty assistant message) are not stored.
            metadata: JSON data stored with every step this add makes (a held tool
                call's step gets the metadata of the add that completes it), returned
                with each retrieved step and filtered on by ``retrieve(filter=...)``.
            time: when the messages happened (seconds since the epoch or a
                ``datetime``; default: now), what ``filter={"time": ...}`` compares.
        """
        return self._add(
            messages,
            None,
            namespace=namespace,
            source=source,
            prefix_namespace=prefix_namespace,
            hold_open_calls=hold_open_calls,
            on_duplicate=on_duplicate,
            log_id=log_id,
            format=format,
            metadata=metadata,
            time=time,
        )

    def _add(
        self,
        messages: Sequence[Mapping[str, Any]],
        text: dict[str, str] | None,
        *,
        namespace: str,
        source: str | None,
        prefix_namespace: bool | None,
        hold_open_calls: bool,
        on_duplicate: str | None,
        log_id: str | None,
        format: str,
        metadata: Mapping[str, Any] | None,
        time: Any,
    ) -> list[int]:
        """:meth:`add_messages`; ``text``: the messages are this one turn of
        :meth:`add`, read without the chat reader when every check accepts it as it
        is."""
        check_namespace(namespace)
        if on_duplicate is None:
            on_duplicate = self.config.on_duplicate
        if on_duplicate not in ON_DUPLICATE:
            raise ConfigError(
                f"on_duplicate: expected one of {ON_DUPLICATE}, got {_show(on_duplicate)}"
            )
        if log_id is not None:
            check_namespace(log_id, "log_id")
        if source is not None:
            check_namespace(source, "source")
        if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
            raise InvalidInputError("messages: expected a list of message dicts")
        plain = False
        if text is not None and self._planner.plain_text(text):
            plain, clean = True, [dict(text)]  # its own canonical form (plain_text)
        else:
            clean = canonical(check_messages(messages, self.config.max_text_chars), format)
        digest = log_digest(clean, log_id)
        src = namespace if source is None else source
        meta = check_metadata(metadata, "metadata", self.config.max_text_chars)
        at = check_time(time, "time")
        prefix = self.config.prefix_namespace if prefix_namespace is None else prefix_namespace
        check = digest if on_duplicate != "append" else None
        context = self.store.add_context(namespace, check)  # one read of the store
        self._refresh(context.data_version)
        if self._is_duplicate(namespace, context.logged, digest, on_duplicate):
            return []
        state = self._views.held_state(namespace, src, context)
        plan = self._planner.plan(clean, state, namespace, src, prefix, hold_open_calls, plain)
        with self.store.transaction(namespace):
            now = state
            if self._writers_moved():  # what was read above may be stale: read it again
                context = self.store.add_context(namespace, check)
                if self._is_duplicate(namespace, context.logged, digest, on_duplicate):
                    return []
                now = self._views.held_state(namespace, src, context)
                if now != state:  # another writer moved the namespace meanwhile
                    plan = self._planner.plan(
                        clean, now, namespace, src, prefix, hold_open_calls, plain
                    )
            # an agent's streaming adds (append, no id) are not logs: no digest kept
            keep = on_duplicate != "append" or log_id is not None
            others, of = now[2], now[3]  # other sources' held messages stay held
            rows = self._stamped(plan.rows, meta, at)
            # nothing was held and nothing is: the store's held messages stay as they are
            unchanged = not now[0] and not others and not plan.held
            ids, n_steps = self._write(
                namespace,
                rows,
                plan.embeddings,
                False,
                pending=None if unchanged else [*others, *plan.held],
                pending_sources=None if unchanged else [*of, *([src] * len(plan.held))],
                digest=digest if keep else None,
                users=now[1],
            )
        self._views.extend(namespace, rows, plan.embeddings, ids)
        # a bulk add builds now, not at the next query
        self._retrievers.prepare(namespace, n_steps, added=len(ids))
        return ids

    @limited
    def add(
        self,
        text: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        role: str = "user",
        metadata: Mapping[str, Any] | None = None,
        time: Any = None,
        source: str | None = None,
        on_duplicate: str | None = None,
        log_id: str | None = None,
    ) -> list[int]:
        """Store one text as a step of ``namespace``: a ``"user"`` turn (default) or an
        ``"assistant"`` one, exactly as :meth:`add_messages` stores the message
        ``{"role": role, "content": text}`` (the same step text, subgoal segments and
        duplicate handling); returns the new step ids (``[]`` when skipped as a
        duplicate).

        >>> mem.add("I prefer aisle seats", namespace="ana", metadata={"kind": "pref"})  # doctest: +SKIP
        """
        message = text_message(text, role)
        return self._add(
            [message],
            message,
            namespace=namespace,
            source=source,
            prefix_namespace=None,
            hold_open_calls=True,
            on_duplicate=on_duplicate,
            log_id=log_id,
            format="auto",
            metadata=metadata,
            time=time,
        )

    def _stamped(self, rows: list[StepRow], metadata: Any, time: Any) -> list[StepRow]:
        """``rows`` with their metadata (a dict, or its checked JSON text) and time (default:
        now)."""
        if not rows:
            return rows
        meta = (
            metadata
            if isinstance(metadata, str)
            else check_metadata(metadata, "metadata", self.config.max_text_chars)
        )
        at = check_time(time, "time")
        stamp = _time.time() if at is None else at
        return [r.stamped(meta, stamp) for r in rows]

    @limited
    def delete(
        self,
        namespace: str,
        positions: int | Sequence[int] | None = None,
        *,
        ids: int | Sequence[int] | None = None,
    ) -> list[int]:
        """Delete steps of ``namespace`` named by their ``positions`` or their ``ids``
        (exactly one of the two; one transaction); return the ids deleted.

        The later steps move down (positions stay 0..n-1, in order; ids never change
        and are never given to another step), the add batches and log digests follow,
        and the retrievals equal those of a memory built from scratch from the
        remaining steps in the same add batches (see :mod:`osumem.memory.editing`).
        That structure is replayed by the next retrieval, or, when the replay is long
        (:attr:`rebuild_in_background`), on a background thread while retrievals
        answer as plain dense search over the remaining steps (``method == "flat"``)
        until it is taken (:meth:`wait_ready` waits for it). Nothing of a deleted step
        stays in the store (SQLite's ``secure_delete`` and a checkpoint of the
        write-ahead log), nor in the retrievers' indexes (rebuilt) or the stored
        snapshot (dropped when it covered the step).

        Raises:
            StepNotFoundError: a position or id the namespace does not hold (named);
                nothing is deleted then.
        """
        check_namespace(namespace)
        with self.store.transaction(namespace):
            self._refresh()
            deleted = self._editor.delete(namespace, positions, ids)
            edits = self.store.edits(namespace) if deleted else 0  # this delete's count
        if deleted:
            self._views.dropped(namespace, deleted, edits)  # the rest kept, not re-read
            self._filtered.forget()
        return deleted

    @limited
    def update(
        self,
        namespace: str,
        position: int | None = None,
        *,
        id: int | None = None,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        embedding: NDArray[Any] | Sequence[float] | None = None,
        cost: int | None = None,
    ) -> StoredStep:
        """Change one step of ``namespace``, named by ``position`` or ``id``: its
        ``text`` (stored as given, encoded again, its token cost counted again; or the
        given ``embedding`` and ``cost``) and/or its ``metadata`` (replaced whole).
        Returns the step as stored now.

        The step keeps its id, position, role, tool, entities and subgoal. A text
        update rebuilds the namespace's retrievers (from a snapshot before the step
        when one is stored), so the retrievals equal those of a memory built with the
        new text (a long rebuild runs in the background, as after :meth:`delete`); a
        metadata-only update changes nothing a retriever reads and rebuilds nothing.
        The old text leaves no trace in the store.

        Raises:
            StepNotFoundError: no such position or id in the namespace.
        """
        check_namespace(namespace)
        with self.store.transaction(namespace):
            self._refresh()
            p, row, emb = self._editor.update(
                namespace,
                position,
                id,
                text=text,
                metadata=metadata,
                embedding=None if embedding is None else np.asarray(embedding),
                cost=cost,
            )
            edits = self.store.edits(namespace)  # this update's count
        # the cached steps take the row as stored (the same values): nothing read back
        if emb is not None:
            self._views.replaced(namespace, p, row, emb[0], edits)
        else:
            buf = self._views.cached(namespace)
            if buf is not None:
                assert row.updated is not None
                buf.set_metadata([p], [row.metadata_json], row.updated)
                self._views.edited(namespace, edits)
        self._filtered.forget()
        return self.steps(namespace, positions=[p])[0]

    def _is_duplicate(self, namespace: str, logged: bool, digest: str, on_duplicate: str) -> bool:
        """Whether the add is skipped: its log is recorded (``logged``, read with
        ``digest`` unless ``on_duplicate`` is ``"append"``); ``"error"`` raises."""
        if not logged:
            return False
        if on_duplicate == "error":
            raise DuplicateInputError(
                f"namespace {namespace!r}: this log was added before ({digest[:19]}…); "
                "pass on_duplicate='append' to add it again"
            )
        return True

    def _write(
        self,
        namespace: str,
        rows: list[StepRow],
        emb: NDArray[np.float32],
        external: bool,
        *,
        pending: Sequence[Mapping[str, Any]] | None,
        pending_sources: Sequence[str | None] | None = None,
        digest: str | None = None,
        users: int | None = None,
    ) -> tuple[list[int], int | None]:
        """Store validated rows (inside the caller's transaction; the store checks the
        vectors' dimension against what it holds under its write lock); ``users``: the
        namespace's user steps before them, when the caller read it in this
        transaction. Returns the new steps' ids and the namespace's step count after
        them (``None`` when no row was written), which the caller hands to
        :meth:`RetrieverCache.prepare` so that it reads nothing after the commit."""
        encoder_id = self._encoder_id_for(external, emb.shape[1])
        if users is None:
            users = self._views.users(namespace) if rows else 0
        ids = self.store.append(
            namespace,
            rows,
            emb,
            encoder_id=encoder_id,
            pending=pending,
            pending_sources=pending_sources,
            digest=digest,
            joined=True,  # the caller's transaction block: an error leaves it, rolled back
        )
        last = self.store.last_append
        start = last[1] if last is not None and last[0] == namespace else None
        n_steps = self._views.count_added(namespace, users, rows, start)
        if encoder_id.startswith(EXTERNAL_PREFIX) and self._encoder is None:
            self._encoder_spec = None  # a vectors-only store: never guess an encoder
        return ids, n_steps

    def _encoder_id_for(self, external: bool, dim: int) -> str:
        recorded = self.store.encoder_id
        if recorded:
            return recorded
        enc = self._encoder if external else self.encoder
        return enc.encoder_id if enc is not None else f"{EXTERNAL_PREFIX}:d{dim}"
