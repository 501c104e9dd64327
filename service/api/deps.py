"""Dependencies of the routes. The only module that reads app state.

The getters are `async def` although they never await: FastAPI runs a plain `def` dependency in
its thread pool, and that hand-off cost more per search (about 0.5 ms of CPU under load) than
reading an attribute."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from pydantic import SecretStr
from sqlalchemy import Engine

from service.api.admission import Turns, check_budget
from service.api.book_schemas import RecommendRequest
from service.api.error_handlers import AdminAuthError
from service.api.metrics import Metrics
from service.config.head_weights import recommend_heads
from service.config.settings import ServiceSettings
from service.engine.front import Front
from service.engine.readiness import Readiness
from service.engine.reindex_jobs import ReindexJobs
from service.engine.reloader import GenerationWatcher
from service.engine.searcher import Searcher
from service.engine.served_index import ServedIndex


async def get_loaded_searcher(request: Request) -> Searcher | None:
    """The searcher, or None before the start-up has loaded the index."""
    searcher: Searcher | None = getattr(request.app.state, "searcher", None)
    return searcher


async def get_started_engine(request: Request) -> Engine | None:
    """The database engine, or None before the start-up has made it."""
    engine: Engine | None = getattr(request.app.state, "engine", None)
    return engine


async def get_watcher(request: Request) -> GenerationWatcher | None:
    """What follows the database's generations, or None (not started, or not followed)."""
    watcher: GenerationWatcher | None = getattr(request.app.state, "watcher", None)
    return watcher


async def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


async def get_index(request: Request) -> ServedIndex:
    """The served index of the generation searches answer from now."""
    searcher: Searcher = request.app.state.searcher
    return searcher.index


async def get_front(request: Request) -> Front:
    front: Front = request.app.state.front
    return front


async def get_settings(request: Request) -> ServiceSettings:
    settings: ServiceSettings = request.app.state.settings
    return settings


async def get_readiness(request: Request) -> Readiness | None:
    """The database's readiness checks, or None before the start-up has made them."""
    readiness: Readiness | None = getattr(request.app.state, "readiness", None)
    return readiness


async def get_book_queries(request: Request) -> Turns:
    """The turns of the work with books as the query (similar books, recommend, explain)."""
    turns: Turns = request.app.state.book_queries
    return turns


async def take_book_query_turn(
    turns: Annotated[Turns, Depends(get_book_queries)],
) -> AsyncIterator[None]:
    """A turn of the book-as-query work, held while the route ranks and builds its answer (not
    while a slow client reads it); 429 with Retry-After when none is free to wait for."""
    async with turns.turn():
        yield


async def check_recommend_budget(body: RecommendRequest, settings: SettingsDep) -> None:
    """422 for a recommend request over ATTEND_BOOK_QUERY_BUDGET (liked books × k × heads).
    The body is the route's own (FastAPI parses it once for both)."""
    liked = len(dict.fromkeys(body.liked))  # as ranked: repeats count once
    default = recommend_heads(settings.similar, settings.recommend, liked)
    weights = body.head_weights() or default.weights
    check_budget(liked=liked, k=body.k, heads=len(weights), budget=settings.book_query_budget)


async def get_jobs(request: Request) -> ReindexJobs:
    jobs: ReindexJobs = request.app.state.jobs
    return jobs


async def require_admin(request: Request) -> None:
    """The admin API's bearer token: 401 without one, 403 for a wrong one."""
    token: SecretStr | None = request.app.state.admin_token
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if token is None or scheme.lower() != "bearer" or not given.strip():
        raise AdminAuthError(401, "this endpoint needs 'Authorization: Bearer <admin token>'")
    if not hmac.compare_digest(given.strip().encode(), token.get_secret_value().encode()):
        raise AdminAuthError(403, "wrong admin token")


IndexDep = Annotated[ServedIndex, Depends(get_index)]
LoadedSearcherDep = Annotated[Searcher | None, Depends(get_loaded_searcher)]
StartedEngineDep = Annotated[Engine | None, Depends(get_started_engine)]
WatcherDep = Annotated[GenerationWatcher | None, Depends(get_watcher)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
SettingsDep = Annotated[ServiceSettings, Depends(get_settings)]
FrontDep = Annotated[Front, Depends(get_front)]
JobsDep = Annotated[ReindexJobs, Depends(get_jobs)]
AdminDep = Depends(require_admin)
ReadinessDep = Annotated[Readiness | None, Depends(get_readiness)]
# in a route's `dependencies=[...]`: "function" scope ends the turn once the answer is built
BookQueryTurn = Depends(take_book_query_turn, scope="function")
RecommendBudget = Depends(check_recommend_budget)
