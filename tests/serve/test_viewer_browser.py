"""The viewer page in a real headless Chromium (Debian's, driven by Playwright) on a
10,000-step store: the timeline renders, clicking a unit's band highlights exactly its
members, a query highlights the positions `Memory.retrieve` returns; the same through
`/ui` of a running server behind its token; `/docs` renders with no network. Each
test leaves a screenshot in tests/artifacts/ (or $OSUMEM_TEST_ARTIFACTS)."""

from __future__ import annotations

import shutil

import pytest

from browser_helpers import ARTIFACTS, build_store, chromium, need_browser
from osumem.memory import Memory
from osumem.memory.contents import page_data
from osumem.serve.ui import standalone_page

pytestmark = pytest.mark.slow

N_STEPS = 10_000
NAMESPACE = "agent"
QUERY = "R007 baggage refund for P003"
BUDGET = 256


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    need_browser()
    return build_store(tmp_path_factory.mktemp("viewer") / "agent.db", N_STEPS, NAMESPACE)


@pytest.fixture(scope="module")
def truth(store):
    """What the library says: the answer to QUERY and the members of a few units."""
    with Memory.open(store, read_only=True) as mem:
        positions = mem.retrieve(QUERY, BUDGET, namespace=NAMESPACE).positions
        pool = mem.retriever(NAMESPACE).osu_pool()
        names = pool.view_names()
        # a unit of each view, from the middle of the trajectory
        units = {}
        for j in range(pool.n_osus):
            view = str(names[j])
            if view not in units and pool.spans[j, 0] > N_STEPS // 2:
                units[view] = (j, pool.members_of(j).tolist())
    return {"positions": positions, "units": units}


def _watch(page):
    """Console errors and every request the page makes."""
    seen = {"errors": [], "requests": []}
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.on("console", lambda m: m.type == "error" and seen["errors"].append(m.text))
    page.on("request", lambda r: seen["requests"].append(r.url))
    return seen


def _timeline_drawn(page) -> int:
    """How many pixels of the timeline canvas are painted."""
    return page.evaluate(
        """() => { const c = document.getElementById('timeline-canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 3; i < d.length; i += 4) { if (d[i]) n++; } return n; }"""
    )


def _click_unit(page, unit: int) -> None:
    """Click the middle of a unit's band on the canvas (a real mouse click)."""
    at = page.evaluate(f"window.osumemViewer.bandCenter({unit})")
    assert at["unit_at_point"] == unit
    page.mouse.click(at["x"], at["y"])


def _check_units(page, truth) -> None:
    for view, (unit, members) in truth["units"].items():
        _click_unit(page, unit)
        assert page.get_attribute("body", "data-selected-unit") == str(unit), view
        assert page.evaluate("window.osumemViewer.highlighted()") == members
        listed = page.eval_on_selector_all("#members li", "e => e.map(x => +x.dataset.position)")
        assert listed == members[:500]
        rows = page.eval_on_selector_all(
            "#list .row.member", "e => e.map(x => +x.dataset.position)"
        )
        assert rows and set(rows) <= set(members)  # the members in sight are marked


def test_saved_page_on_10k_steps(store, truth, tmp_path):
    with Memory.open(store, read_only=True) as mem:
        html = standalone_page(page_data(mem, NAMESPACE, query=QUERY, budget=BUDGET))
    path = tmp_path / "view.html"
    path.write_text(html, encoding="utf-8")
    assert path.stat().st_size < 5_000_000
    with chromium() as ctx:
        page = ctx.new_page()
        seen = _watch(page)
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        assert page.evaluate("window.osumemViewer.state.n") == N_STEPS
        assert _timeline_drawn(page) > 10_000
        assert page.locator("#list .row").count() > 10  # only the rows in sight exist
        assert page.locator("#list .row").count() < 200
        assert page.evaluate("window.osumemViewer.retrieved()") == truth["positions"]
        shown = page.get_attribute("#result", "data-positions")
        assert [int(p) for p in shown.split(",")] == truth["positions"]
        table = page.eval_on_selector_all(
            "#retrieved tr[data-position]", "e => e.map(x => +x.dataset.position)"
        )
        assert table == truth["positions"]
        _check_units(page, truth)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "viewer-10k.png"))
        assert seen["errors"] == []
        assert seen["requests"] == [path.as_uri()]  # nothing but the page itself


def test_ui_behind_the_token(store, truth, tmp_path):
    from serve_helpers import TOKEN, Server, write_tokens

    copy = tmp_path / "served.db"
    shutil.copy(store, copy)
    srv = Server(copy, write_tokens(tmp_path / "tokens.txt"))
    try:
        with chromium() as ctx:
            page = ctx.new_page()
            seen = _watch(page)
            page.goto(srv.url + "/ui")
            page.fill("#token", "not-the-token-but-long-enough")
            page.click("#login button")
            # a selector wait, not wait_for_function: the page's CSP (script-src 'self')
            # forbids the eval a string predicate needs
            page.wait_for_selector("#message:has-text('Unauthorized')", timeout=30_000)
            page.fill("#token", TOKEN)
            page.click("#login button")
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)
            assert page.evaluate("window.osumemViewer.state.n") == N_STEPS
            assert _timeline_drawn(page) > 10_000
            page.fill("#query", QUERY)
            page.fill("#budget", str(BUDGET))
            page.click("#controls button")
            page.wait_for_selector("#result[data-positions]", timeout=60_000)
            assert page.evaluate("window.osumemViewer.retrieved()") == truth["positions"]
            _check_units(page, truth)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "viewer-ui-10k.png"))
            # the token is in no URL, storage or cookie, and in no page text
            assert all(TOKEN not in url for url in seen["requests"])
            assert TOKEN not in page.url and ctx.cookies() == []
            stored = page.evaluate("JSON.stringify([localStorage, sessionStorage])")
            assert TOKEN not in stored and TOKEN not in page.content()
            assert all(url.startswith(srv.url) for url in seen["requests"])
            assert [e for e in seen["errors"] if "401" not in e] == []
    finally:
        srv.stop()
    assert TOKEN not in srv.proc.stderr.read()  # nor in the server's log


def test_docs_render_without_network(tmp_path):
    need_browser()
    from serve_helpers import Server

    srv = Server(tmp_path / "docs.db", None, "--no-auth")
    try:
        with chromium() as ctx:
            page = ctx.new_page()
            seen = _watch(page)
            page.goto(srv.url + "/docs")
            page.wait_for_selector(".opblock", timeout=30_000)
            assert page.locator(".opblock").count() >= 8
            assert "/v1/export" in page.content()
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "docs.png"))
            assert all(url.startswith(srv.url) for url in seen["requests"]), seen["requests"]
    finally:
        srv.stop()
