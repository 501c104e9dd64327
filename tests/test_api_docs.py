"""/docs and /redoc work offline: their pages load Swagger UI and ReDoc from the app itself
(fastapi-offline's packaged assets), never from a CDN; /metrics labels them by route."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from conftest import FakeEncoder
from service.api.main import create_app
from service.config.settings import ServiceSettings


@pytest.fixture(scope="module")
def client(demo_database_url: str) -> Iterator[TestClient]:
    settings = ServiceSettings(database_url=demo_database_url, device="cpu")
    with TestClient(create_app(settings, encoder=FakeEncoder())) as c:
        yield c


def _assets(html: str) -> list[str]:
    return re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_their_assets_from_the_app(client: TestClient, page: str) -> None:
    r = client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assets = _assets(r.text)
    scripts = [a for a in assets if a.endswith(".js")]
    assert scripts, r.text
    for asset in assets:
        assert not urlparse(asset).netloc, f"{page} loads {asset} from another host"
        got = client.get(asset)
        assert got.status_code == 200, asset
        assert len(got.content) > 1000, asset  # the real bundle, not a placeholder
    assert "/openapi.json" in r.text


def test_docs_and_openapi_have_their_own_route_label(client: TestClient) -> None:
    assets = _assets(client.get("/docs").text)
    assert client.get("/openapi.json").status_code == 200
    for asset in assets:
        client.get(asset)
    assert client.get("/no/such/page").status_code == 404

    text = client.get("/metrics").text
    routes = {
        s.labels["route"]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "attend_http_requests_total" and s.labels["status"] == "200"
    }
    assert {"/docs", "/openapi.json", "/static-offline-docs/{path}"} <= routes
    assert "<unmatched>" not in routes  # only the unknown path, answered 404


def test_redoc_asks_no_other_host_for_its_logo(client: TestClient) -> None:
    """ReDoc's bundle shows Redocly's logo from their CDN in every page's sidebar (issue 24);
    /redoc's Content-Security-Policy lets images come from the app alone, so the browser never
    fetches it (tests/test_page_browser.py watches that in chromium)."""
    r = client.get("/redoc")
    bundle = client.get(_assets(r.text)[-1]).text
    remote_images = re.findall(r"""src:["'](https?://[^"']+)""", bundle)
    assert remote_images, "the bundle no longer has its CDN logo: is this test still needed?"
    policy = dict(
        part.strip().split(" ", 1) for part in r.headers["content-security-policy"].split(";")
    )
    sources = policy["img-src"].split()
    assert set(sources) <= {"'self'", "data:"}, sources
    assert all(urlparse(url).netloc not in policy["img-src"] for url in remote_images)


def test_no_schema_has_the_name_of_an_engine_result(client: TestClient) -> None:
    """One name per concept (issue 31): the engine's answers are dataclasses in
    service/engine/results.py, the API's schemas that render them are named as schemas
    (`BecauseOut`, `NamedBookOut`, as the FastAPI template's `UserPublic`), never the same."""
    import dataclasses

    from service.engine import results

    engine_names = {
        name
        for name, value in vars(results).items()
        if isinstance(value, type) and dataclasses.is_dataclass(value)
    }
    assert {"Because", "NamedBook", "SearchResult"} <= engine_names
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert {"BecauseOut", "NamedBookOut"} <= set(schemas)
    assert engine_names.isdisjoint(schemas)
    hit = schemas["RecommendHit"]["properties"]["because"]["items"]
    assert hit == {"$ref": "#/components/schemas/BecauseOut"}
