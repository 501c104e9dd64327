"""The FastAPI app, `create_app(settings)`: routes, middleware, error handlers and the engine's
lifetime. The one room that knows HTTP; the engine below it never does.

catalog file → indexer (scan, embed, write a generation) → database → [start-up]
engine.startup loads a ServedIndex → GET /search → api.routes.search → engine.searcher (batches
concurrent queries, encodes them (B, d)) → engine.query_ranking → models.mixture →
models.attention (exact top-k weights) → back up: engine.results.SearchResult →
api.search_schemas.SearchResponse. A new generation → engine.reloader swaps the ServedIndex.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi_offline import FastAPIOffline

from indexer.db import create_db_engine, ensure_schema
from indexer.progress import ProgressSnapshot
from models.encoder import Encoder
from service.api.admission import Turns
from service.api.book_paths import EncodedSlashes
from service.api.client_gone import DropWhenClientGone
from service.api.error_handlers import install_error_handlers
from service.api.guards import BodySizeLimit, Utf8Url
from service.api.metrics import GaugeReader, Metrics
from service.api.routes import (
    admin,
    admin_books,
    books,
    explain,
    health,
    page,
    recommend,
    redoc,
    search,
    suggest,
)
from service.api.telemetry import RequestTelemetry
from service.config.settings import ServiceSettings
from service.engine.explainer import Explainer
from service.engine.front import Front
from service.engine.notify import follow_generations
from service.engine.readiness import Readiness
from service.engine.reindex_jobs import ReindexJobs
from service.engine.reloader import freeze_long_lived, return_free_heap
from service.engine.searcher import Searcher
from service.engine.startup import (
    KeyPlacement,
    LocalPlacement,
    build_encoder,
    build_searcher,
    follow,
    index_settings,
)

logger = logging.getLogger(__name__)


def add_middleware(app: FastAPI, settings: ServiceSettings, metrics: Metrics) -> None:
    """Outermost first: telemetry (sees every request, refused ones too), the drop of work for
    clients that left (service/api/client_gone.py), CORS (only when origins are configured),
    then the guards (service/api/guards.py)."""
    app.add_middleware(
        BodySizeLimit,
        max_bytes=settings.max_body_bytes,
        prefix_limits={"/admin/": settings.max_upload_bytes},
    )
    app.add_middleware(EncodedSlashes)  # inside Utf8Url: the raw path is UTF-8 by then
    app.add_middleware(Utf8Url)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(DropWhenClientGone)
    app.add_middleware(RequestTelemetry, metrics=metrics)


def add_generation_gauges(app: FastAPI, metrics: Metrics) -> None:
    """The generation served, and the running (or last) re-index job's progress."""

    def served() -> int | None:
        return None if (searcher := _searcher(app)) is None else searcher.index.generation

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


def _searcher(app: FastAPI) -> Searcher | None:
    """The app's searcher, once the start-up has made it."""
    searcher: Searcher | None = getattr(app.state, "searcher", None)
    return searcher


def _catalog_size(app: FastAPI) -> int | None:
    return None if (searcher := _searcher(app)) is None else len(searcher.index)


def book_query_turns(settings: ServiceSettings) -> Turns:
    """Similar books', recommend's and explain's turns (service/api/admission.py)."""
    return Turns(
        "similar books, recommendations and explanations",
        running=settings.book_query_concurrency,
        waiting=settings.book_query_queue,
        on_idle=return_free_heap,
    )


def create_app(
    settings: ServiceSettings | None = None,
    *,
    encoder: Encoder | None = None,
    placement: KeyPlacement | None = None,
) -> FastAPI:
    """The app for `settings` (read from the environment when None). `encoder` replaces the
    configured model, for tests; `placement` where the keys are held: this process's device
    unless given (the Ray Serve router gives its shards')."""
    settings = settings or ServiceSettings()
    placement = placement or LocalPlacement(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_db_engine(settings.database_url)
        try:
            ensure_schema(engine, create_if_new=False)
            app.state.engine = engine
            model = encoder or build_encoder(settings)
            searcher = build_searcher(settings, engine=engine, encoder=model, placement=placement)
            watcher = follow(settings, placement, engine=engine, searcher=searcher)
            jobs = ReindexJobs(
                settings=index_settings(settings),
                engine=engine,
                encoder=model,
                on_success=watcher.check,
            )
            app.state.watcher, app.state.jobs = watcher, jobs
            # made here, in the event loop that awaits them
            app.state.book_queries, app.state.readiness = book_query_turns(settings), Readiness()
            searcher.start()
            stop_following = follow_generations(engine, watcher)
            app.state.searcher = searcher
            app.state.settings = settings
            app.state.front = Front(
                searcher=searcher,
                explainer=Explainer(searcher.encoder, scale=settings.scale),
                database=engine,
                book_heads=settings.similar,
                taste_heads=settings.recommend,
            )
            freeze_long_lived()
            try:
                yield
            finally:
                gc.unfreeze()

                def close() -> None:
                    stop_following()
                    jobs.close()
                    app.state.readiness.close()  # before the engine: a check may be under way
                    searcher.close()

                # joins of threads, off the event loop: the answers it still has to write (a
                # shutdown's 503s, service/api/client_gone.py) go out meanwhile
                await asyncio.to_thread(close)
        finally:
            engine.dispose()

    # FastAPI's own /docs and /redoc load their scripts from a CDN: blank pages offline;
    # /redoc is ours (routes/redoc.py), which keeps ReDoc's logo from its CDN too
    app = FastAPIOffline(
        redoc_url=None,
        # a redirect of /search/ to /search was built from the client's Host header: an open
        # redirect to any host (issue 50); a path with a slash too many is a 404 instead
        redirect_slashes=False,
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
    metrics.batch_sizes(lambda: None if (s := _searcher(app)) is None else dict(s.batch_counts))
    install_error_handlers(app)
    add_middleware(app, settings, metrics)
    # explain before books: /books/{id:path} would otherwise take /books/x/explain as the id
    for routes in (page, search, suggest, explain, recommend, books, health, redoc):
        app.include_router(routes.router)
    app.state.admin_token = settings.admin_token
    if settings.admin_token is not None:  # no token: the admin endpoints do not exist
        app.include_router(admin.router)
        app.include_router(admin_books.router)
    return app
