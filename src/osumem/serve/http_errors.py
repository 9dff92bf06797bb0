"""One error shape for every answer of the HTTP face, and the OpenAPI schema that says so.

Every error, whoever raises it (a library error, a body FastAPI cannot parse, a route
that does not exist, a method a route does not take, a bug), is answered as JSON
``{"error": {"type": ..., "message": ...}}`` (plus ``fields`` for a body that fails
validation) with the status of :data:`ERROR_STATUSES`. :func:`install_error_handlers`
registers the handlers on a FastAPI app; :func:`document_errors` makes the app's
OpenAPI schema list those statuses, with that body, on every operation, the routes
added later included.
"""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from osumem.errors import OSUMemError

logger = logging.getLogger("osumem.serve")


class ErrorDetail(BaseModel):
    """What went wrong: the error's type (a library error class, or the HTTP reason
    such as ``NotFound``) and a one-line message naming what and where."""

    type: str = Field(description="Error type, e.g. 'LogFormatError', 'BudgetError', 'NotFound'.")
    message: str = Field(description="What is wrong and where (the field or message).")


class ErrorResponse(BaseModel):
    """The body of every error answer."""

    error: ErrorDetail
    fields: list[str] | None = Field(
        default=None, description="For a body that fails validation: the fields named."
    )


#: Every error status the JSON API answers, with when (``401`` and ``503`` not on the
#: routes served without a token).
ERROR_STATUSES: dict[int, str] = {
    401: "No valid 'Authorization: Bearer <token>' header.",
    403: "The token may not use this namespace, or the request's Origin is foreign.",
    404: "No such route, or a namespace that holds nothing to read.",
    408: "The request body did not arrive in time.",
    409: "An import whose namespace holds other content (without replace=true).",
    413: "The request body is over the server's --max-body-bytes.",
    421: "The Host header names no address this server answers for (DNS rebinding guard).",
    422: "The body, a field, a message or the namespace in the path is invalid (named).",
    500: "An internal error (logged by the server).",
    503: "The memory store cannot be used now (busy, read-only, damaged).",
}
_NOT_PUBLIC = frozenset({401, 503})


def error_json(status: int, error_type: str, message: str, **extra: Any) -> JSONResponse:
    """A JSON error answer of the documented shape (one-line message)."""
    line = " ".join(str(message).split()) or HTTPStatus(status).phrase
    return JSONResponse({"error": {"type": error_type, "message": line}, **extra}, status)


def _reason(status: int) -> str:
    """``NotFound`` for 404: the HTTP reason phrase as one word."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        return "HTTPError"
    return "".join(word[:1].upper() + word[1:] for word in phrase.replace("-", " ").split())


def _validation_message(errors: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """One line naming each invalid field, and the fields."""
    problems, fields = [], []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ())]
        if err.get("type") == "json_invalid":
            position = loc[1] if len(loc) > 1 else "?"
            detail = (err.get("ctx") or {}).get("error", "")
            problems.append(f"body: invalid JSON at character {position} ({detail})")
            fields.append("body")
            continue
        where = ".".join(loc)
        problems.append(f"{where}: {err.get('msg', 'invalid')}")
        fields.append(where)
    return "; ".join(problems), fields


def _unparseable(exc: BaseException | None) -> str:
    """Why a body could not be parsed (FastAPI answers those 400 with no reason)."""
    if isinstance(exc, UnicodeDecodeError):
        return f"body: not valid UTF-8 text (byte {exc.start}: {exc.reason})"
    if isinstance(exc, RecursionError):
        return "body: JSON nested too deeply to read"
    if isinstance(exc, ValueError | TypeError):
        return f"body: not valid JSON ({str(exc)[:120]})"
    return "body: could not be read as JSON"


def install_error_handlers(app: FastAPI, status_of: Any) -> None:
    """Answer every error of ``app`` with the documented JSON body (``status_of``:
    the status of a library error)."""

    @app.exception_handler(OSUMemError)
    async def library_error(request: Request, exc: OSUMemError) -> JSONResponse:
        return error_json(status_of(exc), type(exc).__name__, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, fields = _validation_message(list(exc.errors()))
        return error_json(422, "InvalidInputError", message, fields=fields)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI: "There was an error parsing the body"
            message = _unparseable(exc.__cause__)
            return error_json(422, "InvalidInputError", message, fields=["body"])
        detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        if exc.status_code == 404:
            detail = f"no route {request.method} {request.url.path!r}"
        elif exc.status_code == 405:
            allow = (exc.headers or {}).get("allow", "")
            detail = f"{request.method} is not allowed on {request.url.path!r} (allowed: {allow})"
        answer = error_json(exc.status_code, _reason(exc.status_code), detail)
        answer.headers.update(exc.headers or {})
        return answer

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("internal error on %s %s", request.method, request.url.path)
        return error_json(
            500, "InternalError", f"{type(exc).__name__} while serving the request (see the log)"
        )


def document_errors(app: FastAPI, public: frozenset[str] = frozenset()) -> None:
    """Make ``app.openapi()`` list :data:`ERROR_STATUSES` with :class:`ErrorResponse`
    on every operation (computed at the first call, so routes added after this call
    are covered), in place of FastAPI's own validation-error schema; ``public``: the
    paths served without a token."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components["ErrorResponse"] = ErrorResponse.model_json_schema(
            ref_template="#/components/schemas/{model}"
        )
        detail = components["ErrorResponse"].pop("$defs", {})
        components.update(detail)
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
        body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
        for path, operations in schema.get("paths", {}).items():
            for op in operations.values():
                responses = op.setdefault("responses", {})
                for status, why in ERROR_STATUSES.items():
                    if status in _NOT_PUBLIC and path in public:
                        continue
                    responses[str(status)] = {"description": why, "content": body}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
