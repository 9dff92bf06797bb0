"""Serve the memory to agents: an MCP server (official ``mcp`` SDK, stdio or
streamable HTTP) and an HTTP JSON API (FastAPI + uvicorn) over one long-lived
:class:`~osumem.serve.service.MemoryService`.

Needs the ``serve`` extra (``pip install 'osumem[serve]'``). Start it with
``osumem serve --store mem.db``; talk to it with :class:`~osumem.serve.client.MemoryClient`,
any MCP client, or plain HTTP.
"""

from osumem.serve.auth import TOKEN_ENV, Grant, TokenTable, is_loopback, load_tokens
from osumem.serve.client import MemoryClient, ServerError
from osumem.serve.service import AddResult, MemoryService, ServiceLimits

__all__ = [
    "TOKEN_ENV",
    "AddResult",
    "Grant",
    "MemoryClient",
    "MemoryService",
    "ServerError",
    "ServiceLimits",
    "TokenTable",
    "is_loopback",
    "load_tokens",
]
