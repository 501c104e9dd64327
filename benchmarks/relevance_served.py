"""The served index every relevance benchmark reads: the shared catalog indexed into the suite's
database (once, when it holds no books), served by the service's own code in this process, and
the catalog's records in the index's row order.

`suite_arguments` adds the three arguments they all take (`--database-url`, `--catalog`,
`--subjects`) with the suite's defaults; `serve` builds what they then rank with.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from benchmarks.relevance_labels import Book, load_books
from indexer import db, pipeline, store
from indexer.settings import IndexSettings
from service.config.settings import ServiceSettings
from service.engine.searcher import Searcher
from service.engine.startup import build_encoder, build_searcher

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
DATABASE_URL = "sqlite:///benchmarks/results/books.db"


def suite_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's database, catalog and subject queries, with their defaults."""
    parser.add_argument("--database-url", default=DATABASE_URL)
    parser.add_argument("--catalog", type=Path, default=SHARED / "books.jsonl")
    parser.add_argument("--subjects", type=Path, default=SHARED / "subject_queries.jsonl")


def ensure_index(database_url: str, catalog: Path) -> None:
    """Index `catalog` into the database when it holds no books (about 4 minutes on 2 cores for
    the shared catalog); otherwise leave it as it is."""
    engine = db.create_db_engine(database_url)
    db.upgrade(engine)
    with Session(engine) as session:
        empty = store.count_books(session=session) == 0
    if empty:
        settings = IndexSettings(database_url=database_url)
        pipeline.run(settings, engine=engine, encoder=build_encoder(settings), path=catalog)
    engine.dispose()


@dataclass(frozen=True)
class Served:
    """The index as `attend serve` would serve it, with the service's default settings."""

    settings: ServiceSettings
    engine: Engine  # the caller disposes of it when done
    searcher: Searcher
    books: list[Book]  # the catalog's records, row r the index's row r


def serve(database_url: str, catalog: Path) -> Served:
    """`catalog` indexed into the database if it is empty, then served in this process (CPU)."""
    ensure_index(database_url, catalog)
    settings = ServiceSettings(database_url=database_url, device="cpu")
    engine = db.create_db_engine(database_url)
    searcher = build_searcher(settings, engine=engine)
    by_id = {b.id: b for b in load_books(catalog)}
    return Served(settings, engine, searcher, [by_id[i] for i in searcher.index.books.ids])
