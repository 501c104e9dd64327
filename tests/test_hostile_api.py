"""Requests at the edges of what the API takes (issue 16, findings 5 and 8): head weights at the
ends of the float range, a catalog path longer than the OS allows, JSON nested past the parser's
depth, and a too-short admin token that must not be echoed. Real SQLite and PostgreSQL, the
fake encoder (these are about the API, not the model)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from conftest import ATTEND, FakeEncoder
from service.api.main import create_app
from service.config.settings import ServiceSettings

TOKEN = "hostile-admin-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def client(demo_database_url: str) -> Iterator[TestClient]:
    settings = ServiceSettings(
        database_url=demo_database_url, device="cpu", admin_token=TOKEN, generation_poll_s=0
    )
    with TestClient(create_app(settings, encoder=FakeEncoder())) as c:
        yield c


def test_huge_equal_weights_are_a_plain_half_and_half(client: TestClient) -> None:
    """1e308 twice summed to inf: 500 alone, 200 with no results in a batch."""
    heads = "title:1e308,description:1e308"
    alone = client.get("/search", params={"q": "wizard school", "heads": heads})
    assert alone.status_code == 200, alone.text
    reference = client.get(
        "/search", params={"q": "wizard school", "heads": "title:1,description:1"}
    ).json()
    assert alone.json()["heads"] == reference["heads"]
    assert {h: v["weight"] for h, v in reference["heads"].items()} == {
        "title": 0.5,
        "description": 0.5,
    }
    assert [r["id"] for r in alone.json()["results"]] == [r["id"] for r in reference["results"]]
    batched = client.post("/search", json={"queries": ["wizard school", "dragons"], "heads": heads})
    assert batched.status_code == 200
    first = batched.json()["responses"][0]
    assert [r["id"] for r in first["results"]] == [r["id"] for r in reference["results"]]
    assert first["results"]


@pytest.mark.parametrize(
    ("heads", "detail"),
    [
        ("title:1e-320,lexical:1", "head 'title': weight 1e-320 is too small to compute with"),
        ("title:1e-320", "too small to compute with"),
        ("title:1e-9,lexical:1", "head 'title': weight 1e-09 is under 1e-06 of the largest"),
    ],
)
def test_weights_too_small_to_mean_anything_are_422(
    client: TestClient, heads: str, detail: str
) -> None:
    r = client.get("/search", params={"q": "wizard", "heads": heads})
    assert r.status_code == 422
    assert detail in r.json()["detail"]
    assert "heads: heads:" not in r.json()["detail"]
    r = client.post("/search", json={"queries": ["wizard", "magic"], "heads": heads})
    assert r.status_code == 422
    assert detail in r.json()["detail"]


def test_a_heads_error_names_the_field_once(client: TestClient) -> None:
    r = client.get("/search", params={"q": "wizard", "heads": "title"})
    assert r.status_code == 422
    assert r.json()["detail"] == "heads: expected name:weight, got 'title'"


def test_a_catalog_path_longer_than_the_os_allows_is_422(client: TestClient) -> None:
    path = "/tmp/" + "a" * 5000 + ".jsonl"
    r = client.post("/admin/reindex", json={"catalog": path}, headers=AUTH)
    assert r.status_code == 422, r.text
    assert "is not a .jsonl, .csv, .xlsx, .mrc or .xml file on the server" in r.json()["detail"]


@pytest.mark.parametrize("route", ["/search", "/recommend", "/admin/reindex"])
def test_json_nested_past_the_parser_is_422(client: TestClient, route: str) -> None:
    body = '{"queries": ' + "[" * 100_000 + "]" * 100_000 + "}"
    r = client.post(route, content=body, headers={"Content-Type": "application/json", **AUTH})
    assert r.status_code == 422, r.text
    assert "nested" in r.json()["detail"]


def test_a_too_short_admin_token_is_refused_without_being_echoed() -> None:
    secret = "tooShort-7f3a9"  # 14 characters
    env = {
        **os.environ,
        "ATTEND_ADMIN_TOKEN": secret,
        "ATTEND_DATABASE_URL": "sqlite:///:memory:",
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        [ATTEND, "serve", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "ATTEND_ADMIN_TOKEN must be at least 16 characters" in done.stderr
    assert secret not in done.stderr + done.stdout
