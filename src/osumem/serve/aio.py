"""The agent memory for asyncio: :class:`AsyncMemory`.

An asyncio agent must not block its event loop on a retrieval (encoding the query,
ranking, packing) or on an add (a store transaction, updating the index).
:class:`AsyncMemory` gives :class:`~osumem.memory.Memory`'s calls as coroutines that
run on the threads of a :class:`~osumem.serve.service.MemoryService`: retrievals on a
pool of reader threads, side by side; writes (adds, deletes, updates) on the one store
thread, each acknowledged once committed and indexed; with ``process=True`` those
threads run in a child process (:mod:`osumem.serve.worker`), so they never hold the
event loop's interpreter lock. It is one implementation with
the synchronous faces: every call goes to the same service methods the HTTP and MCP
servers use, which call the same :class:`~osumem.memory.Memory`; nothing is written
twice. Any number of tasks may call one ``AsyncMemory`` at once.

>>> async with AsyncMemory.open("mem.db", encoder="hashing") as memory:  # doctest: +SKIP
...     await memory.add("I prefer aisle seats", namespace="ana")
...     context = await memory.retrieve("seat preference?", 128, namespace="ana")
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from osumem.memory import DEFAULT_NAMESPACE, Retrieved
from osumem.memory.retrieved import StoredStep
from osumem.serve.service import MemoryService, ServiceLimits

if TYPE_CHECKING:
    from osumem.serve.worker import ProcessService


class AsyncMemory:
    """Awaitable calls over a :class:`MemoryService` (see the module doc). Open it with
    :meth:`open`; close it with ``await memory.aclose()`` or ``async with``.

    Retrievals take query texts (not vectors) within the service's limits
    (:class:`~osumem.serve.service.ServiceLimits`: a budget of at most 32,768 tokens
    by default)."""

    def __init__(self, service: MemoryService | ProcessService) -> None:
        self.service = service

    @classmethod
    def open(
        cls,
        path: str | Path | None = None,
        *,
        encoder: str | None = None,
        method: str = "osumem",
        readers: int = 4,
        limits: ServiceLimits | None = None,
        process: bool = False,
        **settings: Any,
    ) -> AsyncMemory:
        """Open (or create) the memory at ``path`` (``None``: in RAM) as
        :meth:`Memory.open <osumem.memory.Memory.open>` does, and load its encoder
        (this blocks while the encoder loads: open it before the event loop's busy
        time, or with ``await asyncio.to_thread(AsyncMemory.open, ...)``).
        ``readers``: threads retrieving side by side; ``settings``: the other
        :class:`~osumem.memory.MemoryConfig` fields.

        ``process=True`` keeps the memory in a child process of its own
        (:class:`~osumem.serve.worker.ProcessService`): the same answers, and the
        event loop never waits while the memory works (its threads would otherwise
        take the interpreter lock from the loop now and then); it costs a second
        Python process (its start: about 0.2 s plus loading the encoder there), and
        a result explains itself only when retrieved with ``explain=True``. The child
        leaves one CPU to this process (``spare_cpu=False`` lets it use all)."""
        kwargs: dict[str, Any] = {
            "encoder": encoder,
            "method": method,
            "readers": readers,
            "limits": limits,
        }
        if process:
            from osumem.serve.worker import ProcessService

            return cls(ProcessService(path, **kwargs, **settings))
        return cls(MemoryService(path, **kwargs, **settings))

    # --- writing ------------------------------------------------------------------

    async def add(
        self,
        text: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        role: str = "user",
        metadata: Mapping[str, Any] | None = None,
        source: str | None = None,
        on_duplicate: str | None = None,
        log_id: str | None = None,
    ) -> list[int]:
        """:meth:`Memory.add <osumem.memory.Memory.add>`: one user or assistant turn of
        text; the new step ids once committed."""
        result = await self.service.aadd(
            text,
            namespace=namespace,
            role=role,
            metadata=metadata,
            source=source,
            on_duplicate=on_duplicate,
            log_id=log_id,
        )
        return result.step_ids

    async def add_messages(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        namespace: str = DEFAULT_NAMESPACE,
        source: str | None = None,
        prefix_namespace: bool | None = None,
        hold_open_calls: bool = True,
        on_duplicate: str | None = None,
        log_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """:meth:`Memory.add_messages <osumem.memory.Memory.add_messages>`; the new
        step ids once committed."""
        result = await self.service.aadd_messages(
            namespace,
            messages,
            source=source,
            prefix_namespace=prefix_namespace,
            hold_open_calls=hold_open_calls,
            on_duplicate=on_duplicate,
            log_id=log_id,
            metadata=metadata,
        )
        return result.step_ids

    async def delete(
        self,
        namespace: str,
        positions: int | Sequence[int] | None = None,
        *,
        ids: int | Sequence[int] | None = None,
    ) -> list[int]:
        """:meth:`Memory.delete <osumem.memory.Memory.delete>`: steps by position or
        id; the ids deleted."""
        if positions is None and ids is None:
            raise TypeError("AsyncMemory.delete: give positions or ids")
        return await self.service.adelete(namespace, positions, ids=ids)

    async def update(
        self,
        namespace: str,
        position: int | None = None,
        *,
        id: int | None = None,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> StoredStep:
        """:meth:`Memory.update <osumem.memory.Memory.update>`: one step's text and/or
        metadata; the step as stored now."""
        return await self.service.aupdate(namespace, position, id=id, text=text, metadata=metadata)

    async def delete_namespace(self, namespace: str = DEFAULT_NAMESPACE) -> int:
        """:meth:`Memory.delete_namespace <osumem.memory.Memory.delete_namespace>`."""
        return await self.service.adelete_namespace(namespace)

    # --- reading ------------------------------------------------------------------

    async def retrieve(
        self,
        query: str,
        budget: int | None = None,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        method: str | None = None,
        explain: bool = False,
        filter: Mapping[str, Any] | None = None,
    ) -> Retrieved:
        """:meth:`Memory.retrieve <osumem.memory.Memory.retrieve>` on a reader thread
        (the same answer; with ``explain``, the explanation is computed there too)."""
        return await self.service.aretrieve(
            query, budget, namespace=namespace, method=method, explain=explain, filter=filter
        )

    async def steps(
        self,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        positions: int | Sequence[int] | None = None,
        ids: int | Sequence[int] | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[StoredStep]:
        """:meth:`Memory.steps <osumem.memory.Memory.steps>`."""
        return await self.service.asteps_of(namespace, positions=positions, ids=ids, filter=filter)

    async def namespaces(self) -> list[str]:
        """:meth:`Memory.namespaces <osumem.memory.Memory.namespaces>`."""
        return await self.service.anamespaces()

    async def n_steps(self, namespace: str = DEFAULT_NAMESPACE) -> int:
        """:meth:`Memory.n_steps <osumem.memory.Memory.n_steps>`."""
        return int(await self.service.acall("n_steps", namespace))

    # --- lifecycle ----------------------------------------------------------------

    async def aclose(self) -> None:
        """Finish running calls, then close the store (off the event loop)."""
        await asyncio.to_thread(self.service.close)

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
