"""Which ``Host`` (and ``Origin``) a request may name: the guard against DNS rebinding.

A web page on ``evil.example`` whose name an attacker re-points at 127.0.0.1 can make a
browser send requests to a loopback server; those requests carry ``Host:
evil.example``. A server answers only the names it is reached by: the loopback names
(``localhost``, ``127.0.0.1``, ``::1``), the address it binds to, and the names given
with ``--allowed-host``; any other ``Host`` gets 421 (Misdirected Request). A request
with an ``Origin`` header (sent by browsers) must come from one of the same names, or
it gets 403. A server bound to every interface (``0.0.0.0``, ``::``) cannot know its
names; it checks nothing unless ``--allowed-host`` lists them (a token is required
there anyway). ``--allowed-host '*'`` turns the check off.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

#: Names a loopback server always answers for.
LOOPBACK_NAMES: frozenset[str] = frozenset({"localhost", "127.0.0.1", "::1"})
#: Bind addresses that mean "every interface".
WILDCARD_BINDS: frozenset[str] = frozenset({"", "0.0.0.0", "::"})


def host_name(header: str) -> str:
    """The name of a ``Host`` header value, without its port, lower-cased
    (``[::1]:8765`` → ``::1``, ``Example.org:80`` → ``example.org``)."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    if value.count(":") == 1:
        return value.partition(":")[0]
    return value


@dataclass(frozen=True)
class HostPolicy:
    """The names a server answers for; ``names`` ``None``: any."""

    names: frozenset[str] | None

    @classmethod
    def for_bind(cls, bind: str, allowed: Iterable[str] = ()) -> HostPolicy:
        """The policy of a server bound to ``bind`` with ``--allowed-host`` ``allowed``."""
        extra = {host_name(a) for a in allowed if a.strip()}
        if "*" in extra:
            return cls(None)
        bound = host_name(bind) if bind not in WILDCARD_BINDS else ""
        if not bound and not extra:
            return cls(None)
        return cls(frozenset(LOOPBACK_NAMES | extra | ({bound} if bound else set())))

    def allows_host(self, header: str | None) -> bool:
        """Whether a request with this ``Host`` header is for this server (a request
        without one, which no browser sends, is)."""
        if self.names is None or header is None:
            return True
        return host_name(header) in self.names

    def allows_origin(self, origin: str | None) -> bool:
        """Whether a request with this ``Origin`` header comes from a page of this
        server (no ``Origin``: not a cross-site browser request)."""
        if self.names is None or origin is None:
            return True
        try:
            name = urlsplit(origin.strip()).hostname
        except ValueError:
            return False
        return name is not None and name in self.names
