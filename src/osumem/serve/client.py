"""Clients of the HTTP face (``httpx``): :class:`MemoryClient` for scripts, the CLI's
``--server`` option and agent loops in plain Python, :class:`AsyncMemoryClient` for
asyncio agents. Both are one implementation: every call is described once
(:class:`_Calls`: its method, path, body and how its answer is read) and sent by a
synchronous or an asynchronous ``httpx`` client, so the two faces cannot drift apart."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from osumem.errors import OSUMemError
from osumem.memory.retrieved import Retrieved, StoredStep
from osumem.serve.auth import TOKEN_ENV

#: Most steps one ``GET /v1/namespaces/{ns}/steps`` returns.
MAX_STEPS_PAGE = 10_000


class ServerError(OSUMemError):
    """The server refused a request or could not be reached.

    Attributes:
        status: the HTTP status (0 when no answer came).
        error_type: the server's error type (e.g. ``InvalidInputError``).
    """

    def __init__(self, message: str, *, status: int = 0, error_type: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type


@dataclass(frozen=True)
class _Call:
    """One request: the HTTP method, path, JSON body or raw content, query parameters,
    and how a successful answer becomes the return value."""

    method: str
    path: str
    body: Mapping[str, Any] | None = None
    params: Mapping[str, Any] | None = None
    content: bytes | None = None
    raw: bool = False
    read: Callable[[Any], Any] = lambda data: data


def _ns(namespace: str) -> str:
    return quote(namespace, safe="")


def _some(**values: Any) -> dict[str, Any]:
    """The keyword arguments that are not ``None``."""
    return {k: v for k, v in values.items() if v is not None}


def _listed(values: int | Sequence[int] | None) -> list[int] | None:
    if values is None:
        return None
    return [values] if isinstance(values, int) else list(values)


class _Calls:
    """Every call of the API, described once for both clients."""

    @staticmethod
    def health() -> _Call:
        return _Call("GET", "/healthz", read=dict)

    @staticmethod
    def add_messages(
        messages: Sequence[Mapping[str, Any]],
        namespace: str,
        source: str | None,
        prefix_namespace: bool | None,
        hold_open_calls: bool,
        on_duplicate: str,
        log_id: str | None,
        metadata: Mapping[str, Any] | None,
    ) -> _Call:
        body = {
            "messages": list(messages),
            "hold_open_calls": hold_open_calls,
            "on_duplicate": on_duplicate,
            **_some(
                source=source,
                log_id=log_id,
                prefix_namespace=prefix_namespace,
                metadata=None if metadata is None else dict(metadata),
            ),
        }
        return _Call("POST", f"/v1/namespaces/{_ns(namespace)}/messages", body, read=dict)

    @staticmethod
    def add(
        text: str,
        namespace: str,
        role: str,
        metadata: Mapping[str, Any] | None,
        source: str | None,
        on_duplicate: str,
        log_id: str | None,
    ) -> _Call:
        body = {
            "text": text,
            "role": role,
            "on_duplicate": on_duplicate,
            **_some(
                metadata=None if metadata is None else dict(metadata),
                source=source,
                log_id=log_id,
            ),
        }
        return _Call("POST", f"/v1/namespaces/{_ns(namespace)}/text", body, read=dict)

    @staticmethod
    def retrieve(
        query: str,
        budget: int | None,
        namespace: str,
        method: str | None,
        explain: bool,
        filter: Mapping[str, Any] | None,
    ) -> _Call:
        body: dict[str, Any] = {"query": query, **_some(budget=budget, method=method)}
        if explain:
            body["explain"] = True
        if filter is not None:
            body["filter"] = dict(filter)
        path = f"/v1/namespaces/{_ns(namespace)}/retrieve"
        return _Call("POST", path, body, read=Retrieved.from_dict)

    @staticmethod
    def delete(
        namespace: str, positions: int | Sequence[int] | None, ids: int | Sequence[int] | None
    ) -> _Call:
        body = _some(positions=_listed(positions), ids=_listed(ids))
        path = f"/v1/namespaces/{_ns(namespace)}/steps/delete"
        return _Call("POST", path, body, read=lambda d: [int(i) for i in d["deleted_ids"]])

    @staticmethod
    def update(
        namespace: str,
        position: int | None,
        step_id: int | None,
        text: str | None,
        metadata: Mapping[str, Any] | None,
    ) -> _Call:
        body = _some(
            position=position,
            id=step_id,
            text=text,
            metadata=None if metadata is None else dict(metadata),
        )
        path = f"/v1/namespaces/{_ns(namespace)}/steps/update"
        return _Call("POST", path, body, read=StoredStep.from_dict)

    @staticmethod
    def namespace_info() -> _Call:
        return _Call(
            "GET", "/v1/namespaces", params={"details": "true"}, read=lambda d: list(d["details"])
        )

    @staticmethod
    def steps(
        namespace: str, start: int | None, stop: int | None, grep: str | None, limit: int
    ) -> _Call:
        params = {"limit": limit, **_some(start=start, stop=stop, grep=grep)}
        return _Call("GET", f"/v1/namespaces/{_ns(namespace)}/steps", params=params, read=dict)

    @staticmethod
    def page_data(namespace: str) -> _Call:
        return _Call("GET", f"/v1/namespaces/{_ns(namespace)}/page", read=dict)

    @staticmethod
    def export_lines(namespaces: list[str] | None, embeddings: bool) -> _Call:
        params: dict[str, Any] = {"embeddings": "true" if embeddings else "false"}
        if namespaces:
            params["namespace"] = list(namespaces)
        return _Call(
            "GET", "/v1/export", params=params, raw=True, read=lambda t: str(t).splitlines()
        )

    @staticmethod
    def import_lines(text: str, replace: bool) -> _Call:
        return _Call(
            "POST",
            "/v1/import",
            params={"replace": "true" if replace else "false"},
            content=text.encode("utf-8"),
            read=dict,
        )

    @staticmethod
    def namespaces() -> _Call:
        return _Call("GET", "/v1/namespaces", read=lambda d: list(d["namespaces"]))

    @staticmethod
    def delete_namespace(namespace: str) -> _Call:
        return _Call(
            "DELETE", f"/v1/namespaces/{_ns(namespace)}", read=lambda d: int(d["deleted_steps"])
        )


def _request_args(call: _Call) -> dict[str, Any]:
    return {
        "json": call.body,
        "params": call.params,
        "content": call.content,
        "headers": {"content-type": "application/x-ndjson"} if call.content is not None else None,
    }


def _answer(url: str, call: _Call, response: Any) -> Any:
    """The value of a call's answer, or the :class:`ServerError` it carries."""
    if call.raw and response.status_code < 400:
        return call.read(response.text)
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code >= 400:
        err = data.get("error", {}) if isinstance(data, dict) else {}
        message = err.get("message") or response.text[:200]
        kind = err.get("type", "")
        raise ServerError(
            f"server {url} answered {response.status_code}"
            f"{f' ({kind})' if kind else ''}: {message}",
            status=response.status_code,
            error_type=kind,
        )
    return call.read(data)


def _unreachable(url: str, exc: Exception) -> ServerError:
    return ServerError(f"server {url}: {type(exc).__name__}: {exc}")


def _headers(token: str | None) -> dict[str, str]:
    token = os.environ.get(TOKEN_ENV) if token is None else token
    return {"authorization": f"Bearer {token}"} if token else {}


def _old_delete(name: str) -> None:
    warnings.warn(
        f"{name}(namespace) is deprecated; use {name}_namespace(namespace) (delete with "
        "positions or ids deletes steps)",
        DeprecationWarning,
        stacklevel=3,
    )


class MemoryClient:
    """Talks to ``osumem serve --transport http``.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:8765``.
        token: bearer token (default: the ``OSUMEM_TOKEN`` environment variable).
        timeout: seconds per request.
    """

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 60.0) -> None:
        import httpx

        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=_headers(token), timeout=timeout)

    def _run(self, call: _Call) -> Any:
        import httpx

        try:
            response = self._http.request(call.method, call.path, **_request_args(call))
        except httpx.HTTPError as exc:
            raise _unreachable(self.url, exc) from None
        return _answer(self.url, call, response)

    def health(self) -> dict[str, Any]:
        """The server's ``/healthz`` answer."""
        return self._run(_Calls.health())

    def add_messages(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        namespace: str = "default",
        source: str | None = None,
        prefix_namespace: bool | None = None,
        hold_open_calls: bool = True,
        on_duplicate: str = "skip",
        log_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Store messages; returns ``{"step_ids", "steps_in_namespace", ...}`` once the
        server has committed them (``on_duplicate``, ``log_id`` and ``metadata`` as in
        ``Memory.add_messages``)."""
        call = _Calls.add_messages(
            messages,
            namespace,
            source,
            prefix_namespace,
            hold_open_calls,
            on_duplicate,
            log_id,
            metadata,
        )
        return self._run(call)

    def add(
        self,
        text: str,
        *,
        namespace: str = "default",
        role: str = "user",
        metadata: Mapping[str, Any] | None = None,
        source: str | None = None,
        on_duplicate: str = "skip",
        log_id: str | None = None,
    ) -> dict[str, Any]:
        """Store one user (or assistant) turn of text, as ``Memory.add`` does; returns
        what :meth:`add_messages` returns."""
        call = _Calls.add(text, namespace, role, metadata, source, on_duplicate, log_id)
        return self._run(call)

    def retrieve(
        self,
        query: str,
        budget: int | None = None,
        *,
        namespace: str = "default",
        method: str | None = None,
        explain: bool = False,
        filter: Mapping[str, Any] | None = None,
    ) -> Retrieved:
        """The retrieved context, as ``Memory.retrieve`` and ``MemoryService.retrieve``
        return it (a :class:`~osumem.memory.Retrieved`: ``.steps``, ``.render()``;
        ``budget=None``: the server memory's default; with ``explain``, its
        ``.explain()`` comes with the answer; ``filter`` as ``Memory.retrieve`` takes
        it). The dict answer of earlier releases still reads (``result["rendered"]``)
        with a DeprecationWarning."""
        call = _Calls.retrieve(query, budget, namespace, method, explain, filter)
        return self._run(call)

    def delete(
        self,
        namespace: str,
        positions: int | Sequence[int] | None = None,
        *,
        ids: int | Sequence[int] | None = None,
    ) -> list[int]:
        """Delete steps by ``positions`` or ``ids``, as ``Memory.delete`` does; returns
        the ids deleted. ``delete(namespace)`` alone is the deprecated spelling of
        :meth:`delete_namespace` (for one release)."""
        if positions is None and ids is None:
            _old_delete("MemoryClient.delete")
            return self.delete_namespace(namespace)  # type: ignore[return-value]
        return self._run(_Calls.delete(namespace, positions, ids))

    def update(
        self,
        namespace: str,
        position: int | None = None,
        *,
        id: int | None = None,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> StoredStep:
        """Change one step's text or metadata, as ``Memory.update`` does; returns the
        step as stored now."""
        call = _Calls.update(namespace, position, id, text, metadata)
        return self._run(call)

    def namespace_info(self) -> list[dict[str, Any]]:
        """The namespaces this token may use, each with its step count and held
        messages."""
        return self._run(_Calls.namespace_info())

    def steps(
        self,
        namespace: str,
        *,
        start: int | None = None,
        stop: int | None = None,
        grep: str | None = None,
        limit: int = 1000,
    ) -> dict[str, Any]:
        """One page of the stored steps of ``namespace`` (see ``GET
        /v1/namespaces/{ns}/steps``)."""
        return self._run(_Calls.steps(namespace, start, stop, grep, limit))

    def page_data(self, namespace: str) -> dict[str, Any]:
        """The viewer page's data of ``namespace``."""
        return self._run(_Calls.page_data(namespace))

    def export_lines(
        self, namespaces: list[str] | None = None, *, embeddings: bool = True
    ) -> list[str]:
        """The export of ``namespaces`` (default: all this token may use) as JSON lines."""
        return self._run(_Calls.export_lines(namespaces, embeddings))

    def import_lines(self, text: str, *, replace: bool = False) -> dict[str, Any]:
        """Import an export (its whole text); returns what happened per namespace."""
        return self._run(_Calls.import_lines(text, replace))

    def namespaces(self) -> list[str]:
        """The namespaces this token may use that hold steps."""
        return self._run(_Calls.namespaces())

    def delete_namespace(self, namespace: str = "default") -> int:
        """Delete a namespace; returns the number of steps deleted."""
        return self._run(_Calls.delete_namespace(namespace))

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncMemoryClient:
    """:class:`MemoryClient` for asyncio: the same calls (the same arguments, answers
    and errors), each a coroutine, over one ``httpx.AsyncClient`` (its connection pool
    is shared by every task; many calls may be in flight at once).

    >>> async with AsyncMemoryClient("http://127.0.0.1:8765") as client:  # doctest: +SKIP
    ...     context = await client.retrieve("which flight?", 256, namespace="task-0")
    """

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 60.0) -> None:
        import httpx

        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.url, headers=_headers(token), timeout=timeout)

    async def _run(self, call: _Call) -> Any:
        import httpx

        try:
            response = await self._http.request(call.method, call.path, **_request_args(call))
        except httpx.HTTPError as exc:
            raise _unreachable(self.url, exc) from None
        return _answer(self.url, call, response)

    async def health(self) -> dict[str, Any]:
        """As :meth:`MemoryClient.health`."""
        return await self._run(_Calls.health())

    async def add_messages(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        namespace: str = "default",
        source: str | None = None,
        prefix_namespace: bool | None = None,
        hold_open_calls: bool = True,
        on_duplicate: str = "skip",
        log_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """As :meth:`MemoryClient.add_messages`."""
        call = _Calls.add_messages(
            messages,
            namespace,
            source,
            prefix_namespace,
            hold_open_calls,
            on_duplicate,
            log_id,
            metadata,
        )
        return await self._run(call)

    async def add(
        self,
        text: str,
        *,
        namespace: str = "default",
        role: str = "user",
        metadata: Mapping[str, Any] | None = None,
        source: str | None = None,
        on_duplicate: str = "skip",
        log_id: str | None = None,
    ) -> dict[str, Any]:
        """As :meth:`MemoryClient.add`."""
        call = _Calls.add(text, namespace, role, metadata, source, on_duplicate, log_id)
        return await self._run(call)

    async def retrieve(
        self,
        query: str,
        budget: int | None = None,
        *,
        namespace: str = "default",
        method: str | None = None,
        explain: bool = False,
        filter: Mapping[str, Any] | None = None,
    ) -> Retrieved:
        """As :meth:`MemoryClient.retrieve`."""
        call = _Calls.retrieve(query, budget, namespace, method, explain, filter)
        return await self._run(call)

    async def delete(
        self,
        namespace: str,
        positions: int | Sequence[int] | None = None,
        *,
        ids: int | Sequence[int] | None = None,
    ) -> list[int]:
        """As :meth:`MemoryClient.delete` (steps by position or id)."""
        if positions is None and ids is None:
            raise TypeError("AsyncMemoryClient.delete: give positions or ids")
        return await self._run(_Calls.delete(namespace, positions, ids))

    async def update(
        self,
        namespace: str,
        position: int | None = None,
        *,
        id: int | None = None,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> StoredStep:
        """As :meth:`MemoryClient.update`."""
        call = _Calls.update(namespace, position, id, text, metadata)
        return await self._run(call)

    async def namespace_info(self) -> list[dict[str, Any]]:
        """As :meth:`MemoryClient.namespace_info`."""
        return await self._run(_Calls.namespace_info())

    async def steps(
        self,
        namespace: str,
        *,
        start: int | None = None,
        stop: int | None = None,
        grep: str | None = None,
        limit: int = 1000,
    ) -> dict[str, Any]:
        """As :meth:`MemoryClient.steps`."""
        return await self._run(_Calls.steps(namespace, start, stop, grep, limit))

    async def page_data(self, namespace: str) -> dict[str, Any]:
        """As :meth:`MemoryClient.page_data`."""
        return await self._run(_Calls.page_data(namespace))

    async def export_lines(
        self, namespaces: list[str] | None = None, *, embeddings: bool = True
    ) -> list[str]:
        """As :meth:`MemoryClient.export_lines`."""
        return await self._run(_Calls.export_lines(namespaces, embeddings))

    async def import_lines(self, text: str, *, replace: bool = False) -> dict[str, Any]:
        """As :meth:`MemoryClient.import_lines`."""
        return await self._run(_Calls.import_lines(text, replace))

    async def namespaces(self) -> list[str]:
        """As :meth:`MemoryClient.namespaces`."""
        return await self._run(_Calls.namespaces())

    async def delete_namespace(self, namespace: str = "default") -> int:
        """As :meth:`MemoryClient.delete_namespace`."""
        return await self._run(_Calls.delete_namespace(namespace))

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
