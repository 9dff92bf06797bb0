"""Serve the memory to agents: an MCP server (official ``mcp`` SDK, stdio or
streamable HTTP) and an HTTP JSON API (FastAPI + uvicorn) over one long-lived
:class:`~osumem.serve.service.MemoryService`.

Needs the ``serve`` extra (``pip install 'osumem[serve]'``). Start it with
``osumem serve --store mem.db``; talk to it with :class:`~osumem.serve.client.MemoryClient`,
any MCP client, or plain HTTP.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from osumem.serve.aio import AsyncMemory
    from osumem.serve.auth import TOKEN_ENV, Grant, TokenTable, is_loopback, load_tokens
    from osumem.serve.client import AsyncMemoryClient, MemoryClient, ServerError
    from osumem.serve.service import AddResult, MemoryService, ServiceLimits

# loaded on first use, so importing a light submodule (the command line reads the
# defaults of osumem.serve.connections) does not load the memory and numpy
_HOMES = {
    "TOKEN_ENV": "auth",
    "Grant": "auth",
    "TokenTable": "auth",
    "is_loopback": "auth",
    "load_tokens": "auth",
    "MemoryClient": "client",
    "AsyncMemoryClient": "client",
    "AsyncMemory": "aio",
    "ServerError": "client",
    "AddResult": "service",
    "MemoryService": "service",
    "ServiceLimits": "service",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'osumem.serve' has no attribute {name!r}")
    return getattr(importlib.import_module(f"osumem.serve.{home}"), name)


__all__ = [
    "TOKEN_ENV",
    "AddResult",
    "AsyncMemory",
    "AsyncMemoryClient",
    "Grant",
    "MemoryClient",
    "MemoryService",
    "ServerError",
    "ServiceLimits",
    "TokenTable",
    "is_loopback",
    "load_tokens",
]
