"""Bounds on the connections of the HTTP face, so clients that never finish a request
cannot starve the ones that do (slow-header, "slowloris" attacks).

uvicorn alone waits for a request head for ever and counts idle connections against
its concurrency limit, so a few hundred connections that send half a header block
make every other request get 503. :func:`guarded_protocol` gives uvicorn an HTTP
protocol (its httptools one where httptools is installed, else its h11 one, with a
:class:`ConnectionGuard` shared by every connection of the server) that

- closes a connection whose request head has not arrived ``header_timeout`` seconds
  after the connection opened or its previous response ended (bytes trickling in do
  not extend it);
- keeps at most ``max_connections`` connections open in all and
  ``max_per_client`` per client address: a new connection over a limit takes the
  place of the connection that has waited longest for its request head (of that
  client, for the per-client limit); only when every connection is busy with a
  request is the new one refused (503, then closed).

A request whose head has arrived is never closed by the guard; its body has its own
time limit (:class:`osumem.serve.http_app.LimitsAndAuth`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from typing import Any

from osumem.serve.connection_limits import (
    HEADER_TIMEOUT,
    HTTP_PROTOCOLS,
    MAX_CONNECTIONS,
    MAX_PER_CLIENT,
)

_REFUSAL = (
    b'{"error": {"type": "ServiceUnavailable", "message": "too many connections, '
    b'every one busy with a request; retry"}}'
)
_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"connection: close\r\nretry-after: 1\r\ncontent-length: "
    + str(len(_REFUSAL)).encode()
    + b"\r\n\r\n"
    + _REFUSAL
)


@dataclass
class GuardStats:
    """What a guard did since the server started (for logs and tests)."""

    admitted: int = 0
    refused: int = 0
    evicted: int = 0
    timed_out: int = 0


class ConnectionGuard:
    """The connection bookkeeping of one server (used from its event loop only)."""

    def __init__(
        self,
        *,
        header_timeout: float = HEADER_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        max_per_client: int = MAX_PER_CLIENT,
    ) -> None:
        self.header_timeout = header_timeout
        self.max_connections = max_connections
        self.max_per_client = max_per_client
        self.open: set[Any] = set()
        self.per_client: Counter[str] = Counter()
        # connections waiting for a request head, oldest first (dicts keep order)
        self.waiting: dict[Any, None] = {}
        self.waiting_of: dict[str, dict[Any, None]] = {}
        self.stats = GuardStats()

    def admit(self, conn: Any, client: str) -> bool:
        """Count ``conn`` in, making room by evicting the longest-waiting connection
        when a limit is reached; ``False`` when there is no room (every connection busy)."""
        if len(self.open) >= self.max_connections and not self._evict(self.waiting):
            self.stats.refused += 1
            return False
        if self.per_client[client] >= self.max_per_client and not self._evict(
            self.waiting_of.get(client, {})
        ):
            self.stats.refused += 1
            return False
        self.open.add(conn)
        self.per_client[client] += 1
        self.stats.admitted += 1
        self.wait(conn, client)
        return True

    def wait(self, conn: Any, client: str) -> None:
        """``conn`` now waits for a request head (it opened, or a response ended)."""
        if conn not in self.open:
            return
        self.started(conn, client)  # back to the end of the queue
        self.waiting[conn] = None
        self.waiting_of.setdefault(client, {})[conn] = None
        conn.arm_header_timer(self.header_timeout)

    def started(self, conn: Any, client: str) -> None:
        """``conn``'s request head arrived: it no longer waits."""
        self.waiting.pop(conn, None)
        mine = self.waiting_of.get(client)
        if mine is not None:
            mine.pop(conn, None)
            if not mine:
                del self.waiting_of[client]
        conn.disarm_header_timer()

    def release(self, conn: Any, client: str) -> None:
        """``conn`` closed (or is being closed): it counts no longer."""
        self.started(conn, client)
        if conn in self.open:
            self.open.discard(conn)
            self.per_client[client] -= 1
            if self.per_client[client] <= 0:
                del self.per_client[client]

    def timed_out(self, conn: Any) -> None:
        """``conn``'s header timer ran out."""
        if conn in self.waiting:
            self.stats.timed_out += 1
            conn.close_waiting()

    def _evict(self, queue: dict[Any, None]) -> bool:
        victim = next(iter(queue), None)
        if victim is None:
            return False
        self.stats.evicted += 1
        victim.close_waiting()
        return True


#: The HTTP protocols :func:`guarded_protocol` can guard (besides ``auto``).
PROTOCOLS = HTTP_PROTOCOLS[1:]


def default_protocol() -> str:
    """The protocol uvicorn's ``http="auto"`` picks here: httptools when importable."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "h11"
    return "httptools"


def guarded_protocol(guard: ConnectionGuard, protocol: str = "auto") -> type:
    """uvicorn's HTTP protocol ``protocol`` (one of :data:`PROTOCOLS`, or ``auto``:
    :func:`default_protocol`) with ``guard`` in front (pass it as
    ``uvicorn.Config(http=...)``)."""
    name = default_protocol() if protocol == "auto" else protocol
    if name == "h11":
        return _guarded_h11(guard)
    if name == "httptools":
        return _guarded_httptools(guard)
    raise ValueError(f"HTTP protocol: expected one of {PROTOCOLS}, got {protocol!r}")


class _GuardHooks:
    """The guard's side of a guarded protocol: admission when a connection opens, the
    header timer, and what the guard calls (mixed into uvicorn's protocol, which has
    ``client``, ``transport`` and ``loop``; each guard gets its own class)."""

    guard: ConnectionGuard
    client: Any
    transport: Any
    loop: Any
    _timer: asyncio.TimerHandle | None = None
    _client_key = ""

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]  # the protocol's
        self._client_key = self.client[0] if self.client else ""
        if not self.guard.admit(self, self._client_key):
            transport.write(_REFUSED)
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.release(self, self._client_key)
        super().connection_lost(exc)  # type: ignore[misc]

    def arm_header_timer(self, seconds: float) -> None:
        self.disarm_header_timer()
        self._timer = self.loop.call_later(seconds, self.guard.timed_out, self)

    def disarm_header_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close_waiting(self) -> None:
        self.guard.release(self, self._client_key)
        if not self.transport.is_closing():
            self.transport.close()


def _guarded_h11(guard: ConnectionGuard) -> type:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(_GuardHooks, H11Protocol):  # type: ignore[misc]
        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not before:  # a request head arrived
                self.guard.started(self, self._client_key)

        def on_response_complete(self) -> None:
            # first: a pipelined request that super() starts marks the connection busy
            self.guard.wait(self, self._client_key)
            super().on_response_complete()

    GuardedH11Protocol.guard = guard
    return GuardedH11Protocol


def _guarded_httptools(guard: ConnectionGuard) -> type:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(_GuardHooks, HttpToolsProtocol):  # type: ignore[misc]
        def on_headers_complete(self) -> None:
            super().on_headers_complete()  # a request head arrived (maybe pipelined)
            self.guard.started(self, self._client_key)

        def on_response_complete(self) -> None:
            self.guard.wait(self, self._client_key)
            queued = bool(self.pipeline)
            super().on_response_complete()
            if queued:  # super() started a pipelined request, whose head is in
                self.guard.started(self, self._client_key)

    GuardedHttpToolsProtocol.guard = guard
    return GuardedHttpToolsProtocol
