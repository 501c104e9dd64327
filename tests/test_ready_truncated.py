"""/readyz over a SQLite file truncated under a running app (issue 25): 503 with a message,
also once the file has grown again (a checkpoint or another writer putting pages back), when
the file is at least as long as SQLite's header but no longer begins with it, while the pooled
connections would go on answering from their page cache. Real SQLite, the fake encoder."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from conftest import FakeEncoder, index_books
from indexer import db
from service.api.main import create_app
from service.config.settings import ServiceSettings

BOOKS: list[dict[str, object]] = [
    {"id": f"b{i}", "title": f"Book {i}", "description": f"words of book {i}"} for i in range(20)
]


@pytest.mark.parametrize("after", ["empty", "grown-again", "overwritten"])
def test_readyz_is_503_over_a_truncated_file(tmp_path: Path, after: str) -> None:
    path = tmp_path / "attend.db"
    url = f"sqlite:///{path}"
    engine = db.create_db_engine(url)
    try:
        db.upgrade(engine)
        index_books(engine, tmp_path, BOOKS)
        with engine.connect() as conn:  # every page in the file, the log empty
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        engine.dispose()
    settings = ServiceSettings(database_url=url, device="cpu", generation_poll_s=0)
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        assert client.get("/readyz").status_code == 200
        size = path.stat().st_size
        with path.open("r+b") as f:
            if after == "overwritten":
                f.write(b"\0" * size)  # the same length, in place
            else:
                f.truncate(0)
                if after == "grown-again":
                    f.write(b"\0" * 8192)
        r = client.get("/readyz")
        assert r.status_code == 503, r.text
        detail = r.json()["detail"]
        # one sentence naming the problem, no path (issue 32: the full text goes to the log)
        assert "no longer a database" in detail and str(path) not in detail, detail
        assert client.get("/readyz").status_code == 503  # and it stays so
