"""A small synchronous client of the HTTP face (``httpx``), for scripts, the CLI's
``--server`` option and agent loops in plain Python."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from osumem.errors import OSUMemError
from osumem.memory.retrieved import Retrieved
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
        token = os.environ.get(TOKEN_ENV) if token is None else token
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def _call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        params: Mapping[str, Any] | None = None,
        content: bytes | None = None,
        raw: bool = False,
    ) -> Any:
        import httpx

        try:
            response = self._http.request(
                method,
                path,
                json=body,
                params=params,
                content=content,
                headers={"content-type": "application/x-ndjson"} if content is not None else None,
            )
        except httpx.HTTPError as exc:
            raise ServerError(f"server {self.url}: {type(exc).__name__}: {exc}") from None
        if raw and response.status_code < 400:
            return response.text
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code >= 400:
            err = data.get("error", {}) if isinstance(data, dict) else {}
            message = err.get("message") or response.text[:200]
            kind = err.get("type", "")
            raise ServerError(
                f"server {self.url} answered {response.status_code}"
                f"{f' ({kind})' if kind else ''}: {message}",
                status=response.status_code,
                error_type=kind,
            )
        return data

    @staticmethod
    def _ns(namespace: str) -> str:
        return quote(namespace, safe="")

    def health(self) -> dict[str, Any]:
        """The server's ``/healthz`` answer."""
        return dict(self._call("GET", "/healthz"))

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
    ) -> dict[str, Any]:
        """Store messages; returns ``{"step_ids", "steps_in_namespace", ...}`` once the
        server has committed them (``on_duplicate`` and ``log_id`` as in
        ``Memory.add_messages``)."""
        body: dict[str, Any] = {
            "messages": list(messages),
            "hold_open_calls": hold_open_calls,
            "on_duplicate": on_duplicate,
        }
        if source is not None:
            body["source"] = source
        if log_id is not None:
            body["log_id"] = log_id
        if prefix_namespace is not None:
            body["prefix_namespace"] = prefix_namespace
        return dict(self._call("POST", f"/v1/namespaces/{self._ns(namespace)}/messages", body))

    def retrieve(
        self,
        query: str,
        budget: int | None = None,
        *,
        namespace: str = "default",
        method: str | None = None,
        explain: bool = False,
    ) -> Retrieved:
        """The retrieved context, as ``Memory.retrieve`` and ``MemoryService.retrieve``
        return it (a :class:`~osumem.memory.Retrieved`: ``.steps``, ``.render()``;
        ``budget=None``: the server memory's default; with ``explain``, its
        ``.explain()`` comes with the answer). The dict answer of earlier releases still
        reads (``result["rendered"]``) with a DeprecationWarning."""
        body: dict[str, Any] = {"query": query}
        if budget is not None:
            body["budget"] = budget
        if method is not None:
            body["method"] = method
        if explain:
            body["explain"] = True
        answer = self._call("POST", f"/v1/namespaces/{self._ns(namespace)}/retrieve", body)
        return Retrieved.from_dict(answer)

    def namespace_info(self) -> list[dict[str, Any]]:
        """The namespaces this token may use, each with its step count and held
        messages."""
        return list(self._call("GET", "/v1/namespaces", params={"details": "true"})["details"])

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
        params: dict[str, Any] = {"limit": limit}
        for key, value in (("start", start), ("stop", stop), ("grep", grep)):
            if value is not None:
                params[key] = value
        return dict(self._call("GET", f"/v1/namespaces/{self._ns(namespace)}/steps", params=params))

    def page_data(self, namespace: str) -> dict[str, Any]:
        """The viewer page's data of ``namespace``."""
        return dict(self._call("GET", f"/v1/namespaces/{self._ns(namespace)}/page"))

    def export_lines(
        self, namespaces: list[str] | None = None, *, embeddings: bool = True
    ) -> list[str]:
        """The export of ``namespaces`` (default: all this token may use) as JSON lines."""
        params: dict[str, Any] = {"embeddings": "true" if embeddings else "false"}
        if namespaces:
            params["namespace"] = list(namespaces)
        return str(self._call("GET", "/v1/export", params=params, raw=True)).splitlines()

    def import_lines(self, text: str, *, replace: bool = False) -> dict[str, Any]:
        """Import an export (its whole text); returns what happened per namespace."""
        return dict(
            self._call(
                "POST",
                "/v1/import",
                params={"replace": "true" if replace else "false"},
                content=text.encode("utf-8"),
            )
        )

    def namespaces(self) -> list[str]:
        """The namespaces this token may use that hold steps."""
        return list(self._call("GET", "/v1/namespaces")["namespaces"])

    def delete_namespace(self, namespace: str = "default") -> int:
        """Delete a namespace; returns the number of steps deleted."""
        return int(self._call("DELETE", f"/v1/namespaces/{self._ns(namespace)}")["deleted_steps"])

    def delete(self, namespace: str) -> int:
        """Deprecated spelling of :meth:`delete_namespace` (for one release)."""
        warnings.warn(
            "MemoryClient.delete is deprecated; use MemoryClient.delete_namespace",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.delete_namespace(namespace)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
