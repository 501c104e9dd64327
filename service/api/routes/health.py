"""Liveness, readiness and metrics: what an orchestrator and Prometheus poll."""

from __future__ import annotations

from fastapi import APIRouter, Response
from sqlalchemy.exc import SQLAlchemyError

from indexer import db
from service.api.deps import IndexDep, LoadedSearcherDep, MetricsDep, StartedEngineDep, WatcherDep
from service.api.metrics import CONTENT_TYPE
from service.api.ops_schemas import Health, Ready
from service.engine.exceptions import NotReadyError

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz(index: IndexDep, watcher: WatcherDep) -> Health:
    """The process is up and holds the index in memory: which one (model, generation, the
    database's identity)."""
    return Health(
        status="ok",
        catalog_size=len(index),
        model=index.model,
        device=str(index.device),
        generation=index.generation,
        index_id=watcher.index_id if watcher is not None else None,
    )


@router.get(
    "/readyz",
    responses={
        503: {
            "description": "Not ready: no keys loaded, the database unreachable or not an "
            "Attend index at this schema, or not the database the keys were loaded from."
        }
    },
)
def readyz(searcher: LoadedSearcherDep, engine: StartedEngineDep, watcher: WatcherDep) -> Ready:
    """Ready to answer searches: the keys are loaded, and the database is the index they came
    from (its schema, its identity, the generation served), not merely a server answering."""
    if searcher is None or engine is None:
        raise NotReadyError("the index is still loading")
    if len(searcher.index) == 0:
        raise NotReadyError("the index holds no books yet: run `attend index CATALOG` first")
    try:
        db.check_sqlite_file(engine)  # a truncated file: pooled connections answer from cache
        revision, head = db.current_revision(engine), db.head_revision()
        if revision != head:  # a truncated or foreign file has no (or another) schema
            where = "has no Attend schema" if revision is None else f"is at revision {revision}"
            raise NotReadyError(f"the database {where}, this service needs {head}")
        problem = watcher.serving_problem() if watcher is not None else None
    except (SQLAlchemyError, db.DatabaseGoneError) as e:
        raise NotReadyError(f"the database does not answer ({type(e).__name__}: {e})") from e
    if problem is not None:
        raise NotReadyError(problem)
    return Ready(status="ready", catalog_size=len(searcher.index))


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format."}},
)
def metrics(metrics: MetricsDep) -> Response:
    """Prometheus metrics: requests and latency by route and status, search batch sizes,
    catalog size, index generation, re-index progress."""
    return Response(metrics.render(), media_type=CONTENT_TYPE)
