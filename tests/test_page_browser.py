"""The web page in a real browser: Debian's chromium, headless, driven by Playwright.

A real uvicorn server on a free port, a real database; the fake encoder (its token embeddings
are hashed words, so a query word attends to the same word in the book).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import pytest
import uvicorn
from fastapi import FastAPI

from conftest import FakeEncoder, free_port, write_jsonl
from indexer import db, pipeline
from indexer.settings import IndexSettings
from service.api.main import create_app
from service.config.settings import ServiceSettings

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
    with _serving_books(tmp_path, BOOKS) as base:
        yield base


@contextmanager
def _serving_books(folder: Path, books: list[dict[str, object]]) -> Iterator[str]:
    """`books` indexed with the fake encoder into SQLite in `folder` and served: the base URL.
    One database is enough here: the API tests run on SQLite and PostgreSQL."""
    url = f"sqlite:///{folder / 'attend.db'}"
    engine = db.create_db_engine(url)
    db.upgrade(engine)
    pipeline.run(
        IndexSettings(database_url=url),
        engine=engine,
        encoder=FakeEncoder(),
        path=write_jsonl(folder / "books.jsonl", books),
    )
    engine.dispose()
    app = create_app(ServiceSettings(database_url=url, device="cpu"), encoder=FakeEncoder())
    with _serving(app) as base:
        yield base


@contextmanager
def _serving(app: FastAPI) -> Iterator[str]:
    """`app` on a free loopback port in a thread: its base URL."""
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started, "the server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=10)


def test_search_explain_and_recommend_in_a_browser(server: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(server + "/")
            page.type("#q", "earths")  # as typed: GET /suggest's titles in the input's list
            option = page.locator("#suggestions option").first
            expect(option).to_have_attribute("value", "A Wizard of Earthsea", timeout=15_000)
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

            # ReDoc too, whose sidebar logo came from Redocly's CDN (issue 24)
            page.goto(server + "/redoc")
            expect(page.get_by_text("API docs by Redocly")).to_be_visible(timeout=15_000)
            expect(page.get_by_text("Search Get").first).to_be_attached()  # an operation
            page.wait_for_load_state("networkidle")
            assert blocked == []
        finally:
            browser.close()


def test_the_first_page_explains_itself(server: str) -> None:
    """Issue 24: the page was blank before the first search, and its figures (π 0.20, scale 19,
    180 books in the softmax · entropy 1.97 nats) were for engineers. Now: example searches and a
    plain legend at once, the technical figures behind a toggle."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(server + "/")
            examples = page.locator("#examples .example")
            expect(examples.first).to_be_visible(timeout=15_000)
            assert examples.count() >= 3
            assert page.locator("#results .hit").count() == 0  # before any search
            legend = page.locator("#legend")
            expect(legend).to_contain_text("share of the ranking")
            expect(legend).to_contain_text("what the book is about")
            assert not any(t.is_visible() for t in page.locator(".tech").all())

            query = examples.nth(2).inner_text()
            examples.nth(2).click()
            expect(page.locator("#results .hit").first).to_be_visible(timeout=15_000)
            assert page.input_value("#q") == query
            expect(legend).to_contain_text("How much each part of the ranking counted")
            expect(legend).to_contain_text("%")
            expect(page.locator("#summary")).to_contain_text(f"of {len(BOOKS)} books")
            technical = page.locator(".tech")
            assert technical.count() > 0
            assert not any(t.is_visible() for t in technical.all())  # π, scale, entropy hidden

            page.check("#technical")
            expect(technical.first).to_be_visible()
            expect(legend).to_contain_text("π ")
            expect(page.locator("#summary")).to_contain_text("in the softmax")
            page.reload()  # the choice is remembered
            expect(page.locator("#technical")).to_be_checked()
        finally:
            browser.close()


@pytest.mark.model
def test_the_readme_screenshot_of_the_demo_catalog(tmp_path: Path) -> None:
    """The page as `make demo` shows it (the demo catalog, the real model, the service's
    defaults): an example search clicked, two results liked, the first one opened. Saved in
    tmp_path; with ATTEND_UPDATE_SCREENSHOT=1 also as the README's docs/screenshot.png."""
    from playwright.sync_api import expect, sync_playwright

    from indexer.data import DEMO_CATALOG
    from service.engine.startup import build_encoder

    url = f"sqlite:///{tmp_path / 'attend.db'}"
    engine = db.create_db_engine(url)
    db.upgrade(engine)
    settings = ServiceSettings(database_url=url, device="cpu", encoder_backend="torch")
    encoder = build_encoder(settings)
    pipeline.run(IndexSettings(database_url=url), engine=engine, encoder=encoder, path=DEMO_CATALOG)
    engine.dispose()
    shot = tmp_path / "screenshot.png"
    with _serving(create_app(settings, encoder=encoder)) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(base + "/")
            page.locator("#examples .example", has_text="a desert planet").click()
            hits = page.locator("#results .hit")
            expect(hits.first).to_be_visible(timeout=60_000)
            expect(hits.first).to_contain_text("Dune")
            for i in (0, 1):
                hits.nth(i).locator(".like").click()
            expect(page.locator("#recommendations li").first).to_be_visible(timeout=60_000)
            hits.first.click()
            expect(page.locator("#explanation mark").first).to_be_visible(timeout=60_000)
            expect(page.locator("#similar li").first).to_be_visible(timeout=60_000)
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
    if os.environ.get("ATTEND_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, Path(__file__).resolve().parents[1] / "docs" / "screenshot.png")


# a shelf of wizard books, two pages of them, in two subjects and two decades
SHELF = [
    {"id": f"w{i:02d}", "title": f"Wizard Tale {i}", "authors": [f"Author {i % 3}"],
     "year": 1990 + i, "subjects": ["Fantasy" if i % 2 else "Magic"],
     "description": f"A wizard story, number {i}, of a wizard and a school."}
    for i in range(14)
]  # fmt: skip


@pytest.fixture
def shelf(tmp_path: Path) -> Iterator[str]:
    with _serving_books(tmp_path, [*BOOKS, *SHELF]) as base:
        yield base


def test_filters_facets_order_and_pages_live_in_the_url(shelf: str) -> None:
    """Issue 48 item 6: the page shows what the API has. A facet value is a filter (a chip that
    removes it), the order and the page are in the URL, back and forward walk the searches, a
    shared URL opens the same search, liked books outlive a reload, a new search clears the
    last book's explanation, a bar is the book's share of all the attention, and a similar
    book opens as a result does."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(shelf + "/?q=wizard")  # a shared URL: the search runs
            hits = page.locator("#results .hit")
            expect(hits.first).to_be_visible(timeout=15_000)
            assert hits.count() == 10 and page.input_value("#q") == "wizard"
            # the bar: the book's weight of the whole bar, not of the top book's
            first = hits.first
            share = float(first.get_attribute("data-weight") or 0)
            seg = first.locator(".bar").evaluate(
                "b => [...b.children].reduce((w, s) => w + s.getBoundingClientRect().width, 0)"
                " / b.getBoundingClientRect().width"
            )
            assert 0 < share < 0.5 and abs(seg - share) < 0.02

            page.locator("#next").click()  # the second page
            expect(page.locator("#summary")).to_contain_text("results 11–")
            assert "offset=10" in page.url and hits.first.locator(".rank").inner_text() == "11"
            page.go_back()
            expect(page.locator("#summary")).to_contain_text("results 1–10")

            value = page.locator(".facet-value", has_text="Fantasy")
            expect(value).to_be_visible()
            value.click()
            expect(page.locator("#filters .chip")).to_contain_text("subject: Fantasy")
            assert "subject=Fantasy" in page.url
            expect(hits).to_have_count(7)  # the odd tales
            page.select_option("#sort", "-year")
            expect(hits.first).to_have_attribute("data-id", "w13")
            assert "sort=-year" in page.url

            hits.first.click()
            expect(page.locator("#detail")).to_be_visible()
            similar = page.locator("#similar li").first
            expect(similar).to_be_visible(timeout=15_000)
            title = similar.locator(".link-title").inner_text()
            similar.click()
            expect(page.locator("#detail-title")).to_have_text(title)
            hits.first.locator(".like").click()
            expect(page.locator("#recommendations li").first).to_be_visible(timeout=15_000)

            page.go_back()  # the filter, by relevance: and the explanation is gone
            expect(page.locator("#detail")).to_be_hidden()
            assert "sort=" not in page.url and page.input_value("#sort") == ""
            page.locator("#filters .chip").click()  # the chip removes its filter
            expect(hits).to_have_count(10)
            assert "subject=" not in page.url

            page.reload()  # the liked book is kept
            expect(page.locator("#liked-list")).to_contain_text("Wizard Tale 13")
            expect(page.locator("#recommendations li").first).to_be_visible(timeout=15_000)
        finally:
            browser.close()
