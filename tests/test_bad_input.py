"""Bad input never gets a 500: each kind the API can be sent answers a 4xx JSON
`{"detail": "a sentence"}` (SQLite and PostgreSQL, the demo catalog, the fake encoder)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from conftest import FakeEncoder
from service.api.main import create_app
from service.api.search_schemas import MAX_K, MAX_OFFSET, MAX_QUERY_CHARS
from service.config.settings import ServiceSettings

MAX_BODY = 4096


@pytest.fixture(scope="module")
def client(demo_database_url: str) -> Iterator[TestClient]:
    settings = ServiceSettings(
        database_url=demo_database_url, device="cpu", max_body_bytes=MAX_BODY
    )
    with TestClient(create_app(settings, encoder=FakeEncoder())) as c:
        yield c


def _detail(r: Any, status: int) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert list(body) == ["detail"] and isinstance(body["detail"], str), body
    detail: str = body["detail"]
    return detail


@pytest.mark.parametrize(
    ("url", "status", "message"),
    [
        ("/search?q=", 422, "q: the query is empty"),
        ("/search?q=%20%09%20", 422, "q: the query is empty"),
        (f"/search?q={'x' * (MAX_QUERY_CHARS + 1)}", 422, "at most 512 characters"),
        ("/search?q=a%00b", 422, "control characters"),
        # 30 × U+FDFA, 540 characters once NFKC writes each out as 18
        ("/search?q=" + "%EF%B7%BA" * 30, 422, "540 characters once normalised"),
        ("/books/x/explain?q=" + "%EF%B7%BA" * 512, 422, "9216 characters once normalised"),
        ("/search?q=a%1Bb", 422, "control characters"),
        ("/search?q=x&k=0", 422, "k: Input should be greater than or equal to 1"),
        (f"/search?q=x&k={MAX_K + 1}", 422, "k: Input should be less than or equal to 100"),
        ("/search?q=x&k=99999999999999999999999", 422, "k: Input should be less than"),
        ("/search?q=x&offset=-1", 422, "offset: Input should be greater than or equal to 0"),
        (f"/search?q=x&offset={MAX_OFFSET + 1}", 422, "offset: Input should be less than"),
        ("/search?q=x&year_min=nineteen", 422, "year_min: Input should be a valid integer"),
        ("/search?q=%FF%FE", 400, "query string is not valid UTF-8"),
        ("/search?q=%ED%A0%80", 400, "query string is not valid UTF-8"),  # a lone surrogate
        ("/books/%C3%28", 400, "path is not valid UTF-8"),
        ("/books/no-such-book", 404, "no book with id 'no-such-book'"),
        ("/books/a%00b", 404, "no book with id 'a\\x00b'"),
        (f"/books/{'x' * 300}", 404, "no book with id 'xxxx"),
        ("/no-such-endpoint", 404, "Not Found"),
    ],
)
def test_bad_urls(client: TestClient, url: str, status: int, message: str) -> None:
    assert message in _detail(client.get(url), status)


@pytest.mark.parametrize(
    ("content", "headers", "status", "message"),
    [
        (b"{not json", {"content-type": "application/json"}, 422, "body is not valid JSON"),
        (b"", {"content-type": "application/json"}, 422, "body: Field required"),
        (b"[1, 2]", {"content-type": "application/json"}, 422, "body: Input should be a valid"),
        (b'{"queries": "x"}', {"content-type": "application/json"}, 422, "queries: Input should"),
        (b'{"queries": ["x"], "k": NaN}', {"content-type": "application/json"}, 422, "k:"),
        (b'{"queries": ["\xff"]}', {"content-type": "application/json"}, 400, "parsing the body"),
        (b'{"queries": ["x"]}', {"content-type": "text/plain"}, 415, "not text/plain"),
        (b"queries=x", {"content-type": "application/x-www-form-urlencoded"}, 415, "JSON"),
        (b'{"queries": ["x"]}', {}, 415, "Content-Type: application/json"),
        (b"[" * 100_000, {"content-type": "application/json"}, 413, "larger than the limit"),
        (b"x", {"content-type": "application/json", "content-length": "ten"}, 400, "not a number"),
    ],
)
def test_bad_bodies(
    client: TestClient, content: bytes, headers: dict[str, str], status: int, message: str
) -> None:
    assert message in _detail(client.post("/search", content=content, headers=headers), status)


def test_a_chunked_body_over_the_limit_is_413(client: TestClient) -> None:
    chunks = (b'{"queries": ["' + b"x" * 1000 for _ in range(10))  # no Content-Length
    r = client.post("/search", content=chunks, headers={"content-type": "application/json"})
    assert "4,096 bytes" in _detail(r, 413)


def test_a_large_body_is_refused_without_being_read(demo_database_url: str) -> None:
    """Straight through ASGI: the app stops pulling chunks of a streamed body at the limit."""
    app = create_app(
        ServiceSettings(database_url=demo_database_url, max_body_bytes=MAX_BODY),
        encoder=FakeEncoder(),
    )
    pulled, sent = 0, []

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": b"x" * 1024, "more_body": pulled < 1000}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/search",
        "raw_path": b"/search",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"host", b"testserver")],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
    }
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 413
    assert pulled == MAX_BODY // 1024 + 1  # 1,000 chunks were on offer


def test_a_filter_matching_nothing_is_an_empty_200(client: TestClient) -> None:
    for params in ({"author": "nobody at all"}, {"language": "xx"}, {"year_min": 4000}):
        r = client.get("/search", params={"q": "books", **params})
        assert r.status_code == 200
        assert r.json()["matched"] == 0 and r.json()["results"] == []


def test_a_wrong_method_is_405_naming_every_allowed_one(client: TestClient) -> None:
    r = client.delete("/search")
    assert _detail(r, 405) == "Method Not Allowed"
    assert r.headers["allow"] == "GET, POST"


def test_admin_paths_have_their_own_larger_limit(client: TestClient) -> None:
    r = client.post("/admin/no-such-endpoint", content=b"x" * (MAX_BODY + 1))
    assert r.status_code == 404  # not 413: ATTEND_MAX_UPLOAD_BYTES applies under /admin/


def test_health_routes_answer_head(client: TestClient) -> None:
    """What many probes send (a load balancer's, `curl -I`): 200, as GET."""
    for path in ("/healthz", "/readyz"):
        r = client.head(path)
        assert r.status_code == 200, (path, r.status_code)


def test_a_slash_too_many_redirects_nowhere(client: TestClient) -> None:
    """`/search/` answered 307 to `http://<the client's Host>/search`: an open redirect."""
    r = client.get("/search/?q=x", headers={"host": "evil.example"}, follow_redirects=False)
    assert "Not Found" in _detail(r, 404)
    assert "location" not in r.headers


def test_the_query_bound_holds_once_normalised(client: TestClient) -> None:
    """512 characters after NFKC pass, 513 do not, however few were sent (U+FDFA: 18)."""
    at_bound = "\ufdfa" * 28 + "x" * (MAX_QUERY_CHARS - 28 * 18)
    r = client.get("/search", params={"q": at_bound, "k": 1})
    assert r.status_code == 200, r.text
    over = client.get("/search", params={"q": at_bound + "x", "k": 1})
    assert "513 characters once normalised" in _detail(over, 422)
