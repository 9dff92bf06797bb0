"""The HTTP face against a real uvicorn server on a free loopback port: auth (401,
403), validation naming the field (422), the body limit (413), and answers equal to
the in-process `Memory.retrieve` on the same store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from osumem.memory import Memory
from serve_helpers import OSUMEM, TEAM_TOKEN, TOKEN, Server, httpx, serve_env, turn, write_tokens


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-http")
    srv = Server(tmp / "mem.db", write_tokens(tmp / "tokens.txt"), "--max-body-bytes", "20000")
    srv.store = tmp / "mem.db"  # type: ignore[attr-defined]
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def inline_server(tmp_path_factory):
    """A server answering retrievals in its event loop's thread (``--inline-reads``)."""
    tmp = tmp_path_factory.mktemp("serve-http-inline")
    srv = Server(tmp / "mem.db", write_tokens(tmp / "tokens.txt"), "--inline-reads")
    srv.store = tmp / "mem.db"  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def client(server, token=TOKEN):
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=60)


def test_health_and_openapi_need_no_token(server):
    with client(server, token=None) as c:
        health = c.get("/healthz").json()
        assert health["status"] == "ok" and health["encoder"] == "hashing:d64:n1"
        assert health["model"] == health["encoder"]  # the deprecated key, for one release
        paths = c.get("/openapi.json").json()["paths"]
    assert {
        "/v1/namespaces/{namespace}/messages",
        "/v1/namespaces/{namespace}/retrieve",
        "/v1/namespaces",
        "/v1/namespaces/{namespace}",
        "/healthz",
    } <= set(paths)


def test_missing_or_wrong_token_is_401(server):
    body = {"query": "x", "budget": 10}
    with client(server, token=None) as c:
        r = c.post("/v1/namespaces/a/retrieve", json=body)
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == "Bearer"
        assert c.get("/v1/namespaces").status_code == 401
        assert c.post("/mcp", json={}).status_code == 401  # MCP sits behind the same gate
    with client(server, token="not-the-token-but-long-enough") as c:
        assert c.post("/v1/namespaces/a/retrieve", json=body).status_code == 401


def test_namespace_limited_token_is_403_elsewhere(server):
    with client(server, TEAM_TOKEN) as c:
        ok = c.post("/v1/namespaces/team-1/messages", json={"messages": turn(1)})
        assert ok.status_code == 200, ok.text
        r = c.post("/v1/namespaces/other/retrieve", json={"query": "R1", "budget": 50})
        assert r.status_code == 403
        assert "other" in r.json()["error"]["message"]
        assert c.delete("/v1/namespaces/other").status_code == 403
        assert c.post("/v1/namespaces/x/messages", json={"messages": turn(2)}).status_code == 403
    with client(server) as c:
        c.post("/v1/namespaces/private", json={})  # wrong route: 405, ignored
        assert c.post("/v1/namespaces/private/messages", json={"messages": turn(3)}).is_success
        assert {"team-1", "private"} <= set(c.get("/v1/namespaces").json()["namespaces"])
    with client(server, TEAM_TOKEN) as c:
        names = c.get("/v1/namespaces").json()["namespaces"]
    assert "team-1" in names and "private" not in names


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("retrieve", {"query": "R1", "budget": "many"}, "body.budget"),
        ("retrieve", {"budget": 64}, "body.query"),
        ("retrieve", {"query": "R1", "budget": 64, "bogus": 1}, "body.bogus"),
        ("messages", {"messages": "hello"}, "body.messages"),
        ("messages", {}, "body.messages"),
    ],
)
def test_malformed_body_is_422_naming_the_field(server, route, body, field):
    with client(server) as c:
        r = c.post(f"/v1/namespaces/a/{route}", json=body)
    assert r.status_code == 422
    assert field in r.json()["fields"]
    assert field in r.json()["error"]["message"]


def test_library_errors_are_422_with_what_and_where(server):
    bad_role = {"messages": [*turn(5)[:1], {"role": "robot", "content": "beep"}]}
    with client(server) as c:
        r = c.post("/v1/namespaces/a/messages", json=bad_role)
        assert r.status_code == 422
        assert r.json()["error"]["type"] == "LogFormatError"
        assert "messages[1]" in r.json()["error"]["message"]
        assert "robot" in r.json()["error"]["message"]
        for body, word in [
            ({"query": "R1", "budget": 0}, "budget"),
            ({"query": "R1", "budget": 10**9}, "budget"),
            ({"query": "R1", "budget": 64, "method": "no_such_method"}, "no_such_method"),
            ({"query": " ", "budget": 64}, "query"),
        ]:
            r = c.post("/v1/namespaces/a/retrieve", json=body)
            assert r.status_code == 422, (body, r.text)
            assert word in r.json()["error"]["message"]
        assert "a" not in c.get("/v1/namespaces").json()["namespaces"]  # nothing written


def test_oversized_body_is_413(server):
    big = {"messages": [{"role": "user", "content": "x" * 30_000}]}
    with client(server) as c:
        r = c.post("/v1/namespaces/a/messages", json=big)
        assert r.status_code == 413
        assert "20000" in r.json()["error"]["message"]

        def chunks():  # no Content-Length: counted while it streams in
            for _ in range(30):
                yield b" " * 1000

        r = c.post(
            "/v1/namespaces/a/messages",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 413
        assert c.get("/healthz").status_code == 200  # still serving


@pytest.mark.parametrize("which", ["server", "inline_server"])
def test_happy_path_equals_in_process_retrieve(which, request):
    server = request.getfixturevalue(which)
    with client(server) as c:
        acked = []
        for k in range(12):  # several adds: the server updates its index incrementally
            r = c.post("/v1/namespaces/happy/messages", json={"messages": turn(k)})
            assert r.status_code == 200, r.text
            acked += r.json()["step_ids"]
        assert r.json()["steps_in_namespace"] == 24
        answers = {
            (q, b, m): c.post(
                "/v1/namespaces/happy/retrieve",
                json={"query": q, "budget": b} | ({"method": m} if m else {}),
            ).json()
            for q in ("how was R7 paid?", "which flight did passenger P3 take?")
            for b in (40, 128)
            for m in (None, "flat", "osumem_disjoint")
        }
    for (q, b, m), answer in answers.items():
        with Memory.open(server.store, encoder="hashing:d64", method=m or "osumem") as mem:
            assert set(acked) <= set(mem.store.step_ids())
            local = mem.retrieve(q, b, namespace="happy")
        expected = local.to_dict()
        assert answer["rendered"] == local.render()
        assert {k: answer[k] for k in expected} == expected
        assert answer["steps"], (q, b, m)


def test_cli_server_option_prints_what_the_local_query_prints(server, tmp_path):
    log = tmp_path / "log.json"
    import json

    log.write_text(json.dumps([turn(40), turn(41)]))
    env = serve_env() | {"OSUMEM_TOKEN": TOKEN}
    osumem = OSUMEM

    def run(*args):
        out = subprocess.run([*osumem, *args], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout

    first = json.loads(
        run("ingest", str(log), "--server", server.url, "--namespace", "cli", "--json")
    )
    again = json.loads(
        run("ingest", str(log), "--server", server.url, "--namespace", "cli", "--json")
    )
    assert first["steps_added"] > 0 and again["steps_added"] == 0  # a re-run adds nothing
    query = ["query", "reservation R41 voucher", "--namespace", "cli", "--budget", "60", "--json"]
    remote = json.loads(run(*query, "--server", server.url))
    local = json.loads(run(*query, "--store", str(server.store)))
    assert remote == local and remote["steps"]
    text_remote = run(*query[:-1], "--server", server.url)
    assert text_remote == run(*query[:-1], "--store", str(server.store))
    out = subprocess.run(
        [*osumem, *query, "--server", server.url, "--store", "x.db"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "either --store" in out.stderr
    out = subprocess.run(
        [*osumem, *query, "--server", server.url],
        env=env | {"OSUMEM_TOKEN": "wrong-token-0123456789"},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "401" in out.stderr and "Traceback" not in out.stderr


def test_delete_namespace(server):
    with client(server) as c:
        c.post("/v1/namespaces/gone/messages", json={"messages": turn(60) + turn(61)})
        assert c.delete("/v1/namespaces/gone").json() == {"namespace": "gone", "deleted_steps": 4}
        assert "gone" not in c.get("/v1/namespaces").json()["namespaces"]
        r = c.post("/v1/namespaces/gone/retrieve", json={"query": "R60", "budget": 100})
        assert r.json()["steps"] == []
        assert c.delete("/v1/namespaces/gone").json()["deleted_steps"] == 0
        again = c.post("/v1/namespaces/gone/messages", json={"messages": turn(62)}).json()
        assert again["steps_in_namespace"] == 2
        r = c.post("/v1/namespaces/happy/retrieve", json={"query": "R7", "budget": 40})
        assert r.json()["steps"]  # other namespaces unaffected


def test_example_agent_loop_runs_against_the_server(server):
    example = Path(__file__).resolve().parents[2] / "examples" / "agent_loop_http.py"
    out = subprocess.run(
        [sys.executable, str(example), "--server", server.url, "--namespace", "loop"],
        env=serve_env() | {"OSUMEM_TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("# Retrieved memory") == 4
    assert "[step 0] user: I need to change reservation R1001" in out.stdout  # turn 3 sees turn 0
    with httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {TOKEN}"}) as c:
        assert "loop" in c.get("/v1/namespaces").json()["namespaces"]


def test_namespaces_with_slashes_and_unicode_round_trip(server):
    from osumem.serve.client import MemoryClient

    with MemoryClient(server.url, token=TOKEN) as mc:
        for ns in ("team-a/run 7", "épisode-ü"):
            assert mc.add_messages(turn(70), namespace=ns)["steps_in_namespace"] == 2
            got = mc.retrieve("R70", 100, namespace=ns)
            assert got.namespace == ns and got.steps
            assert ns in mc.namespaces()
            assert mc.delete_namespace(ns) == 2
    with MemoryClient(server.url, token=TEAM_TOKEN) as mc:
        mc.add_messages(turn(71), namespace="team-b/sub")  # team-* covers sub-paths
