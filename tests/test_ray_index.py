"""`attend index --engine ray` on a local Ray equals the single-process run: the same books,
the same vectors up to float noise, the same answers; and a changed catalog re-embeds only
what changed, on Ray as locally."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from indexer import db, loaded_index, pipeline
from indexer.data import DEMO_CATALOG
from indexer.filters import Filters
from indexer.settings import IndexSettings
from models.encoder import SentenceTransformerEncoder
from service.commands.cli_parser import build_parser
from service.config.settings import ServiceSettings
from service.engine.query_ranking import rank_queries
from service.engine.served_index import ServedIndex

pytest.importorskip("ray", reason="the ray engine is an extra: pip install 'attend[ray]'")
from indexer import ray_embed

pytestmark = pytest.mark.model
QUERIES = ["generative AI", "the history of Rome", "a picture book about a bear"]


@pytest.fixture(scope="module")
def encoder() -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder(device="cpu", backend="torch")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    with ray_embed.ray_session(None):
        yield


def _index(
    url: str, catalog: Path, encoder: SentenceTransformerEncoder, *, ray_workers: int = 0
) -> pipeline.IndexReport:
    """A local run, or with `ray_workers` encoder actors on the local Ray."""
    settings = IndexSettings(database_url=url, batch_size=64)
    engine = db.create_db_engine(url)
    embedder = (
        partial(ray_embed.embed_plans, settings=settings, model=encoder.name, workers=ray_workers)
        if ray_workers
        else None
    )
    try:
        return pipeline.run(
            settings, engine=engine, encoder=encoder, path=catalog, embedder=embedder
        )
    finally:
        engine.dispose()


def _load(url: str, model: str) -> loaded_index.LoadedIndex:
    engine: Engine = db.create_db_engine(url)
    try:
        with Session(engine) as session:
            return loaded_index.load_index(session=session, model=model)
    finally:
        engine.dispose()


def _assert_same_index(
    a: loaded_index.LoadedIndex, b: loaded_index.LoadedIndex, encoder: SentenceTransformerEncoder
) -> None:
    assert a.books == b.books
    assert set(a.keys) == set(b.keys)
    for field in a.keys:
        np.testing.assert_allclose(a.keys[field], b.keys[field], rtol=0, atol=2e-6)
    assert a.values is not None and b.values is not None
    np.testing.assert_allclose(a.values, b.values, rtol=0, atol=2e-6)
    q = encoder.encode(QUERIES)
    settings = ServiceSettings()
    args: dict[str, Any] = {
        "k": 10,
        "heads": [settings.default_heads] * len(QUERIES),
        "scales": settings.scales,
        "filters": [Filters(), Filters(year_min=2000), Filters()],
    }
    want = rank_queries(ServedIndex.local(a, device="cpu"), q, QUERIES, **args)
    got = rank_queries(ServedIndex.local(b, device="cpu"), q, QUERIES, **args)
    for w, g in zip(want, got, strict=True):
        assert [h.row for h in g.hits] == [h.row for h in w.hits]
        assert [h.weight for h in g.hits] == pytest.approx([h.weight for h in w.hits], rel=1e-4)


@pytest.mark.own_process
def test_ray_index_equals_the_single_process_run(
    tmp_path: Path, encoder: SentenceTransformerEncoder, local_ray: None
) -> None:
    local_url, ray_url = f"sqlite:///{tmp_path / 'local.db'}", f"sqlite:///{tmp_path / 'ray.db'}"
    local = _index(local_url, DEMO_CATALOG, encoder)
    on_ray = _index(ray_url, DEMO_CATALOG, encoder, ray_workers=2)  # a pool of two actors
    assert (on_ray.added, on_ray.embedded, on_ray.activated) == (local.added, local.embedded, True)
    assert on_ray.added == 180 and on_ray.embedded > 0
    _assert_same_index(_load(local_url, encoder.name), _load(ray_url, encoder.name), encoder)

    # a changed catalog: two new descriptions, one new book, one gone; only they are embedded
    rows = [json.loads(line) for line in DEMO_CATALOG.read_text().splitlines() if line.strip()]
    rows[0]["description"] = "A new description of the first book."
    rows[1]["description"] = "Another new description, of the second."
    rows.append({"id": "new-book", "title": "A brand new book", "description": "About Ray."})
    del rows[2]
    changed = tmp_path / "changed.jsonl"
    changed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    local = _index(local_url, changed, encoder)
    on_ray = _index(ray_url, changed, encoder, ray_workers=1)
    assert (on_ray.added, on_ray.updated, on_ray.removed) == (1, 2, 1)
    assert on_ray.embedded == local.embedded == 4  # 2 descriptions, and the new book's 2 texts
    _assert_same_index(_load(local_url, encoder.name), _load(ray_url, encoder.name), encoder)


def test_attend_index_takes_the_ray_engine() -> None:
    args = build_parser().parse_args(
        ["index", "books.jsonl", "--engine", "ray", "--ray-address", "auto", "--ray-workers", "4"]
    )
    assert (args.engine, args.ray_address, args.ray_workers) == ("ray", "auto", 4)
