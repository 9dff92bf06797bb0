"""`osumem namespaces`, `show`, `export`, `import` and `view` on local stores: what
they print, and one error line with exit status 2 for bad input (nothing written)."""

from __future__ import annotations

import json
from html import unescape

import pytest
from click.testing import CliRunner

from osumem.cli import main
from osumem.memory import Memory
from store_fixtures import build


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("inspect-cli") / "mem.db"
    build(path)
    return path


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], standalone_mode=False)


def run_cli(*args):
    """The command as a user runs it: errors become one line and exit status 2."""
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.output


def test_namespaces_and_show(store):
    listed = run("namespaces", "--store", store, "--json")
    assert json.loads(listed.output) == [
        {"namespace": "other", "steps": 37, "held_messages": 1},
        {"namespace": "trip", "steps": 75, "held_messages": 0},
    ]
    assert "other" in run("namespaces", "--store", store).output
    shown = run("show", "--store", store, "--namespace", "trip", "--from", "3", "--to", "6")
    lines = shown.output.splitlines()
    assert [line.split()[0] for line in lines[:3]] == ["3", "4", "5"]
    assert "entity:R1@" in shown.output  # a step's units
    data = json.loads(
        run("show", "--store", store, "--namespace", "trip", "--grep", "cancel", "--json").output
    )
    assert data["total"] == len(data["steps"]) > 0
    assert all("cancel" in s["text"].lower() for s in data["steps"])
    flat = json.loads(
        run("show", "--store", store, "--namespace", "trip", "--method", "flat", "--json").output
    )
    assert all(s["osus"] == [] for s in flat["steps"])  # flat builds no units


def test_export_import_round_trip(store, tmp_path):
    out = tmp_path / "m.jsonl"
    assert run("export", "--store", store, "--out", out).exit_code == 0
    target = tmp_path / "copy.db"
    first = json.loads(run("import", out, "--store", target, "--json").output)
    assert first == {"namespaces": {"other": "imported", "trip": "imported"}, "steps_written": 112}
    again = json.loads(run("import", out, "--store", target, "--json").output)
    assert set(again["namespaces"].values()) == {"unchanged"}
    one = run("export", "--store", store, "--namespace", "trip", "--no-embeddings")
    assert one.output.count('"kind":"step"') == 75 and '"embedding"' not in one.output


def test_errors_are_one_line_and_write_nothing(store, tmp_path):
    code, err = run_cli("show", "--store", store, "--namespace", "nope")
    assert code == 2 and len(err.splitlines()) == 1
    assert "namespace 'nope' is not in memory store" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "header"}\n')
    target = tmp_path / "new.db"
    code, err = run_cli("import", bad, "--store", target)
    assert code == 2 and len(err.splitlines()) == 1
    assert f"{bad} line 1: not an osumem-export file" in err
    assert not target.exists()  # a failed first import leaves no store behind
    code, err = run_cli("namespaces", "--store", tmp_path / "missing.db")
    assert code == 2 and "not found" in err
    code, err = run_cli("show", "--namespace", "trip")  # neither --store nor --server
    assert code == 2 and "--store PATH or --server URL" in err


def test_view_writes_one_self_contained_page(store, tmp_path):
    page = tmp_path / "page.html"
    made = run("view", "--store", store, "--namespace", "trip", "--query", "cancel R2",
               "--budget", "60", "--out", page)  # fmt: skip
    assert made.exit_code == 0, made.output
    html = unescape(page.read_text())
    assert "http://" not in html and "https://" not in html  # nothing to fetch
    assert "connect-src 'none'" in html and "<script src" not in html
    start = html.index('<script id="osumem-data" type="application/json">') + 49
    data = json.loads(html[start : html.index("</script>", start)])
    with Memory.open(store, read_only=True) as mem:
        expected = mem.retrieve("cancel R2", 60, namespace="trip").positions
    assert [s["position"] for s in data["query"]["steps"]] == expected
    assert data["n"] == 75 and len(data["steps"]["text"]) == 75
