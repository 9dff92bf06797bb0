"""Looking inside a served memory over HTTP and from the CLI with --server: steps, the
viewer data, export and import, explained retrievals, the offline /docs page and the
/ui page, each behind the same token as the rest of the API."""

from __future__ import annotations

import json
import subprocess

import pytest

from osumem.memory import Memory
from osumem.memory.export import export_lines
from serve_helpers import OSUMEM, TEAM_TOKEN, TOKEN, Server, httpx, serve_env, turn, write_tokens


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-inspect")
    srv = Server(tmp / "mem.db", write_tokens(tmp / "tokens.txt"))
    srv.store = tmp / "mem.db"  # type: ignore[attr-defined]
    srv.tmp = tmp  # type: ignore[attr-defined]
    with client(srv) as c:
        for k in range(8):
            assert c.post("/v1/namespaces/team-a/messages", json={"messages": turn(k)}).is_success
        assert c.post("/v1/namespaces/private/messages", json={"messages": turn(9)}).is_success
    yield srv
    srv.stop()


def client(server, token=TOKEN):
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=60)


def cli(server, *args, token=TOKEN):
    env = serve_env() | {"OSUMEM_TOKEN": token}
    return subprocess.run(
        [*OSUMEM, *args, "--server", server.url], env=env, capture_output=True, text=True
    )


def test_steps_route_pages_and_names_units(server):
    with client(server) as c:
        page = c.get("/v1/namespaces/team-a/steps", params={"start": 3, "limit": 4}).json()
        assert [s["position"] for s in page["steps"]] == [3, 4, 5, 6]
        assert page["next"] == 7 and page["steps_in_namespace"] == 16
        hits = c.get("/v1/namespaces/team-a/steps", params={"grep": "voucher"}).json()
        assert hits["total"] == 4 and all("voucher" in s["text"] for s in hits["steps"])
        assert any(s["osus"] for s in page["steps"])
        missing = c.get("/v1/namespaces/nope/steps")
        assert missing.status_code == 404
        assert missing.json()["error"]["type"] == "UnknownNamespaceError"
        assert c.get("/v1/namespaces/team-a/steps", params={"grep": "("}).status_code == 422
        info = c.get("/v1/namespaces", params={"details": "true"}).json()["details"]
    assert {"namespace": "team-a", "steps": 16, "held_messages": 0} in info
    with Memory.open(server.store, read_only=True) as mem:
        assert page["steps"][0]["text"] == mem.view("team-a").texts[3]
    with client(server, TEAM_TOKEN) as c:
        assert c.get("/v1/namespaces/private/steps").status_code == 403
        names = [i["namespace"] for i in c.get("/v1/namespaces?details=true").json()["details"]]
        assert names == ["team-a"]
    with client(server, None) as c:
        assert c.get("/v1/namespaces/team-a/steps").status_code == 401


def test_explained_retrieve_equals_the_library(server):
    body = {"query": "how was R3 paid?", "budget": 40, "explain": True}
    with client(server) as c:
        answer = c.post("/v1/namespaces/team-a/retrieve", json=body).json()
        plain = c.post("/v1/namespaces/team-a/retrieve", json={**body, "explain": False}).json()
        bad = c.post("/v1/namespaces/team-a/retrieve", json={**body, "explain": "yes"})
    assert "explanation" not in plain and bad.status_code == 422
    with Memory.open(server.store, read_only=True) as mem:
        local = mem.retrieve(body["query"], 40, namespace="team-a")
        expected = local.explain().to_dict()
    assert answer["explanation"] == expected
    assert [s["position"] for s in answer["steps"]] == local.positions


def test_export_and_import_through_the_server(server, tmp_path):
    with client(server) as c:
        r = c.get("/v1/export", params={"namespace": "team-a"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-nd")
        lines = r.text.splitlines()
        with Memory.open(server.store, read_only=True) as mem:
            assert lines == list(export_lines(mem, ["team-a"]))
        again = c.post("/v1/import", content=r.text.encode())
        assert again.json() == {"namespaces": {"team-a": "unchanged"}, "steps_written": 0}
        renamed = r.text.replace('"team-a"', '"team-b"')
        assert c.post("/v1/import", content=renamed.encode()).json()["namespaces"] == {
            "team-b": "imported"
        }
        a = c.post("/v1/namespaces/team-a/retrieve", json={"query": "R5", "budget": 30}).json()
        b = c.post("/v1/namespaces/team-b/retrieve", json={"query": "R5", "budget": 30}).json()
        assert [s["position"] for s in a["steps"]] == [s["position"] for s in b["steps"]]
        cut = c.post("/v1/import", content=r.text[: len(r.text) // 2].encode())
        assert cut.status_code == 422 and "line" in cut.json()["error"]["message"]
        other = renamed.replace("looked up", "x").replace("R5", "R55")
        conflict = c.post("/v1/import", content=other.encode())
        assert conflict.status_code == 409 and "team-b" in conflict.json()["error"]["message"]
    with client(server, TEAM_TOKEN) as c:
        private = c.get("/v1/export", params={"namespace": "private"})
        assert private.status_code == 403
        mine = c.get("/v1/export").text
        assert '"private"' not in mine and '"team-a"' in mine
        assert (
            c.post("/v1/import", content=renamed.replace("team-b", "secret").encode()).status_code
            == 403
        )


def test_docs_page_needs_no_network(server):
    with client(server, None) as c:
        page = c.get("/docs")
        assert page.status_code == 200
        assert "/docs/assets/swagger-ui-bundle.js" in page.text
        assert "cdn" not in page.text.lower() and "https://" not in page.text
        for name in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"):
            asset = c.get(f"/docs/assets/{name}")
            assert asset.status_code == 200 and len(asset.content) > 500
        assert c.get("/docs/assets/secret.txt").status_code in (401, 404)


def test_ui_page_is_public_and_holds_no_data(server):
    with client(server, None) as c:
        page = c.get("/ui")
        assert page.status_code == 200
        csp = page.headers["content-security-policy"]
        assert "connect-src 'self'" in csp and "script-src 'self'" in csp
        assert "team-a" not in page.text and 'type="password"' in page.text
        assert c.get("/ui/app.js").headers["content-type"].startswith("text/javascript")
        assert c.get("/v1/namespaces/team-a/page").status_code == 401
    with client(server) as c:
        data = c.get("/v1/namespaces/team-a/page").json()
    assert data["n"] == 16 and data["units"]["key"]


def test_cli_with_server(server, tmp_path):
    listed = cli(server, "namespaces", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {"namespace": "private", "steps": 2, "held_messages": 0} in json.loads(listed.stdout)
    shown = cli(server, "show", "--namespace", "team-a", "--from", "2", "--to", "4")
    assert shown.returncode == 0 and len(shown.stdout.splitlines()) == 2
    out = tmp_path / "team.jsonl"
    exported = cli(server, "export", "--namespace", "team-a", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    with Memory.open(server.store, read_only=True) as mem:
        assert out.read_text().splitlines() == list(export_lines(mem, ["team-a"]))
    imported = cli(server, "import", str(out), "--json")
    assert json.loads(imported.stdout)["namespaces"] == {"team-a": "unchanged"}
    why = cli(server, "query", "R3", "--namespace", "team-a", "--budget", "30", "--explain")
    assert why.returncode == 0 and "# Why these steps" in why.stdout
    page = tmp_path / "page.html"
    viewed = cli(server, "view", "--namespace", "team-a", "--query", "R3", "--out", str(page))
    assert viewed.returncode == 0, viewed.stderr
    assert '"query":"R3"' in page.read_text()
    missing = cli(server, "show", "--namespace", "nope")
    assert missing.returncode == 2 and "404" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
