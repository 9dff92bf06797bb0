"""Clients that never finish a request cannot starve the ones that do: a bounded
loopback slow-header attack (300 connections sending half a header block, reconnecting
when dropped) while an authorised client makes 200 requests, none refused or slower
than 1 s; a connection that trickles its header is closed at the header timeout; a
client over its connection limit loses its longest-waiting connections first; the
same rules with either HTTP protocol the server can run (httptools, h11), pipelined
requests included."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time

import pytest

from serve_helpers import TOKEN, Server, httpx, turn, write_tokens

HALF_A_HEADER = (
    b"POST /v1/namespaces/victim/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nX-Slow: "
)


class SlowHeaderFlood:
    """``n`` loopback connections that each send half a request head and then one
    byte every half second; connections the server dropped are reopened then, as
    slowloris does, until stopped (at most ``max_opens`` connections opened in all)."""

    def __init__(self, port: int, n: int, max_opens: int = 3000) -> None:
        self.port, self.n, self.max_opens = port, n, max_opens
        self.opened = self.dropped = 0
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self, sel: selectors.BaseSelector) -> None:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.sendall(HALF_A_HEADER)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        self.opened += 1

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        try:
            for _ in range(self.n):
                self._open(sel)
            self.ready.set()
            last_trickle, lost = time.monotonic(), 0
            while not self.stop.is_set():
                for key, _ in sel.select(timeout=0.05):
                    s = key.fileobj
                    try:
                        data = s.recv(4096)  # type: ignore[union-attr]
                    except OSError:
                        data = b""
                    if not data:  # dropped by the server: back at the next round
                        sel.unregister(s)
                        s.close()  # type: ignore[union-attr]
                        self.dropped += 1
                        lost += 1
                if time.monotonic() - last_trickle > 0.5:
                    last_trickle = time.monotonic()
                    for key in list(sel.get_map().values()):
                        with contextlib.suppress(OSError):
                            key.fileobj.send(b"x")  # type: ignore[union-attr]
                    while lost and self.opened < self.max_opens:
                        self._open(sel)
                        lost -= 1
        finally:
            self.ready.set()
            for key in list(sel.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]
            sel.close()

    def __enter__(self) -> SlowHeaderFlood:
        self.thread.start()
        assert self.ready.wait(60)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slow-clients")
    srv = Server(tmp / "mem.db", write_tokens(tmp / "tokens.txt"))
    yield srv
    srv.stop()


def test_slow_header_flood_leaves_authorised_clients_served(server):
    auth = {"authorization": f"Bearer {TOKEN}"}
    latencies, statuses = [], []
    with (
        SlowHeaderFlood(server.port, 300) as flood,
        httpx.Client(base_url=server.url, headers=auth, timeout=10) as keep_alive,
        httpx.Client(
            base_url=server.url,
            headers=auth,
            timeout=10,
            limits=httpx.Limits(max_keepalive_connections=0),  # a new connection each time
        ) as fresh,
    ):
        for k in range(200):
            c = fresh if k % 2 else keep_alive
            started = time.perf_counter()
            if k % 10 == 0:
                r = c.post("/v1/namespaces/victim/messages", json={"messages": turn(k)})
            else:
                r = c.post("/v1/namespaces/victim/retrieve", json={"query": f"R{k}", "budget": 64})
            latencies.append(time.perf_counter() - started)
            statuses.append(r.status_code)
        flooding = flood.opened - flood.dropped
    assert flooding >= 100  # the attack was still under way at the end
    assert statuses == [200] * 200, sorted(set(statuses))
    assert max(latencies) < 1.0, f"slowest authorised request {max(latencies):.2f} s"


PROTOCOLS = ["httptools", "h11"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_trickled_header_is_closed_at_the_header_timeout(tmp_path, protocol):
    srv = Server(
        tmp_path / "mem.db", None, "--no-auth", "--header-timeout", "1",
        "--http-protocol", protocol,
    )  # fmt: skip
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(HALF_A_HEADER)
            started = time.monotonic()
            closed_after = None
            s.settimeout(0.25)
            while time.monotonic() - started < 8:
                try:
                    if s.recv(4096) == b"":
                        closed_after = time.monotonic() - started
                        break
                except TimeoutError:
                    with contextlib.suppress(OSError):
                        s.send(b"x")  # one byte now and then does not extend the limit
                except OSError:
                    closed_after = time.monotonic() - started
                    break
        assert closed_after is not None, "the server kept a trickling header open"
        assert closed_after < 6
        assert httpx.get(srv.url + "/healthz", timeout=10).status_code == 200
    finally:
        srv.stop()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_client_over_its_limit_loses_its_longest_waiting_connections(tmp_path, protocol):
    srv = Server(
        tmp_path / "mem.db", None, "--no-auth", "--max-connections-per-client", "20",
        "--http-protocol", protocol,
    )  # fmt: skip
    socks = []
    try:
        for _ in range(50):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            s.sendall(HALF_A_HEADER)
            socks.append(s)
            time.sleep(0.005)  # in order
        time.sleep(0.5)
        alive = []
        for s in socks:
            s.setblocking(False)
            try:
                alive.append(s.recv(1) != b"")
            except BlockingIOError:
                alive.append(True)  # nothing to read: still open
            except OSError:
                alive.append(False)
        assert alive == [False] * 30 + [True] * 20
        r = httpx.get(srv.url + "/v1/namespaces", timeout=10)  # a new one takes a place
        assert r.status_code == 200
    finally:
        for s in socks:
            s.close()
        srv.stop()


def _responses(sock: socket.socket, n: int, limit: float = 10.0) -> list[bytes]:
    """Read ``n`` whole HTTP responses (with Content-Length bodies) from ``sock``."""
    buf, out = b"", []
    deadline = time.monotonic() + limit
    while len(out) < n and time.monotonic() < deadline:
        head, sep, rest = buf.partition(b"\r\n\r\n")
        if sep:
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(rest) >= length:
                out.append(head.split(b"\r\n")[0])
                buf = rest[length:]
                continue
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    return out


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_pipelined_requests_are_answered_and_the_connection_kept(tmp_path, protocol):
    """Three requests sent in one write are answered in order; the connection then
    waits for its next request head (the header timeout starts again only after the
    last response), and is closed when that head does not come in time."""
    srv = Server(
        tmp_path / "mem.db", None, "--no-auth", "--header-timeout", "1",
        "--http-protocol", protocol,
    )  # fmt: skip
    try:
        request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(request * 3)
            assert _responses(s, 3) == [b"HTTP/1.1 200 OK"] * 3
            s.sendall(request)  # the same connection serves a later request too
            assert _responses(s, 1) == [b"HTTP/1.1 200 OK"]
            started = time.monotonic()
            s.settimeout(8)
            assert s.recv(1) == b""  # no next head: closed at the header timeout
            assert time.monotonic() - started < 6
    finally:
        srv.stop()


def test_an_unknown_protocol_is_refused():
    from osumem.errors import ConfigError
    from osumem.serve.connections import ConnectionGuard, guarded_protocol
    from osumem.serve.run import HttpSettings

    with pytest.raises(ConfigError, match="--http-protocol"):
        HttpSettings(protocol="h3")
    with pytest.raises(ValueError, match="HTTP protocol"):
        guarded_protocol(ConnectionGuard(), "h3")
