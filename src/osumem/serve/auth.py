"""Bearer tokens of the HTTP face: where they come from and what each may touch.

A token comes from the ``OSUMEM_TOKEN`` environment variable (it may use every
namespace) or from a token file, one token per line, optionally followed by the
namespaces it may use (comma-separated; shell-style patterns such as ``agent-7/*``)::

    # token                              namespaces (none listed: all)
    3b1f0c9e5d7a4e21b8c6f0a2d4e6b8c1     task-*
    9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a

Tokens are compared in constant time; a token shorter than 16 characters is refused.
"""

from __future__ import annotations

import fnmatch
import hmac
import ipaddress
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from osumem.errors import ConfigError, DataFileError

#: The environment variable holding a token that may use every namespace.
TOKEN_ENV = "OSUMEM_TOKEN"
#: The shortest accepted token.
MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class Grant:
    """What one token may do: every namespace (``patterns`` empty) or those matching
    one of ``patterns``."""

    patterns: tuple[str, ...] = ()

    def allows(self, namespace: str) -> bool:
        """Whether this grant covers ``namespace``."""
        return not self.patterns or any(fnmatch.fnmatchcase(namespace, p) for p in self.patterns)


@dataclass(frozen=True)
class TokenTable:
    """The accepted tokens and their grants; empty means authentication is off."""

    grants: Mapping[str, Grant] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        """Whether requests must carry a token."""
        return bool(self.grants)

    def lookup(self, token: str | None) -> Grant | None:
        """The grant of ``token`` (constant-time comparison), ``None`` when unknown."""
        if not token:
            return None
        found = None
        for known, grant in self.grants.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = grant
        return found

    def grant_for_header(self, authorization: str | None) -> Grant | None:
        """The grant of an ``Authorization: Bearer <token>`` header value."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.lookup(token.strip())


def _check_token(token: str, where: str) -> None:
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"{where}: a token needs at least {MIN_TOKEN_CHARS} characters")
    if any(c.isspace() for c in token):
        raise ConfigError(f"{where}: a token may not contain white space")


def parse_token_lines(lines: Iterable[str], where: str) -> dict[str, Grant]:
    """Tokens and grants from token-file lines (see the module doc)."""
    grants: dict[str, Grant] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        token, _, rest = line.partition(" ")
        here = f"{where} line {number}"
        _check_token(token, here)
        patterns = tuple(p.strip() for p in rest.replace(" ", ",").split(",") if p.strip())
        if token in grants:
            raise ConfigError(f"{here}: the same token is listed twice")
        grants[token] = Grant(patterns)
    return grants


def load_tokens(
    token_file: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> TokenTable:
    """The tokens from ``OSUMEM_TOKEN`` and ``token_file`` (either may be absent)."""
    env = os.environ if environ is None else environ
    grants: dict[str, Grant] = {}
    value = env.get(TOKEN_ENV, "").strip()
    if value:
        _check_token(value, TOKEN_ENV)
        grants[value] = Grant()
    if token_file is not None:
        path = Path(token_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise DataFileError(f"token file {path}: cannot read ({exc.strerror})") from None
        from_file = parse_token_lines(text.splitlines(), f"token file {path}")
        if not from_file:
            raise ConfigError(f"token file {path}: holds no token")
        grants.update(from_file)
    return TokenTable(grants)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) resolves to loopback addresses only."""
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)
