"""The web page in a real browser: Debian's chromium, headless, driven by Playwright.

A real uvicorn server on a free port, a real database; the fake encoder (its token embeddings
are hashed words, so a query word attends to the same word in the book).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import uvicorn

from conftest import FakeEncoder, free_port, write_jsonl
from indexer import db, pipeline
from indexer.settings import IndexSettings
from service.api.main import create_app
from service.settings import ServiceSettings

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
BOOKS = [
    {"id": "hobbit", "title": "The Hobbit", "authors": ["J. R. R. Tolkien"],
     "description": "A hobbit, a wizard and thirteen dwarves go after a dragon's treasure."},
    {"id": "earthsea", "title": "A Wizard of Earthsea", "authors": ["Ursula K. Le Guin"],
     "description": "A young wizard at a school on an island looses a shadow on the world."},
    {"id": "dune", "title": "Dune", "authors": ["Frank Herbert"],
     "description": "A desert planet, its spice, and the family sent to rule it."},
    {"id": "dbi", "title": "Database Internals", "authors": ["Alex Petrov"],
     "description": "How storage engines and distributed databases work."},
]  # fmt: skip

pytestmark = pytest.mark.skipif(
    shutil.which("chromium") is None, reason="needs Debian's chromium (.ci/run installs it)"
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    # one database is enough here: the API tests run on SQLite and PostgreSQL
    url = f"sqlite:///{tmp_path / 'attend.db'}"
    engine = db.create_db_engine(url)
    db.upgrade(engine)
    pipeline.run(
        IndexSettings(database_url=url),
        engine=engine,
        encoder=FakeEncoder(),
        path=write_jsonl(tmp_path / "books.jsonl", BOOKS),
    )
    engine.dispose()
    app = create_app(ServiceSettings(database_url=url, device="cpu"), encoder=FakeEncoder())
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started, "the server did not start"
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)


def test_search_explain_and_recommend_in_a_browser(server: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(server + "/")
            page.fill("#q", "wizard school")
            page.press("#q", "Enter")
            hits = page.locator("#results .hit")
            expect(hits.first).to_be_visible(timeout=15_000)
            assert hits.count() == len(BOOKS)
            assert hits.first.get_attribute("data-id") == "earthsea"  # "wizard" and "school"
            # a weight bar per result, drawn in proportion to the top weight
            first_seg = hits.first.locator(".bar .seg").first
            assert first_seg.evaluate("e => e.getBoundingClientRect().width") > 0

            hits.first.click()
            marks = page.locator("#explanation mark")
            expect(marks.first).to_be_visible(timeout=15_000)
            assert {"wizard", "school"} <= set(marks.all_inner_texts())
            expect(page.locator("#similar li").first).to_be_visible()

            hits.first.locator(".like").click()
            recs = page.locator("#recommendations li")
            expect(recs.first).to_be_visible(timeout=15_000)
            assert "earthsea" not in [r.get_attribute("data-id") for r in recs.all()]
            assert "from A Wizard of Earthsea" in recs.first.inner_text()
        finally:
            browser.close()


def test_api_docs_render_with_the_network_blocked(server: str) -> None:
    """/docs in a browser that can reach nothing but the service: Swagger UI comes from the
    app (fastapi-offline's packaged assets) and lists the API's operations."""
    from playwright.sync_api import Route, expect, sync_playwright

    local = urlparse(server).netloc
    blocked: list[str] = []

    def only_the_service(route: Route) -> None:
        if urlparse(route.request.url).netloc == local:
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.route("**/*", only_the_service)
            page.goto(server + "/docs")
            operations = page.locator(".opblock .opblock-summary-path")
            expect(operations.first).to_be_visible(timeout=15_000)
            paths = {p.get_attribute("data-path") for p in operations.all()}
            assert {"/search", "/books/{book_id}", "/recommend"} <= paths
            assert blocked == []  # nothing was even asked of another host
        finally:
            browser.close()
