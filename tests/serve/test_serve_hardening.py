"""The HTTP face under hostile or sloppy requests, against a real `osumem serve
--no-auth` on a free loopback port: every error is the documented JSON envelope with
a status the OpenAPI schema lists; foreign ``Host`` headers (DNS rebinding) get 421;
a namespace is exactly what the route received; oracle methods are refused; untyped
library errors never escape as a plain-text 500."""

from __future__ import annotations

import json
import socket

import pytest

from serve_helpers import Server, httpx, turn

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-hardening")
    srv = Server(tmp / "mem.db", None, "--no-auth", "--allowed-host", "memory.internal")
    yield srv
    srv.stop()


def client(server, **headers):
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def envelope(r, status, error_type=None):
    """``r`` is the documented error: ``status``, JSON ``{"error": {"type", "message"}}``."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers
    body = r.json()
    assert set(body["error"]) >= {"type", "message"}, body
    assert body["error"]["message"] and "\n" not in body["error"]["message"]
    if error_type is not None:
        assert body["error"]["type"] == error_type, body
    return body["error"]


def raw(server, request: bytes) -> tuple[int, bytes]:
    """Send ``request`` bytes as they are; the status and body of the answer."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


# --- untyped library errors (found by fuzzing) ------------------------------------------


@pytest.mark.parametrize(
    ("message", "where"),
    [
        ({"role": ["user"], "content": "x"}, "messages[0].role"),
        ({"role": "assistant", "content": [{"text": {"n": 1}}]}, "messages[0].content[0].text"),
    ],
)
def test_malformed_message_shapes_are_422_not_a_plain_500(server, message, where):
    with client(server) as c:
        r = c.post("/v1/namespaces/fuzz/messages", json={"messages": [message]})
        assert where in envelope(r, 422, "LogFormatError")["message"]
        assert c.get("/healthz").status_code == 200  # the same connection still serves


# --- DNS rebinding: the Host header -----------------------------------------------------


def test_foreign_host_header_is_421_on_every_route(server):
    with client(server) as c:
        assert c.post("/v1/namespaces/victim/messages", json={"messages": turn(1)}).is_success
    evil = {"host": "evil.example"}
    with client(server, **evil) as c:
        envelope(c.delete("/v1/namespaces/victim"), 421, "MisdirectedRequest")
        envelope(c.get("/v1/namespaces"), 421)
        envelope(c.post("/v1/namespaces/victim/retrieve", json={"query": "R1", "budget": 9}), 421)
        assert c.post("/mcp", json={}).status_code == 421
    for host in ("evil.example:8765", "127.0.0.1.evil.example", "localhost.", "0.0.0.0"):
        with client(server, host=host) as c:
            assert c.get("/v1/namespaces").status_code == 421, host
    with client(server) as c:
        assert "victim" in c.get("/v1/namespaces").json()["namespaces"]  # nothing deleted
    for host in ("127.0.0.1", f"127.0.0.1:{server.port}", f"localhost:{server.port}",
                 "LOCALHOST", f"[::1]:{server.port}", "memory.internal:443"):  # fmt: skip
        with client(server, host=host) as c:
            assert c.get("/v1/namespaces").status_code == 200, host


# --- bodies that do not parse -------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "content_type", "words"),
    [
        (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', "application/json", "UTF-8"),
        (b"[" * 50_000 + b"]" * 50_000, "application/json", "nested"),
        (bytes(range(256)) * 4, "application/octet-stream", "body"),
        (b"{not json", "application/json", "invalid JSON"),
        (b"", "application/json", "body"),
    ],
)
def test_unparseable_bodies_are_422_envelopes(server, body, content_type, words):
    with client(server) as c:
        r = c.post(
            "/v1/namespaces/p/messages", content=body, headers={"content-type": content_type}
        )
        error = envelope(r, 422, "InvalidInputError")
    assert words in error["message"]
    assert "body.0" not in error["message"] and "JSON decode error" not in error["message"]


def test_unknown_route_and_method_are_envelopes(server):
    with client(server) as c:
        envelope(c.get("/nowhere"), 404, "NotFound")
        r = c.put("/v1/namespaces/a/messages", json={})
        envelope(r, 405, "MethodNotAllowed")
        assert "POST" in r.headers["allow"]


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("retrieve", {"query": "", "budget": 5}, "body.query"),
        ("retrieve", {"query": "   ", "budget": 5}, "body.query"),
        ("retrieve", {"query": "x", "budget": 0}, "body.budget"),
        ("messages", {"messages": turn(1), "source": ""}, "body.source"),
        ("messages", {"messages": turn(1), "hold_open_calls": 0}, "body.hold_open_calls"),
        ("messages", {"messages": turn(1), "prefix_namespace": "yes"}, "body.prefix_namespace"),
    ],
)
def test_what_the_schema_refuses_is_refused_and_the_reverse(server, route, body, field):
    with client(server) as c:
        error = envelope(c.post(f"/v1/namespaces/s/{route}", json=body), 422)
        schema = c.get("/openapi.json").json()
    assert field in error["message"]
    model = "RetrieveRequest" if route == "retrieve" else "AddRequest"
    prop = schema["components"]["schemas"][model]["properties"][field.split(".")[1]]
    constraints = {"minLength", "pattern", "minimum", "exclusiveMinimum", "type", "anyOf"}
    assert constraints & set(prop), prop  # the schema says what is refused


def test_every_error_status_is_in_the_openapi_schema(server):
    with client(server) as c:
        schema = c.get("/openapi.json").json()
    error_ref = "#/components/schemas/ErrorResponse"
    assert schema["components"]["schemas"]["ErrorResponse"]["required"] == ["error"]
    for path, operations in schema["paths"].items():
        if path.startswith("/mcp"):
            continue
        for method, op in operations.items():
            codes = set(op["responses"])
            expected = {"403", "404", "408", "409", "413", "421", "422", "500"}
            if path not in ("/healthz", "/openapi.json", "/docs"):
                expected |= {"401", "503"}
            assert expected <= codes, (method, path, codes)
            for code in expected:
                content = op["responses"][code]["content"]["application/json"]
                assert content["schema"]["$ref"] == error_ref, (method, path, code)
            assert "HTTPValidationError" not in json.dumps(op)


# --- the namespace in the path --------------------------------------------------------------


def test_a_namespace_is_exactly_what_the_route_received(server):
    with client(server) as c:
        assert c.post("/v1/namespaces/team-a-1/messages", json={"messages": turn(2)}).is_success
        assert c.post("/v1/namespaces/0/messages", json={"messages": turn(3)}).is_success
        envelope(c.delete("/v1/namespaces/team-a-1%0A"), 422, "InvalidInputError")
        for r in (
            c.delete("/v1/namespaces/team-a-1%0A/"),  # no route takes it (no redirect)
            c.post("/v1/namespaces/team-a-1%0A/retrieve", json={"query": "R2", "budget": 50}),
        ):
            envelope(r, 404 if r.status_code == 404 else 422)
        # "0/messages" would read as the messages route of namespace "0"
        assert "messages" in envelope(c.delete("/v1/namespaces/0/messages"), 422)["message"]
        r = c.post("/v1/namespaces/x/retrieve/retrieve", json={"query": "R2", "budget": 50})
        envelope(r, 422)
        names = c.get("/v1/namespaces").json()["namespaces"]
    assert {"team-a-1", "0"} <= set(names)
    status, body = raw(
        server, b"DELETE /v1/namespaces/team-a-1%0d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    )
    assert status == 422 and b"InvalidInputError" in body


# --- methods that need ground truth ------------------------------------------------------


def test_oracle_methods_are_refused_by_a_live_server(server):
    with client(server) as c:
        c.post("/v1/namespaces/o/messages", json={"messages": turn(4)})
        r = c.post(
            "/v1/namespaces/o/retrieve", json={"query": "R4", "budget": 50, "method": "osumem_gf"}
        )
        assert "ground truth" in envelope(r, 422)["message"]
        ok = c.post(
            "/v1/namespaces/o/retrieve", json={"query": "R4", "budget": 50, "method": "flat"}
        )
        assert ok.status_code == 200 and ok.json()["steps"]
