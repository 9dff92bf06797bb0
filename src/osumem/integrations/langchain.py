"""LangChain: the memory as a ``BaseRetriever``.

:class:`OSUMemRetriever` answers ``retriever.invoke(query)`` (and ``ainvoke``, and
every chain it is part of) with the steps the memory retrieves for the query under a
token budget, as ``Document``\\ s in selection order: the step's text as the page
content, and in the metadata where it came from (namespace, position, step id, role,
tool, token cost, rank, its units), the step's own metadata and time, and with
``explain`` (the default) the explanation of why it is there (its cosine, flat rank,
lexical score, stage and the unit that brought it in; see
:mod:`osumem.memory.explain`)::

    retriever = OSUMemRetriever(memory=Memory.open("agent.db"), namespace="task-7", budget=256)
    docs = retriever.invoke("how did the user pay?")
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from osumem.integrations import missing
from osumem.memory import Memory

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict, PrivateAttr
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise missing("langchain-core", "langchain", exc) from None

__all__ = ["OSUMemRetriever"]


class OSUMemRetriever(BaseRetriever):
    """A LangChain retriever over a :class:`~osumem.memory.Memory` (see the module doc).

    Attributes:
        memory: the memory.
        namespace: the namespace searched.
        budget: token budget of the returned steps (default: the memory's).
        method: the retrieval method (default: the memory's).
        filter: a step filter (:mod:`osumem.memory.filters`) applied to every query.
        explain: put each step's explanation in its document's metadata.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Memory
    namespace: str = "default"
    budget: int | None = None
    method: str | None = None
    filter: dict[str, Any] | None = None
    explain: bool = True
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        with self._lock:
            found = self.memory.retrieve(
                query,
                self.budget,
                namespace=self.namespace,
                method=self.method,
                filter=self.filter,
            )
            why = found.explain().steps if self.explain else ()
        docs = []
        for k, step in enumerate(found.steps):
            meta = {
                "namespace": step.namespace,
                "position": step.position,
                "step_id": step.step_id,
                "role": step.role,
                "tool_action": step.tool_action,
                "cost": step.cost,
                "rank": step.rank,
                "osus": [str(h) for h in step.osus],
                "metadata": dict(step.metadata),
                "time": step.time,
                "method": found.method,
            }
            if why:
                meta["explanation"] = why[k].to_dict()
            docs.append(Document(page_content=step.text, metadata=meta, id=str(step.step_id)))
        return docs

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return await asyncio.to_thread(
            self._get_relevant_documents, query, run_manager=run_manager.get_sync()
        )
