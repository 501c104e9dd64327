"""`attend index` killed with SIGKILL midway (a real process, the real model, SQLite and
PostgreSQL): the database stays consistent, a service still answers from the previous
generation, and a rerun resumes, embeds nothing already committed, and ends where an
uninterrupted run ends."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from conftest import write_jsonl
from indexer import db, loaded_index, pipeline, store
from indexer.catalog import CatalogRecord, read_catalog
from indexer.data import DEMO_CATALOG
from indexer.schema import Book, BookVector, Generation, Vector
from indexer.settings import IndexSettings
from models.encoder import SentenceTransformerEncoder
from service.api.main import create_app
from service.config.settings import ServiceSettings

pytestmark = pytest.mark.model
logger = logging.getLogger(__name__)
ATTEND = str(Path(sys.executable).with_name("attend"))
BATCH = 5
KILL_AFTER = 10  # rows of the new generation committed before the kill
CHANGED = 32  # rows a full run writes into generation 2


def _as_json(r: CatalogRecord) -> dict[str, object]:
    return {
        "id": r.id,
        "title": r.title,
        "description": r.description,
        "authors": r.authors,
        "year": r.year,
        "language": r.language,
        **r.extra,
    }


def _catalogs(folder: Path) -> tuple[Path, Path]:
    """Generation 1: 13 demo books. Generation 2: 40, two of the first with a new
    description, the last three of generation 1 gone: 30 added, 2 updated, 3 removed."""
    books = list(read_catalog(DEMO_CATALOG))
    first = [_as_json(b) for b in books[:10] + books[170:173]]
    second = [_as_json(b) for b in books[:40]]
    for b in second[:2]:
        b["description"] = f"{b['description']} Revised edition."
    return write_jsonl(folder / "gen1.jsonl", first), write_jsonl(folder / "gen2.jsonl", second)


@pytest.fixture(scope="module")
def encoder() -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder(device="cpu", backend="torch")


@pytest.fixture(scope="module")
def reference(
    encoder: SentenceTransformerEncoder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Engine, pipeline.IndexReport, tuple[Path, Path]]]:
    """Both generations indexed without interruption, in this process."""
    folder = tmp_path_factory.mktemp("reference")
    catalogs = _catalogs(folder)
    engine = db.create_db_engine(f"sqlite:///{folder / 'ref.db'}")
    settings = IndexSettings(batch_size=BATCH)
    pipeline.run(settings, engine=engine, encoder=encoder, path=catalogs[0])
    report = pipeline.run(settings, engine=engine, encoder=encoder, path=catalogs[1])
    assert (report.added, report.updated, report.removed) == (30, 2, 3)
    yield engine, report, catalogs
    engine.dispose()


def _count(engine: Engine, stmt: object) -> int:
    with Session(engine) as session:
        return int(session.scalar(stmt) or 0)  # type: ignore[call-overload]


def test_sigkill_mid_run_then_resume(
    database_url: str,
    tmp_path: Path,
    encoder: SentenceTransformerEncoder,
    reference: tuple[Engine, pipeline.IndexReport, tuple[Path, Path]],
) -> None:
    ref_engine, ref_report, (gen1, gen2) = reference
    engine = db.create_db_engine(database_url)
    try:
        pipeline.run(IndexSettings(batch_size=BATCH), engine=engine, encoder=encoder, path=gen1)
        vectors_gen1 = _count(engine, select(func.count()).select_from(Vector))
        env = {**os.environ, "ATTEND_DATABASE_URL": database_url, "HF_HUB_OFFLINE": "1"}

        _kill_midway(engine, env, tmp_path, gen2)
        new_rows = select(func.count()).where(Book.valid_from == 2)

        # The kill landed mid-run, and left whole batches only.
        committed = _count(engine, new_rows)
        assert KILL_AFTER <= committed < CHANGED, committed
        with Session(engine) as session:
            states = {g: s for g, s in session.execute(select(Generation.id, Generation.state))}
            assert states == {1: "active", 2: "building"}
            links = session.execute(
                select(func.count(BookVector.role))
                .select_from(Book)
                .outerjoin(BookVector, BookVector.version_id == Book.row_id)
                .group_by(Book.row_id)
            ).scalars()
            assert set(links) == {3}  # two keys and a value for every row, none half-written
            assert store.count_books(session=session) == 13
        vectors_at_kill = _count(engine, select(func.count()).select_from(Vector))

        # A service still answers from generation 1.
        settings = ServiceSettings(database_url=database_url, device="cpu", generation_poll_s=0)
        with TestClient(create_app(settings, encoder=encoder)) as client:
            body = client.get("/search", params={"q": "a wizard school"}).json()
            assert (body["generation"], body["catalog_size"]) == (1, 13)

        # The rerun (here in-process, the same code) resumes generation 2 and embeds only what
        # was not committed.
        rerun = pipeline.run(
            IndexSettings(batch_size=BATCH), engine=engine, encoder=encoder, path=gen2
        )
        assert rerun.resumed and rerun.activated and rerun.generation == 2
        embedded = rerun.embedded
        vectors_final = _count(engine, select(func.count()).select_from(Vector))
        assert embedded == vectors_final - vectors_at_kill  # every embedding was a new vector
        assert vectors_final - vectors_gen1 == ref_report.embedded  # the same set as uninterrupted
        assert embedded < ref_report.embedded
        logger.info(
            "killed with %d of %d rows of generation 2 committed; the rerun embedded %d texts, "
            "an uninterrupted run %d",
            committed,
            CHANGED,
            embedded,
            ref_report.embedded,
        )

        # The result equals the uninterrupted run's.
        _assert_same_index(engine, ref_engine, encoder.name)
    finally:
        engine.dispose()


def _kill_midway(engine: Engine, env: dict[str, str], cwd: Path, catalog: Path) -> None:
    """`attend index catalog` in a process of its own, killed with SIGKILL once KILL_AFTER
    rows of generation 2 are committed."""
    proc = subprocess.Popen(
        [ATTEND, "index", str(catalog), "--batch-size", str(BATCH)],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        text=True,
    )
    new_rows = select(func.count()).where(Book.valid_from == 2)
    deadline = time.monotonic() + 300
    while _count(engine, new_rows) < KILL_AFTER:
        assert proc.poll() is None, "attend index ended before the kill"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()  # type: ignore[union-attr]
    assert proc.returncode == -signal.SIGKILL


def test_a_killed_run_is_not_resumed_by_a_run_of_another_catalog(
    database_url: str,
    tmp_path: Path,
    encoder: SentenceTransformerEncoder,
    reference: tuple[Engine, pipeline.IndexReport, tuple[Path, Path]],
) -> None:
    """Kill a run of catalog X midway, then run catalog Y with --keep-missing: Y's run starts a
    generation of its own (the killed one's rows discarded), so no book that only X has is
    ever served; X's own rerun would have resumed (the test above)."""
    _, _, (gen1, x) = reference
    engine = db.create_db_engine(database_url)
    try:
        pipeline.run(IndexSettings(batch_size=BATCH), engine=engine, encoder=encoder, path=gen1)
        env = {**os.environ, "ATTEND_DATABASE_URL": database_url, "HF_HUB_OFFLINE": "1"}
        _kill_midway(engine, env, tmp_path, x)
        books = list(read_catalog(DEMO_CATALOG))
        y = write_jsonl(tmp_path / "y.jsonl", [_as_json(b) for b in books[100:110]])
        report = pipeline.run(
            IndexSettings(batch_size=BATCH), engine=engine, encoder=encoder, path=y,
            keep_missing=True,
        )  # fmt: skip
        assert not report.resumed and report.activated and report.generation == 3
        with Session(engine) as session:
            assert session.get_one(Generation, 2).state == "failed"
            served = set(loaded_index.load_index(session=session, model=encoder.name).ids)
        first = {b.id for b in read_catalog(gen1)}
        only_x = {b.id for b in read_catalog(x)} - first
        assert served == first | {b.id for b in books[100:110]}
        assert not served & only_x
    finally:
        engine.dispose()


def _assert_same_index(engine: Engine, ref_engine: Engine, model: str) -> None:
    with Session(engine) as session, Session(ref_engine) as ref_session:
        got = loaded_index.load_index(session=session, model=model)
        want = loaded_index.load_index(session=ref_session, model=model)
        assert (got.books, got.generation) == (want.books, want.generation)
        for f in want.keys:
            assert np.allclose(got.keys[f], want.keys[f], atol=1e-5), f
        assert got.values is got.keys["description"]
        g2, ref_g2 = session.get_one(Generation, 2), ref_session.get_one(Generation, 2)
        counts = ("state", "books", "added", "updated", "removed")
        assert [getattr(g2, c) for c in counts] == [getattr(ref_g2, c) for c in counts]
