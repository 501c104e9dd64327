"""/readyz, /metrics (scraped and parsed), request logs and CORS, on the demo catalog."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine

from conftest import FakeEncoder
from indexer import db
from service.api.main import create_app
from service.commands.logs import JsonFormatter
from service.config.settings import ServiceSettings

SECRET = "Bearer s3cret-admin-token-never-logged"


@pytest.fixture(scope="module")
def client(demo_database_url: str) -> Iterator[TestClient]:
    settings = ServiceSettings(database_url=demo_database_url, device="cpu")
    with TestClient(create_app(settings, encoder=FakeEncoder())) as c:
        yield c


def _samples(client: TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def _labels(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items())


def test_metrics_count_requests_by_route_template_and_status(client: TestClient) -> None:
    before = _samples(client)
    for q in ("deep learning", "wizards", "databases"):
        assert client.get("/search", params={"q": q}).status_code == 200
    assert client.get("/books/no-such-book").status_code == 404
    assert client.get("/books/deep-learning-goodfellow").status_code == 200
    assert client.get("/search", params={"q": ""}).status_code == 422
    assert client.get("/nowhere/at/all").status_code == 404
    after = _samples(client)

    def delta(name: str, labels: frozenset[tuple[str, str]]) -> float:
        return after.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    requests = "attend_http_requests_total"
    assert delta(requests, _labels(method="GET", route="/search", status="200")) == 3
    assert delta(requests, _labels(method="GET", route="/search", status="422")) == 1
    # the template, never the id: unknown ids cannot grow the label set
    assert delta(requests, _labels(method="GET", route="/books/{book_id}", status="404")) == 1
    assert delta(requests, _labels(method="GET", route="/books/{book_id}", status="200")) == 1
    assert delta(requests, _labels(method="GET", route="<unmatched>", status="404")) == 1
    latency = "attend_http_request_duration_seconds"
    ok = _labels(method="GET", route="/search", status="200")
    assert delta(f"{latency}_count", ok) == 3 and delta(f"{latency}_sum", ok) > 0
    assert delta(f"{latency}_bucket", ok | {("le", "+Inf")}) == 3
    assert delta("attend_search_batch_size_count", frozenset()) == 3  # one batch each, alone
    assert after[("attend_catalog_books", frozenset())] == 180
    assert not any("no-such-book" in str(labels) for _, labels in after)


def test_a_method_of_no_http_is_counted_as_other(client: TestClient) -> None:
    """The method label takes HTTP's methods and `other`: a client's own method strings (here
    40 of them) cannot grow /metrics."""
    before = _samples(client)
    for i in range(40):
        client.request(f"X{i}NOTAMETHOD", "/healthz")
    client.request("PATCH", "/healthz")  # a method of HTTP: its own label, as GET has
    after = _samples(client)
    requests = "attend_http_requests_total"
    assert all("NOTAMETHOD" not in str(labels) for _, labels in after)
    other = [
        v - before.get(k, 0.0)
        for k, v in after.items()
        if k[0] == requests and ("method", "other") in k[1]
    ]
    assert sum(other) == 40
    patch = [
        v - before.get(k, 0.0)
        for k, v in after.items()
        if k[0] == requests and ("method", "PATCH") in k[1]
    ]
    assert sum(patch) == 1


def test_readyz_when_loaded_and_the_database_answers(client: TestClient) -> None:
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json() == {"status": "ready", "catalog_size": 180}


def test_readyz_is_503_when_the_database_is_unreachable(demo_database_url: str) -> None:
    settings = ServiceSettings(database_url=demo_database_url, device="cpu")
    app = create_app(settings, encoder=FakeEncoder())
    with TestClient(app) as c:
        real = app.state.engine
        app.state.engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
        try:
            r = c.get("/readyz")
            assert r.status_code == 503 and "database does not answer" in r.json()["detail"]
            assert c.get("/healthz").status_code == 200  # alive all the same
        finally:
            app.state.engine.dispose()
            app.state.engine = real


def test_readyz_is_503_on_an_empty_index(database_url: str) -> None:
    engine = db.create_db_engine(database_url)
    db.upgrade(engine)
    engine.dispose()
    app = create_app(ServiceSettings(database_url=database_url), encoder=FakeEncoder())
    with TestClient(app) as c:
        r = c.get("/readyz")
        assert r.status_code == 503 and "attend index" in r.json()["detail"]


def test_one_log_line_per_request_without_headers_or_query_text(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        client.get(
            "/search",
            params={"q": "very private words", "k": 3},
            headers={"Authorization": SECRET},
        )
        client.get("/books/x", headers={"Authorization": SECRET})
    lines = [r for r in caplog.records if r.name == "service.api.telemetry"]
    assert [(r.method, r.route, r.status) for r in lines] == [  # type: ignore[attr-defined]
        ("GET", "/search", 200),
        ("GET", "/books/{book_id}", 404),
    ]
    assert all(r.latency_ms > 0 for r in lines)  # type: ignore[attr-defined]
    formatter = JsonFormatter()
    server_side = [r for r in caplog.records if not r.name.startswith("httpx")]  # not the client's
    for record in server_side:
        line = json.loads(formatter.format(record))
        assert "s3cret" not in json.dumps(line) and "s3cret" not in record.getMessage()
        if record.levelno >= logging.INFO:
            assert "private" not in json.dumps(line)
    request = json.loads(formatter.format(lines[0]))
    assert request["path"] == "/search" and request["status"] == 200
    assert request["message"].startswith("GET /search 200 ")


def test_a_path_cannot_write_a_log_line_of_its_own(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A `%0A` in the URL is decoded into the path: logged as it came, it began a line that
    reads like one of the service's own."""
    with caplog.at_level(logging.INFO):
        client.get("/books/x%0A2026-12-07 INFO service.api.admin re-index done%0D")
    (line,) = [r.getMessage() for r in caplog.records if r.name == "service.api.telemetry"]
    assert "\n" not in line and "\r" not in line
    assert line.startswith("GET /books/x\\x0a2026-12-07 INFO service.api.admin re-index done\\x0d ")


def test_cors_is_off_by_default(client: TestClient) -> None:
    r = client.get("/healthz", headers={"Origin": "https://elsewhere.example"})
    assert "access-control-allow-origin" not in r.headers


def test_cors_allows_the_configured_origins(demo_database_url: str) -> None:
    settings = ServiceSettings(
        database_url=demo_database_url, device="cpu", cors_origins=["https://books.example"]
    )
    with TestClient(create_app(settings, encoder=FakeEncoder())) as c:
        preflight = c.options(
            "/search",
            headers={
                "Origin": "https://books.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://books.example"
        r = c.get("/healthz", headers={"Origin": "https://books.example"})
        assert r.headers["access-control-allow-origin"] == "https://books.example"
        other = c.get("/healthz", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers


def test_a_slow_scrape_does_not_hold_the_other_requests(demo_database_url: str) -> None:
    """/metrics reads every gauge and renders the text off the event loop: a scrape whose
    gauge takes 0.6 s leaves /healthz answered meanwhile."""
    import threading
    import time

    settings = ServiceSettings(database_url=demo_database_url, device="cpu")
    app = create_app(settings, encoder=FakeEncoder())

    def slow() -> float:
        time.sleep(0.6)
        return 1.0

    app.state.metrics.gauge("attend_test_slow", "A gauge read slowly.", slow)
    with TestClient(app) as c:
        scrape = threading.Thread(target=lambda: c.get("/metrics"))
        scrape.start()
        time.sleep(0.15)  # the scrape is reading the slow gauge
        t0 = time.perf_counter()
        assert c.get("/healthz").status_code == 200
        took = time.perf_counter() - t0
        scrape.join()
    assert took < 0.3, took
