"""Adapters of the memory to agent frameworks, one module per framework, each loaded
only when used (importing ``osumem.integrations`` loads none of them):

- :mod:`osumem.integrations.langgraph`: :class:`~osumem.integrations.langgraph.OSUMemStore`,
  a LangGraph ``BaseStore`` (``create_react_agent(..., store=OSUMemStore(memory))``),
  and hooks that record a graph's messages and put retrieved context before the model;
- :mod:`osumem.integrations.openai_agents`:
  :class:`~osumem.integrations.openai_agents.OSUMemSession`, an OpenAI Agents SDK
  ``Session`` (``Runner.run(agent, input, session=OSUMemSession(...))``);
- :mod:`osumem.integrations.langchain`:
  :class:`~osumem.integrations.langchain.OSUMemRetriever`, a LangChain
  ``BaseRetriever`` returning ``Document``\\ s with the explanation in their metadata;
- :mod:`osumem.integrations.llamaindex`:
  :class:`~osumem.integrations.llamaindex.OSUMemBlock`, a LlamaIndex memory block.

Each needs its framework, in its own extra (``pip install 'osumem[langgraph]'``,
``[openai-agents]``, ``[langchain]``, ``[llamaindex]``; ``[integrations]`` installs
all four); a module imported without it raises
:class:`~osumem.errors.MissingExtraError` naming the extra.
"""

from __future__ import annotations

from osumem.errors import MissingExtraError

#: The adapter modules and the extra each needs.
EXTRAS = {
    "langgraph": "langgraph",
    "openai_agents": "openai-agents",
    "langchain": "langchain",
    "llamaindex": "llamaindex",
}


def missing(framework: str, module: str, exc: ImportError) -> MissingExtraError:
    """The error of an adapter module whose framework is not installed."""
    extra = EXTRAS[module]
    return MissingExtraError(
        f"osumem.integrations.{module} needs {framework}: pip install 'osumem[{extra}]' ({exc})"
    )
