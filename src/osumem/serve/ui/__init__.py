"""The viewer page: one HTML file with its own CSS and JavaScript (no libraries, no
network), shipped as package data.

:func:`standalone_page` writes the page with a memory's data inside it (``osumem
view``): a Content-Security-Policy in the page allows only its own inline script and
style (by hash) and no connection at all. :func:`server_page` is the same page for
``/ui`` of ``osumem serve``: it loads its script and style from ``/ui/app.js`` and
``/ui/app.css`` and asks the JSON API for the data with the bearer token typed into
its form (the token stays in the page's memory: never in a URL, a cookie or storage).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from functools import cache
from importlib import resources
from typing import Any

#: The Content-Security-Policy of ``/ui`` (sent as a header).
SERVER_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


@cache
def asset(name: str) -> str:
    """One of the page's files (``page.html``, ``app.js``, ``app.css``) as text."""
    if name not in ("page.html", "app.js", "app.css"):
        raise KeyError(name)
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _fill(csp: str, title: str, style: str, data: str, script: str) -> str:
    page = asset("page.html")
    for mark, value in (
        ("__CSP__", html.escape(csp, quote=False).replace('"', "&quot;")),
        ("__TITLE__", html.escape(title)),
        ("__STYLE__", style),
        ("__DATA__", data),
        ("__SCRIPT__", script),
    ):
        page = page.replace(mark, value, 1)
    return page


def embed_json(data: Any) -> str:
    """``data`` as JSON that can sit inside a ``<script>`` element: every ``<``, ``>``
    and ``&`` escaped, so no text of a step can close the element."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def standalone_page(data: dict[str, Any]) -> str:
    """The viewer page with ``data`` (:func:`osumem.memory.contents.page_data`) inside."""
    css, js = asset("app.css"), asset("app.js")
    csp = (
        f"default-src 'none'; script-src {_sha256(js)}; style-src {_sha256(css)}; "
        "img-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'"
    )
    return _fill(
        csp,
        f"OSU-Mem: {data.get('namespace', '')}",
        f"<style>{css}</style>",
        f'<script id="osumem-data" type="application/json">{embed_json(data)}</script>',
        f"<script>{js}</script>",
    )


def server_page() -> str:
    """The viewer page of ``/ui`` (no data inside; see the module doc)."""
    # the header carries the whole policy; a <meta> policy cannot hold frame-ancestors
    meta = "; ".join(p for p in SERVER_CSP.split("; ") if not p.startswith("frame-ancestors"))
    return _fill(
        meta,
        "OSU-Mem viewer",
        '<link rel="stylesheet" href="/ui/app.css">',
        "",
        '<script src="/ui/app.js"></script>',
    )
