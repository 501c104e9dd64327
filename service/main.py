"""The FastAPI app.

catalog.jsonl → indexer.catalog.scan_catalog() → indexer.pipeline.run() → models.encoder (B, d)
→ indexer.batches.write_batch() → tables → [start-up] indexer.store.load_index() → Ranker
→ GET /search → service.searcher (batches concurrent queries) → encode (B, d)
→ models.attention.attend → top-k weights (B, k) → SearchResponse
A new generation (attend index, POST /admin/reindex) → service.reloader swaps the Ranker.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi_offline import FastAPIOffline
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from indexer import store
from indexer.db import SchemaError, create_db_engine, ensure_schema
from indexer.pipeline import ProgressSnapshot
from indexer.settings import CommonSettings, IndexSettings
from models.device import pick_device
from models.encoder import Encoder, SentenceTransformerEncoder, pick_backend
from service.errors import install_error_handlers
from service.explainer import Explainer
from service.guards import BodySizeLimit, Utf8Url
from service.jobs import ReindexJobs
from service.metrics import GaugeReader, Metrics
from service.notify import follow_generations
from service.ranker import Ranker
from service.reloader import GenerationWatcher
from service.routes import admin, books, explain, health, page, recommend, search
from service.searcher import Searcher
from service.settings import ServiceSettings
from service.telemetry import RequestTelemetry

logger = logging.getLogger(__name__)


def load_index(session: Session, *, model: str) -> store.LoadedIndex:
    """The active generation's keys and values for `model`. Refuses an index of another model."""
    index = store.load_index(session=session, model=model)
    total = store.count_books(session=session, generation=index.generation)
    if total and not len(index):
        active = store.active_generation(session=session)
        built_with = active.model if active else None
        raise SchemaError(
            f"the index holds {total} books but none embedded with model {model!r} (it was built "
            f"with {built_with!r}): set ATTEND_MODEL to that model, or re-run `attend index`"
        )
    if total > len(index):
        logger.warning(
            "%d of %d books have no vectors for model %s and cannot be found; "
            "re-run `attend index`",
            total - len(index),
            total,
            model,
        )
    return index


def build_ranker(
    settings: ServiceSettings, index: store.LoadedIndex, *, session: Session
) -> Ranker:
    """The ranker of `index` (the lexical head's descriptions read at its generation)."""
    descriptions = store.book_descriptions(
        session=session, book_ids=index.ids, generation=index.generation
    )
    return Ranker(
        index,
        device=settings.device,
        key_dtype=settings.key_dtype,
        chunk_size=settings.chunk_size,
        descriptions=descriptions,
    )


def load_ranker(settings: ServiceSettings, *, session: Session, model: str) -> Ranker:
    """The active generation's keys and values for `model`, on the device."""
    return build_ranker(settings, load_index(session, model=model), session=session)


class RankerLoader(Protocol):
    """What builds the service's ranker from the index: `load_ranker`, or the sharded router's
    (service/ray_serve.py)."""

    def __call__(self, settings: ServiceSettings, *, session: Session, model: str) -> Ranker: ...


class WatcherFactory(Protocol):
    """What follows new generations for an app with its own ranker loader (the Ray router)."""

    def __call__(self, *, engine: Engine, searcher: Searcher) -> GenerationWatcher: ...


def build_encoder(settings: CommonSettings) -> Encoder:
    device = pick_device(settings.device).type
    return SentenceTransformerEncoder(
        settings.model,
        device=device,
        batch_size=settings.encode_batch_size,
        backend=pick_backend(settings.encoder_backend, device),
        cache_dir=settings.onnx_cache_dir,
    )


def build_searcher(
    settings: ServiceSettings,
    *,
    engine: Engine,
    encoder: Encoder | None = None,
    ranker_loader: RankerLoader = load_ranker,
) -> Searcher:
    """The encoder (the configured model unless one is given) and the active generation's
    index, ready to search."""
    encoder = encoder or build_encoder(settings)
    with Session(engine) as session:
        ranker = ranker_loader(settings, session=session, model=encoder.name)
    return Searcher(
        encoder,
        ranker,
        scales=settings.scales,
        window_ms=settings.batch_window_ms,
        max_batch=settings.max_batch,
        cache_size=settings.query_cache_size,
        heads=settings.default_heads,
        batch_budget_ms=settings.batch_budget_ms,
    )


def add_middleware(app: FastAPI, settings: ServiceSettings, metrics: Metrics) -> None:
    """Outermost first: telemetry (sees every request, refused ones too), CORS (only when
    origins are configured), then the guards (service/guards.py)."""
    app.add_middleware(
        BodySizeLimit,
        max_bytes=settings.max_body_bytes,
        prefix_limits={"/admin/": settings.max_upload_bytes},
    )
    app.add_middleware(Utf8Url)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(RequestTelemetry, metrics=metrics)


def add_generation_gauges(app: FastAPI, metrics: Metrics) -> None:
    """The generation served, and the running (or last) re-index job's progress."""

    def served() -> int | None:
        searcher: Searcher | None = getattr(app.state, "searcher", None)
        return None if searcher is None else searcher.ranker.generation

    def progress() -> ProgressSnapshot | None:
        jobs: ReindexJobs | None = getattr(app.state, "jobs", None)
        return None if jobs is None else jobs.status()

    def field(name: str) -> GaugeReader:
        return lambda: None if (p := progress()) is None else getattr(p, name)

    metrics.gauge("attend_index_generation", "The index generation being served.", served)
    metrics.gauge(
        "attend_reindex_running",
        "1 while an admin re-index job runs, else 0.",
        lambda: (
            None
            if (p := progress()) is None
            else float(p.state in ("validating", "indexing", "finishing"))
        ),
    )
    metrics.gauge(
        "attend_reindex_books_total", "Books in the re-index job's catalog.", field("total")
    )
    metrics.gauge(
        "attend_reindex_books_done", "Books the re-index job has processed.", field("done")
    )
    metrics.gauge(
        "attend_reindex_texts_embedded", "Texts the re-index job embedded.", field("embedded")
    )


def _catalog_size(app: FastAPI) -> int | None:
    searcher: Searcher | None = getattr(app.state, "searcher", None)
    return None if searcher is None else len(searcher.ranker)


def index_settings(settings: ServiceSettings) -> IndexSettings:
    """What an admin re-index runs with: the service's database and model."""
    return IndexSettings(
        database_url=settings.database_url,
        model=settings.model,
        device=settings.device,
        encode_batch_size=settings.encode_batch_size,
    )


def create_app(
    settings: ServiceSettings | None = None,
    *,
    encoder: Encoder | None = None,
    ranker_loader: RankerLoader = load_ranker,
    follow: WatcherFactory | None = None,
) -> FastAPI:
    """The app for `settings` (read from the environment when None). `encoder` replaces the
    configured model, for tests; `ranker_loader` the single-process ranker (the Ray Serve router
    passes its sharded one, and `follow`, what follows new generations for it)."""
    settings = settings or ServiceSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_db_engine(settings.database_url)
        try:
            ensure_schema(engine, create_if_new=False)
            app.state.engine = engine
            model = encoder or build_encoder(settings)
            searcher = build_searcher(
                settings, engine=engine, encoder=model, ranker_loader=ranker_loader
            )
            searcher.on_batch = metrics.observe_batch
            # An app that loads the index itself follows new generations; a ranker from another
            # loader (the Ray router's shards) is followed by what that loader's caller gives.
            watcher: GenerationWatcher | None = None
            if follow is not None:
                watcher = follow(engine=engine, searcher=searcher)
            elif ranker_loader is load_ranker:
                watcher = GenerationWatcher(
                    engine=engine,
                    searcher=searcher,
                    build=lambda index, session: build_ranker(settings, index, session=session),
                    poll_s=settings.generation_poll_s,
                )
            jobs = ReindexJobs(
                settings=index_settings(settings),
                engine=engine,
                encoder=model,
                on_success=watcher.check if watcher is not None else lambda: None,
            )
            app.state.watcher, app.state.jobs = watcher, jobs
            searcher.start()
            stop_following = follow_generations(engine, watcher)
            app.state.searcher = searcher
            app.state.settings = settings
            app.state.explainer = Explainer(searcher.encoder, scale=settings.scale)
            try:
                yield
            finally:
                stop_following()
                jobs.close()
                searcher.close()
        finally:
            engine.dispose()

    # FastAPI's own /docs and /redoc load their scripts from a CDN: blank pages offline
    app = FastAPIOffline(
        title="Attend",
        summary="Semantic book search ranked by attention, with the weights in every answer.",
        version="0.1.0",
        lifespan=lifespan,
    )
    metrics = Metrics()
    app.state.metrics = metrics
    metrics.gauge(
        "attend_catalog_books", "Books whose keys are loaded.", lambda: _catalog_size(app)
    )
    add_generation_gauges(app, metrics)
    install_error_handlers(app)
    add_middleware(app, settings, metrics)
    app.include_router(page.router)
    app.include_router(search.router)
    # before books: /books/{id:path} would otherwise take /books/x/explain as the id "x/explain"
    app.include_router(explain.router)
    app.include_router(recommend.router)
    app.include_router(books.router)
    app.include_router(health.router)
    app.state.admin_token = settings.admin_token
    if settings.admin_token is not None:  # no token: the admin endpoints do not exist
        app.include_router(admin.router)
    return app
