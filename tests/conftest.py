"""Shared fixtures: real databases (SQLite in tmp_path, and the PostgreSQL server named by
ATTEND_TEST_POSTGRES_URL), migrated with Alembic, and a deterministic fake encoder."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from own_process import pytest_runtest_protocol  # noqa: F401  (a hook: pytest finds it here)
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from indexer import db
from indexer.loaded_index import LoadedIndex
from models.tokens import TokenEmbeddings
from service.cluster.shards.router import ShardedKeys
from service.cluster.shards.shard import LocalShard, Shard

os.environ.setdefault("HF_HUB_OFFLINE", "1")
PG_URL = os.environ.get("ATTEND_TEST_POSTGRES_URL")
SHARED_CATALOG = Path(__file__).resolve().parents[2] / "shared" / "data" / "books.jsonl"

BACKENDS = [
    "sqlite",
    pytest.param(
        "postgresql",
        marks=[
            pytest.mark.postgres,
            pytest.mark.skipif(
                not PG_URL,
                reason="ATTEND_TEST_POSTGRES_URL is not set "
                "(.ci/run sets it; PostgreSQL tests run there)",
            ),
        ],
    ),
]


class FakeEncoder:
    """Bag of hashed words → unit vector: texts sharing words are close. For tests that are
    about something other than the model."""

    name = "fake-hashing-64"
    dim = 64

    def __init__(self) -> None:
        self.calls = 0
        self.texts_encoded = 0

    def encode(self, texts: list[str]) -> torch.Tensor:
        self.calls += 1
        self.texts_encoded += len(texts)
        out = torch.zeros(len(texts), self.dim)
        for i, t in enumerate(texts):
            for word in re.findall(r"\w+", t.lower()):
                out[i] += self._word(word)
        out[:, 0] += 1e-3  # no zero vector for an empty text
        return torch.nn.functional.normalize(out, dim=-1)

    def _word(self, word: str) -> torch.Tensor:
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        v = torch.zeros(self.dim)
        v[h % self.dim] = 1.0 if (h >> 32) & 1 else -1.0
        return v

    def token_embeddings(self, texts: list[str]) -> list[TokenEmbeddings]:
        """One piece per word, its hashed vector: a word attends to itself."""
        out = []
        for t in texts:
            found = list(re.finditer(r"\w+", t))
            vectors = torch.stack([self._word(m.group().lower()) for m in found]) if found else None
            out.append(
                TokenEmbeddings(
                    pieces=[m.group().lower() for m in found],
                    spans=[m.span() for m in found],
                    words=list(range(len(found))),
                    vectors=torch.empty(0, self.dim) if vectors is None else vectors,
                )
            )
        return out


@contextmanager
def _run_folder(variable: str, folder: Path) -> Iterator[None]:
    """The environment variable `variable` naming `folder` while the run lasts (in-process
    settings and `attend` subprocesses, which inherit the environment, alike)."""
    old = os.environ.get(variable)
    os.environ[variable] = str(folder)
    yield
    if old is None:
        del os.environ[variable]
    else:
        os.environ[variable] = old


@pytest.fixture(autouse=True, scope="session")
def _onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One ONNX export of the real model for the whole run, shared by in-process encoders and
    `attend` subprocesses, instead of one per working folder."""
    with _run_folder("ATTEND_ONNX_CACHE_DIR", tmp_path_factory.mktemp("onnx-cache")):
        yield


@pytest.fixture(autouse=True, scope="session")
def _served_forms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The served forms of every test's databases in one folder of the run (by default a
    PostgreSQL database's go to the user's cache folder, where a test's would stay)."""
    with _run_folder("ATTEND_SERVED_DIR", tmp_path_factory.mktemp("served")):
        yield


@pytest.fixture
def fake_encoder() -> FakeEncoder:
    return FakeEncoder()


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database: a SQLite file, or a fresh PostgreSQL database dropped afterwards."""
    with new_database(request.param, tmp_path) as url:
        yield url


@contextmanager
def new_database(backend: str, folder: Path) -> Iterator[str]:
    """The URL of an empty database of `backend` ("sqlite" in `folder`, or "postgresql"),
    dropped on exit; for fixtures of a wider scope than `database_url`."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'attend.db'}"
        return
    assert PG_URL
    name = f"attend_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """A database migrated to head by Alembic (which also exercises the migrations)."""
    eng = db.create_db_engine(database_url)
    db.upgrade(eng)
    yield eng
    eng.dispose()


ATTEND = str(Path(sys.executable).with_name("attend"))  # the installed command


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def attend_index(catalog: Path, env: dict[str, str], cwd: Path | None = None) -> None:
    """`attend index catalog`, the real command in a subprocess; its stderr fails the test."""
    done = subprocess.run(
        [ATTEND, "index", str(catalog)],
        env=env,
        cwd=cwd,
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module", params=BACKENDS)
def demo_database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A database holding the demo catalog, indexed with the fake encoder, shared by the tests
    of a module (which must leave it as they found it)."""
    with new_database(request.param, tmp_path_factory.mktemp("demo")) as url:
        index_demo_catalog(url)
        yield url


def index_file(engine: Engine, path: Path, **options: object) -> Any:
    """`pipeline.run` of the catalog file `path` into `engine` with the fake encoder; its
    IndexReport. `options` as pipeline.run takes them (skip_invalid, allow_mass_delete, …)."""
    from indexer import pipeline
    from indexer.settings import IndexSettings

    url = engine.url.render_as_string(hide_password=False)
    return pipeline.run(
        IndexSettings(database_url=url),
        engine=engine,
        encoder=FakeEncoder(),
        path=path,
        **options,  # type: ignore[arg-type]
    )


def index_books(
    engine: Engine,
    folder: Path,
    books: list[dict[str, object]],
    encoder: FakeEncoder | None = None,
) -> str:
    """`books` indexed into `engine` (the fake encoder unless one is given); the database URL."""
    from indexer import pipeline
    from indexer.settings import IndexSettings

    url = engine.url.render_as_string(hide_password=False)
    pipeline.run(
        IndexSettings(database_url=url),
        engine=engine,
        encoder=encoder or FakeEncoder(),
        path=write_jsonl(folder / "books.jsonl", books),
    )
    return url


@contextmanager
def serve_books(
    engine: Engine, folder: Path, books: list[dict[str, object]], **settings: object
) -> Iterator[TestClient]:
    """The app over `books`, indexed into `engine` with the fake encoder (its settings are the
    defaults on the CPU plus `settings`)."""
    from service.api.main import create_app
    from service.config.settings import ServiceSettings

    url = index_books(engine, folder, books)
    service = ServiceSettings(database_url=url, device="cpu", **settings)  # type: ignore[arg-type]
    with TestClient(create_app(service, encoder=FakeEncoder())) as client:
        yield client


@contextmanager
def serve_demo_with(folder: Path, extra: list[dict[str, object]]) -> Iterator[TestClient]:
    """The app over the demo catalog and `extra`, indexed into SQLite in `folder` with the real
    packaged model, with the service's defaults on the CPU."""
    from service.api.main import create_app
    from service.config.settings import ServiceSettings

    url = index_demo_with(folder, extra)
    with TestClient(create_app(ServiceSettings(database_url=url, device="cpu"))) as client:
        yield client


def index_demo_with(folder: Path, extra: list[dict[str, object]]) -> str:
    """The URL of a SQLite database in `folder` holding the demo catalog and `extra`, indexed
    with the real packaged model."""
    from indexer.data import DEMO_CATALOG

    catalog = write_jsonl(folder / "books.jsonl", extra)
    catalog.write_text(DEMO_CATALOG.read_text(encoding="utf-8") + catalog.read_text())
    url = f"sqlite:///{folder / 'attend.db'}"
    index_with_model(url, catalog)
    return url


def index_with_model(url: str, catalog: Path) -> None:
    """Run `attend index`'s pipeline on `catalog` into the database at `url`, with the real
    packaged model and the indexer's default settings."""
    from indexer import pipeline
    from indexer.settings import IndexSettings
    from service.engine.startup import build_encoder

    settings = IndexSettings(database_url=url)
    engine = db.create_db_engine(url)
    try:
        pipeline.run(settings, engine=engine, encoder=build_encoder(settings), path=catalog)
    finally:
        engine.dispose()


def index_demo_catalog(url: str) -> None:
    """Migrate the empty database at `url` and index the demo catalog into it (fake encoder)."""
    from indexer import pipeline
    from indexer.data import DEMO_CATALOG
    from indexer.settings import IndexSettings

    engine = db.create_db_engine(url)
    try:
        db.upgrade(engine)
        pipeline.run(
            IndexSettings(database_url=url), engine=engine, encoder=FakeEncoder(), path=DEMO_CATALOG
        )
    finally:
        engine.dispose()


class InProcessShards:
    """`--engine ray`'s key placement but for the transport: each generation's keys on 2 shards
    that answer in this process (`LocalShard`), under the router's index (books, BM25)."""

    incremental = False

    def first(self, active: int | None) -> int | None:
        return active

    def keys(self, index: LoadedIndex) -> ShardedKeys:
        return ShardedKeys.of(
            index, [LocalShard(Shard(index, shard=s, shards=2, device="cpu")) for s in (0, 1)]
        )

    def ready(self, generation: int) -> bool:
        return True

    def served(self, generation: int | None) -> None:
        return None


def finished_job(client: TestClient, job_id: str, headers: dict[str, str]) -> dict[str, Any]:
    """The admin job `job_id` once it has succeeded or failed (60 s at most)."""
    deadline = time.monotonic() + 60
    while True:
        job: dict[str, Any] = client.get(f"/admin/jobs/{job_id}", headers=headers).json()
        if job["state"] in ("succeeded", "failed"):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.05)
