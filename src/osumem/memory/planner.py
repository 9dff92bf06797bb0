"""Planning an add of the agent memory: messages (or steps) to validated store rows,
their embeddings and the messages to hold, all computed before anything is written."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.embed import Encoder
from osumem.errors import DimensionError, InvalidInputError
from osumem.memory.backends import MemoryStore
from osumem.memory.config import MemoryConfig
from osumem.memory.held import HeldSnapshot, check_answers
from osumem.memory.rows import StepRow
from osumem.memory.validate import (
    OversizedInputError,
    check_cost,
    continue_segments,
    open_call_start,
    step_row,
)
from osumem.types import Step, l2_normalise


@dataclass(frozen=True)
class Plan:
    """What one add writes: the rows, their embeddings, the messages left held."""

    rows: list[StepRow]
    embeddings: NDArray[np.float32]
    held: list[dict[str, Any]]


def canonical(messages: list[dict[str, Any]], format: str) -> list[dict[str, Any]]:
    """The messages in canonical OpenAI ``tool_calls`` shape (validated input)."""
    from osumem.ingest import normalize_messages

    return [dict(m) for m in normalize_messages(messages, format).messages]


class MessagePlanner:
    """Turns an add's input into a :class:`Plan` for one memory.

    Args:
        config: the memory's settings (text limits, boilerplate tools).
        store: the store (its recorded dimension and encoder).
        need_encoder: the memory's encoder, loaded when needed (raises when the
            memory has none), called with what needs it.
        loaded_encoder: the encoder if one is set, without loading it.
    """

    def __init__(
        self,
        config: MemoryConfig,
        store: MemoryStore,
        need_encoder: Callable[[str], Encoder],
        loaded_encoder: Callable[[], Encoder | None],
    ) -> None:
        self.config = config
        self.store = store
        self._need_encoder = need_encoder
        self._loaded_encoder = loaded_encoder

    def step_rows(self, steps: Sequence[Any], namespace: str) -> list[StepRow]:
        """Validated rows of ``steps`` (:class:`~osumem.types.Step` records)."""
        if isinstance(steps, Step) or not isinstance(steps, Sequence):
            raise InvalidInputError("steps: expected a list of Step records")
        limit = self.config.max_text_chars
        return [step_row(s, f"steps[{i}]", namespace, limit) for i, s in enumerate(steps)]

    def plan(
        self,
        messages: list[dict[str, Any]],
        held_state: HeldSnapshot,
        namespace: str,
        source: str,
        prefix: bool,
        hold_open_calls: bool,
        plain: bool = False,
    ) -> Plan:
        """Validate held + new messages and turn them into rows, embeddings and the
        messages to hold. Every step, the held calls' included, is checked once here,
        so an accepted add never makes a later add fail. ``plain``: ``messages`` is one
        text :meth:`plain_text` accepted (``Memory.add``)."""
        from osumem.ingest.openai_chat import read_messages

        held, users_before = held_state[0], held_state[1]
        if plain and not held:
            return self._plan_text(messages[0], users_before, namespace, source)
        check_answers(messages, held, held_state[2], held_state[3], source)
        combined = [*held, *messages]
        where = "messages" if not held else f"held+messages (the first {len(held)} held)"
        read = functools.partial(
            read_messages,
            source=source,
            boilerplate=self.config.boilerplate,
            prefix_namespace=prefix,
            where=where,
        )
        limit = self.config.max_text_chars
        every = continue_segments(read(combined), users_before, source)  # validates all
        checked = []
        for i, s in enumerate(every):  # held calls included: nothing is checked later
            if len(s.text) > limit:
                raise OversizedInputError(
                    f"{where}: step {i} ({s.role}) text has {len(s.text)} characters; "
                    f"max_text_chars is {limit}"
                )
            checked.append(step_row(s, f"{where}: step {i}", namespace, limit))
        cut = open_call_start(combined) if hold_open_calls else len(combined)
        new_held = combined[cut:]
        if new_held:
            read(new_held)  # a held tail must be readable on its own at the next add
            steps = continue_segments(read(combined[:cut]), users_before, source)
        else:
            steps = every
        rows: list[StepRow] = []
        if steps:
            costs = self._need_encoder("add_messages").count_tokens([s.text for s in steps])
            for i, (s, c) in enumerate(zip(steps, costs, strict=True)):
                name = f"{where}: step {i}"
                if i < len(every) and s == every[i]:  # checked above: only the cost is new
                    check_cost(int(c), name)
                    rows.append(replace(checked[i], cost=int(c)))
                else:
                    rows.append(step_row(replace(s, cost=int(c)), name, namespace, limit))
        return Plan(rows, self.embed(rows, None), new_held)

    def plain_text(self, message: dict[str, str]) -> bool:
        """Whether ``message`` (``Memory.add``'s user or assistant turn) passes every
        check as it is, so it is its own canonical form and :meth:`plan` may read it
        without the chat reader: its step text fits ``max_text_chars`` and it is valid
        Unicode. A text that fails goes the general way, which names the error."""
        text = message["content"]
        if len(text) + len(message["role"]) + 2 > self.config.max_text_chars:
            return False
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True

    def _plan_text(
        self, message: dict[str, str], users_before: int, namespace: str, source: str
    ) -> Plan:
        """What :meth:`plan` makes of one plain text with nothing held (the chat reader's
        step of the message, its subgoal label continued as ``continue_segments`` does:
        a user turn opens segment ``users_before + 1``, an assistant turn is in segment
        ``users_before``), made directly; ``tests/memory/test_add_text_path.py`` holds
        the two equal."""
        role = message["role"]
        text = f"{role}: {message['content']}"
        (cost,) = self._need_encoder("add_messages").count_tokens([text])
        check_cost(int(cost), "messages: step 0")
        row = StepRow(
            role=role,
            text=text,
            tool_action="",
            arguments_json="{}",
            tool_signature="",
            entities=(),
            subgoal=f"{source}:sg{users_before + (role == 'user')}",
            source=source or namespace,
            cost=int(cost),
        )
        return Plan([row], self.embed([row], None), [])

    def embed(self, rows: list[StepRow], embeddings: NDArray[Any] | None) -> NDArray[np.float32]:
        """Validated, L2-normalised embeddings of ``rows`` (given or encoded): the one
        place an add's vectors are checked against the store's dimension."""
        store_dim = self.store.dim
        if embeddings is None:
            if rows:
                enc = self._need_encoder("add (steps without embeddings)")
                emb = enc.encode([r.text for r in rows])
                where = f"encoder {enc.encoder_id}"
            else:
                emb = np.zeros((0, store_dim), dtype=np.float32)
                where = "embeddings"
        else:
            try:
                emb = np.asarray(embeddings, dtype=np.float32)
            except (TypeError, ValueError, OverflowError) as exc:
                raise InvalidInputError(f"embeddings: not a matrix of numbers ({exc})") from None
            where = "embeddings"
        if emb.ndim != 2 or emb.shape[0] != len(rows):
            raise DimensionError(f"{where}: expected shape ({len(rows)}, d), got {emb.shape}")
        if rows and store_dim and emb.shape[1] != store_dim:
            raise DimensionError(
                f"{where}: vectors of dimension {emb.shape[1]}, the memory store holds "
                f"dimension {store_dim} (encoder {self.store.encoder_id!r})"
            )
        if rows and emb.shape[1] == 0:
            raise DimensionError(f"{where}: vectors of dimension 0")
        own = self._loaded_encoder()
        # a first add of given vectors must match the encoder the store will record
        if (
            embeddings is not None
            and rows
            and not store_dim
            and own is not None
            and emb.shape[1] != own.dim
        ):
            raise DimensionError(
                f"embeddings: vectors of dimension {emb.shape[1]}, the memory's encoder "
                f"{own.encoder_id!r} has dimension {own.dim}"
            )
        return l2_normalise(emb, what=where) if rows else emb
