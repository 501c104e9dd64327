"""Messages that said a thing twice (issue 32, finding 5): `POST /recommend {"liked": []}`
answered its one problem twice over (the body is validated for the route and again for its
budget dependency), and a wide CSV's notice counted the columns it did not name as "and 11,990
or more more", when a CSV's header names them all: the count is exact."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from conftest import FakeEncoder
from indexer.catalog import CatalogSnapshot
from service.api.main import create_app
from service.config.settings import ServiceSettings


def test_a_recommend_body_problem_is_said_once(demo_database_url: str) -> None:
    settings = ServiceSettings(database_url=demo_database_url, device="cpu")
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        empty = client.post("/recommend", json={"liked": []})
        missing = client.post("/recommend", json={})
    assert empty.status_code == missing.status_code == 422
    assert empty.json()["detail"] == (
        "liked: List should have at least 1 item after validation, not 0"
    )
    assert missing.json()["detail"] == "liked: Field required"


def _notices(path: Path) -> list[str]:
    with CatalogSnapshot.take(path) as snapshot:
        return snapshot.check().notices


def test_a_wide_csv_counts_the_columns_it_does_not_name(tmp_path: Path) -> None:
    columns = 12_000  # past the 10,000 names a catalog's notice keeps
    path = tmp_path / "wide.csv"
    header = ",".join(f"c{i}" for i in range(columns))
    path.write_text(f"id,title,{header}\n1,Dune,{','.join('x' * columns)}\n", encoding="utf-8")
    (notice,) = [n for n in _notices(path) if "kept as metadata" in n]
    shown = ", ".join(f"'c{i}'" for i in range(10))
    assert f"{shown} and {columns - 10:,} more (the fields:" in notice


def test_a_jsonl_of_a_new_key_a_row_says_at_least(tmp_path: Path) -> None:
    """Past the kept names, a JSONL's later keys are not counted: the notice says so once."""
    path = tmp_path / "keys.jsonl"
    rows = [{"id": str(i), "title": "t", f"k{i}_a": 1, f"k{i}_b": 2} for i in range(5_100)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (notice,) = [n for n in _notices(path) if "kept as metadata" in n]
    assert " and at least 9,990 more (the fields:" in notice
    assert "more more" not in notice
