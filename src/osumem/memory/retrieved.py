"""What the agent memory returns: the selected steps, their OSU handles, and a
rendering of them as a context block for a prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from osumem.errors import InvalidInputError
from osumem.memory.rows import NamespaceData
from osumem.retrieve.base import Retriever


@dataclass(frozen=True)
class OSUHandle:
    """One OSU a retrieved step belongs to: its view, key and member span.

    The handle names the unit the way the paper does (view + key); ``first``/``last``
    are its first and last member positions and ``size`` its member count, so two OSUs
    with the same key (split by the temporal gap or the S_max cap) stay distinct.
    """

    view: str
    key: str
    first: int
    last: int
    size: int

    def __str__(self) -> str:
        return f"{self.view}:{self.key}@{self.first}-{self.last}"


@dataclass(frozen=True)
class RetrievedStep:
    """One selected step.

    Attributes:
        position: position inside its namespace (0 = first step added).
        step_id: the store's global step id.
        namespace: the memory namespace.
        source: the step's source episode name.
        role: ``user``, ``assistant`` or ``tool`` (or any role given to ``add_steps``).
        text: the step text (what was embedded and token-counted).
        tool_action: the tool name, "" for none.
        cost: token cost.
        osus: OSUs of the step in the retriever's structure (empty for methods without
            OSUs, or when the step belongs to none).
        rank: 0 for the first step selected, 1 for the next, …
    """

    position: int
    step_id: int
    namespace: str
    source: str
    role: str
    text: str
    tool_action: str
    cost: int
    osus: tuple[OSUHandle, ...]
    rank: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (OSU handles as strings)."""
        return {
            "position": self.position,
            "step_id": self.step_id,
            "namespace": self.namespace,
            "source": self.source,
            "role": self.role,
            "tool_action": self.tool_action,
            "cost": self.cost,
            "rank": self.rank,
            "osus": [str(h) for h in self.osus],
            "text": self.text,
        }


@dataclass(frozen=True)
class Retrieved:
    """The result of :meth:`osumem.memory.Memory.retrieve`.

    ``steps`` are in selection order (``rank``); :meth:`render` lists them in time
    order, which reads naturally in a prompt.
    """

    namespace: str
    method: str
    budget: int
    steps: tuple[RetrievedStep, ...]
    query: str | None = None

    @property
    def cost(self) -> int:
        """Total token cost of the selected steps (never above ``budget``)."""
        return sum(s.cost for s in self.steps)

    @property
    def positions(self) -> list[int]:
        """Selected positions in selection order."""
        return [s.position for s in self.steps]

    def __len__(self) -> int:
        return len(self.steps)

    def render(self, *, order: str = "time", header: bool = True) -> str:
        """The selected steps as a plain-text context block for a prompt.

        Args:
            order: ``"time"`` (by position, default) or ``"rank"`` (selection order).
            header: start with one line saying what the block is.
        """
        if order not in ("time", "rank"):
            raise InvalidInputError(f"render: order must be 'time' or 'rank', got {order!r}")
        steps = sorted(self.steps, key=lambda s: s.position) if order == "time" else self.steps
        lines = []
        if header:
            lines.append(
                f"# Retrieved memory ({len(self.steps)} steps, {self.cost}/{self.budget} "
                f"tokens, namespace {self.namespace!r})"
            )
        for s in steps:
            lines.append(f"[step {s.position}] {s.text}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of the whole result."""
        return {
            "namespace": self.namespace,
            "method": self.method,
            "budget": self.budget,
            "cost": self.cost,
            "query": self.query,
            "steps": [s.to_dict() for s in self.steps],
        }


def retrieved_from(
    retriever: Retriever,
    positions: NDArray[np.int64],
    data: NamespaceData,
    *,
    namespace: str,
    method: str,
    budget: int,
    query: str | None,
) -> Retrieved:
    """The :class:`Retrieved` of ``positions`` (a selection, in rank order) of the
    namespace's steps ``data``, with the OSU handles of ``retriever``'s pool."""
    handles = osu_handles(retriever, positions)
    v = data.view
    steps = tuple(
        RetrievedStep(
            position=int(p),
            step_id=int(data.step_ids[p]),
            namespace=namespace,
            source=str(v.sources[p]),
            role=str(v.roles[p]),
            text=str(v.texts[p]),
            tool_action=str(v.tool_actions[p]),
            cost=int(v.costs[p]),
            osus=handles[rank],
            rank=rank,
        )
        for rank, p in enumerate(positions.tolist())
    )
    return Retrieved(namespace, method, budget, steps, query)


def osu_handles(retriever: Retriever, positions: NDArray[np.int64]) -> list[tuple[OSUHandle, ...]]:
    """OSU handles of ``positions`` in ``retriever``'s OSU pool
    (:meth:`~osumem.retrieve.Retriever.osu_pool`); a method without OSUs gets none."""
    pool = retriever.osu_pool()
    if pool is None:
        return [() for _ in positions]
    names = pool.view_names()
    out = []
    for p in positions:
        out.append(
            tuple(
                OSUHandle(
                    view=str(names[j]),
                    key=str(pool.keys[j]),
                    first=int(pool.spans[j, 0]),
                    last=int(pool.spans[j, 1]),
                    size=int(pool.sizes[j]),
                )
                for j in pool.osus_of(int(p))
            )
        )
    return out
