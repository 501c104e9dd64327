"""Ids and text compared as a reader sees them (issue 25): any id is reachable, a `/` in it
included (written %2F); ids are NFC without format characters, at index and at lookup; queries
and BM25 terms are NFKC without invisible characters, and a query of invisible characters only
is a 422. Real SQLite and PostgreSQL, the fake encoder (the model is not the point)."""

from __future__ import annotations

import random
import unicodedata
from pathlib import Path

import pytest
from sqlalchemy import Engine

from conftest import FakeEncoder, serve_books, write_jsonl
from indexer import pipeline
from indexer.catalog import CatalogError
from indexer.settings import IndexSettings
from models.text import fold, normalize_id, normalize_text, without_combining
from service.engine.lexical import LexicalIndex

BOOKS: list[dict[str, object]] = [
    {"id": "dune", "title": "Dune", "description": "desert planet spice"},
    {"id": "dune/similar", "title": "Dune Messiah", "description": "desert emperor spice"},
    {"id": "dune/explain", "title": "Children of Dune", "description": "desert twins spice"},
    {"id": "10.1000/xyz", "title": "A paper with a DOI", "description": "a study of sand"},
    {"id": "a%2Fb", "title": "A literal percent", "description": "an id with %2F in it"},
    {"id": "caf\u00e9", "title": "Le café", "description": "coffee house stories"},
    {"id": "hobbit", "title": "The Hobbit", "authors": ["J. R. R. Tolkien"], "description": "x"},
]
INVISIBLE = ["\u200b", "\u0301", "\ufeff", "\u00ad", "\u200b\u0301 \ufeff\u00ad"]
BLANK = ["\u3164", "\u115f\u1160", " \uffa0\u2800 "]  # letters that show as blank


def test_every_id_is_reachable_a_slash_written_as_2f(engine: Engine, tmp_path: Path) -> None:
    with serve_books(engine, tmp_path, BOOKS) as client:
        for path, book in (
            ("/books/dune", "dune"),
            ("/books/dune%2Fsimilar", "dune/similar"),  # was dune's similar books
            ("/books/dune%2fexplain", "dune/explain"),  # was a 422 (no q)
            ("/books/10.1000/xyz", "10.1000/xyz"),  # a raw slash still works
            ("/books/10.1000%2Fxyz", "10.1000/xyz"),
            ("/books/a%252Fb", "a%2Fb"),
        ):
            r = client.get(path)
            assert r.status_code == 200 and r.json()["id"] == book, (path, r.text)
        similar = client.get("/books/dune/similar").json()
        assert similar["id"] == "dune"
        similar = client.get("/books/dune%2Fsimilar/similar").json()
        assert similar["id"] == "dune/similar"
        r = client.get("/books/dune%2Fexplain/explain", params={"q": "desert twins"})
        assert r.status_code == 200 and r.json()["id"] == "dune/explain", r.text
        r = client.get("/books/dune%2Fnope")
        assert r.status_code == 404 and "dune/nope" in r.json()["detail"]


def test_ids_are_nfc_without_format_characters(engine: Engine, tmp_path: Path) -> None:
    assert normalize_id("cafe\u0301") == normalize_id("caf\u00e9") == "caf\u00e9"
    assert normalize_id("dune\u200b") == "dune"
    assert normalize_id("\ufb01") == "\ufb01"  # NFC, not NFKC: the ligature stays
    with serve_books(engine, tmp_path, BOOKS) as client:
        for path in ("/books/cafe%CC%81", "/books/caf%C3%A9", "/books/caf%C3%A9%E2%80%8B"):
            r = client.get(path)
            assert r.status_code == 200 and r.json()["id"] == "caf\u00e9", (path, r.text)
        r = client.get("/books/dune%E2%80%8B/similar")
        assert r.status_code == 200 and r.json()["id"] == "dune"
        r = client.post("/recommend", json={"liked": ["cafe\u0301", "dune\u200b"]})
        assert r.status_code == 200, r.text

    # at index: the same id twice, however it is spelled
    catalog = write_jsonl(
        tmp_path / "twice.jsonl",
        [{"id": "caf\u00e9", "title": "A"}, {"id": "cafe\u0301", "title": "B"}],
    )
    url = engine.url.render_as_string(hide_password=False)
    with pytest.raises(CatalogError, match="duplicate id 'caf\u00e9'"):
        pipeline.run(
            IndexSettings(database_url=url), engine=engine, encoder=FakeEncoder(), path=catalog
        )


def test_queries_and_terms_lose_their_invisible_characters(engine: Engine, tmp_path: Path) -> None:
    assert normalize_text("Tol\u200bkien") == "Tolkien"
    assert normalize_text("\uff34olkien") == "Tolkien"  # a full-width T: NFKC
    assert normalize_text("caf\u00e9") == "caf\u00e9"  # a mark on a letter stays
    for text in INVISIBLE:
        assert normalize_text(text).strip() == "", repr(text)
    lexical = LexicalIndex(["The Hobbit J. R. R. Tol\u00adkien", "Dune Frank Herbert"])
    assert lexical.terms("Tol\u200bkien") == lexical.terms("tolkien") != []

    with serve_books(engine, tmp_path, BOOKS) as client:
        plain = client.get("/search", params={"q": "Tolkien"}).json()
        hidden = client.get("/search", params={"q": "Tol\u200bkien"})
        assert hidden.status_code == 200, hidden.text
        assert hidden.json()["results"] == plain["results"]
        assert plain["results"][0]["id"] == "hobbit"
        for text in INVISIBLE + BLANK:
            r = client.get("/search", params={"q": text})
            assert r.status_code == 422, (repr(text), r.text)
            assert "only invisible characters" in r.json()["detail"]
            r = client.post("/search", json={"queries": [text]})
            assert r.status_code == 422 and "only invisible characters" in r.text, r.text
            r = client.get("/books/dune/explain", params={"q": text})
            assert r.status_code == 422, r.text


def _normalize_text_by_the_loop(text: str) -> str:
    """normalize_text as it was written first, a character at a time: the reference of its
    fast path."""
    text = unicodedata.normalize(
        "NFKC", "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    )
    out: list[str] = []
    base = False
    for ch in text:
        category = unicodedata.category(ch)
        if category in ("Mn", "Mc", "Me"):
            if base:
                out.append(ch)
            continue
        out.append(ch)
        base = category[0] in "LN"
    return unicodedata.normalize("NFKC", "".join(out))


def test_normalize_text_equals_the_per_character_loop() -> None:
    """Random texts of letters, accents, marks alone and after a space, format characters,
    compatibility forms and characters of other scripts and planes: the fast path (no mark
    or format character, NFKC only) and the loop give the same text."""
    alphabet = (
        "aeZ9 .,'\u00e9\u00f1\u00fc\u2019\u2014\u0301\u0308\u0327\u20dd\u200b\u200d\ufeff"
        "\u00ad\ufb01\uff34\u2460\u1e9b\u0928\u093f\u0e01\u0e31\u3042\u3099\U0001d400"
        "\U0001f600\U000e0100\U000e0001"
    )
    rng = random.Random(30)
    texts = ["".join(rng.choices(alphabet, k=rng.randint(1, 12))) for _ in range(3000)]
    texts += ["caf\u00e9 \u2014 na\u00efve", "\u00e9t\u00e9", "\u1e9b\u0323", "\ufb01ne \u00bd"]
    for text in texts:
        assert normalize_text(text) == _normalize_text_by_the_loop(text), ascii(text)


def test_without_combining_equals_the_per_character_test() -> None:
    """What catalog_names.fold strips from an NFKD decomposition, on random texts of ASCII,
    accented letters decomposed, marks of other scripts, and characters outside the BMP."""
    alphabet = (
        "aeZ9 .,'-\u00e9\u00f1\u00e7\u0301\u0308\u0327\u0323\u093f\u094d\u0e31\u0e48\u05b0"
        "\u3099\u2019\u2014\u00df\ufb01\U0001d400\U0001d165\U0001d16d\U000e0100"
    )
    rng = random.Random(31)
    texts = ["".join(rng.choices(alphabet, k=rng.randint(0, 16))) for _ in range(3000)]
    texts += ["Garc\u00eda M\u00e1rquez", "J.R.R. Tolkien", "Bront\u00eb", "\u0130stanbul"]
    for text in texts:
        decomposed = unicodedata.normalize("NFKD", text)
        expected = "".join(c for c in decomposed if not unicodedata.combining(c))
        assert without_combining(decomposed) == expected, ascii(text)
    assert fold("Garc\u00eda M\u00e1rquez") == ["garcia", "marquez"]
