"""A generation swap builds the BM25 indexes from the previous generation's (only the changed
books tokenized), and answers exactly as a service started on the new generation does: the
demo catalog with the real packaged model, on SQLite, re-indexed with books edited, added and
removed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from conftest import index_with_model
from indexer.data import DEMO_CATALOG
from service.api.main import create_app
from service.config.settings import ServiceSettings
from service.engine.served_index import ServedIndex

QUERIES = ["tolkien", "a dragon and a wizard", "python machine learning", "harry potter", "war"]


def _edited(books: list[dict[str, object]]) -> list[dict[str, object]]:
    """Every seventh description changed (a new word among them), one book gone, two new; two
    of the edits copy the first sentence of an unchanged book's (the second's), which three
    authors' descriptions then hold: boilerplate, so that book is renewed too."""
    out = []
    shared = str(books[1]["description"]).split(". ")[0] + "."
    for i, book in enumerate(books):
        if i == 3:
            continue  # removed
        also = f" {shared}" if i in (7, 21) else ""
        edit = {
            "description": f"{book.get('description') or ''} A zyxquor edition of "
            f"{book['title']}.{also}"
        }
        if i == 14:  # a series named by the row (Calibre's `series`), as the new book's
            edit["series"] = "Dragon Tales"
        out.append({**book, **edit} if i % 7 == 0 else book)
    out.append(
        {
            "id": "new-dragons",
            "title": "Dragons of the North",
            "authors": ["A. Writer"],
            "series": ["Dragon Tales"],
        }
    )
    out.append(
        {
            "id": "new-rivers",
            "title": "Rivers",
            "authors": ["B. Writer"],
            "description": "A history of the great rivers of Europe and the towns on them.",
        }
    )
    return out


def _answers(client: TestClient, ids: list[str]) -> list[object]:
    answers: list[object] = []
    for q in QUERIES:
        response = client.get("/search", params={"q": q})
        assert response.status_code == 200
        answers.append(response.json()["results"])
    for book_id in ids:
        response = client.get(f"/books/{book_id}/similar")
        assert response.status_code == 200
        answers.append(response.json()["results"])
    response = client.post("/recommend", json={"liked": ids[:2]})
    assert response.status_code == 200
    answers.append(response.json()["results"])
    return answers


def _lexical_bytes(served: ServedIndex) -> list[bytes]:
    rows = range(len(served))
    return [
        served.lexical.scores(QUERIES).tobytes(),
        served.like_this.scores(rows).tobytes(),
        np.asarray(sorted(served.lexical.postings.terms)).tobytes(),
    ]


def test_a_swap_answers_as_a_fresh_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    books = [json.loads(line) for line in DEMO_CATALOG.read_text(encoding="utf-8").splitlines()]
    url = f"sqlite:///{tmp_path / 'attend.db'}"
    first = tmp_path / "books.jsonl"
    first.write_text("".join(json.dumps(b) + "\n" for b in books), encoding="utf-8")
    index_with_model(url, first)
    settings = ServiceSettings(
        database_url=url, device="cpu", generation_poll_s=0, served_dir=str(tmp_path / "forms")
    )
    ids = [str(books[0]["id"]), str(books[14]["id"]), "new-dragons", "new-rivers"]
    with TestClient(create_app(settings)) as swapped:
        second = tmp_path / "edited.jsonl"
        second.write_text("".join(json.dumps(b) + "\n" for b in _edited(books)), encoding="utf-8")
        index_with_model(url, second)
        with caplog.at_level(logging.INFO, logger="service.engine"):
            assert swapped.app.state.watcher.check()  # type: ignore[attr-defined]
        # the swap made its BM25 indexes from the previous generation's, tokenizing 29 books
        # (26 edited, 2 new, 1 renewed for its boilerplate) of 181
        assert "BM25 index of 181 books (29 changed)" in caplog.text
        assert "more-like-this BM25 of 181 books (29 changed)" in caplog.text
        served = swapped.app.state.searcher.index  # type: ignore[attr-defined]
        assert "zyxquor" in served.lexical.postings.terms  # the new word
        after_swap = _answers(swapped, ids)
        swapped_bytes = _lexical_bytes(served)
        mates = [r for r, keys in enumerate(served.names.rows.series) if "dragon tales" in keys]
        assert [served.books.ids[r] for r in mates] == [ids[1], "new-dragons"]
    # a start from the database, and one from the served form the swap wrote
    for served_dir in ("", str(settings.served_dir)):
        start = settings.model_copy(update={"served_dir": served_dir})
        with TestClient(create_app(start)) as fresh:
            fresh_served = fresh.app.state.searcher.index  # type: ignore[attr-defined]
            assert fresh_served.generation == served.generation
            assert _answers(fresh, ids) == after_swap
            assert _lexical_bytes(fresh_served) == swapped_bytes
            assert fresh_served.names.rows.series == served.names.rows.series
