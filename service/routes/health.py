"""Liveness, readiness and metrics: what an orchestrator and Prometheus poll."""

from __future__ import annotations

from fastapi import APIRouter, Response
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from service.deps import LoadedSearcherDep, MetricsDep, RankerDep, StartedEngineDep
from service.errors import NotReadyError
from service.metrics import CONTENT_TYPE
from service.schemas import Health, Ready

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz(ranker: RankerDep) -> Health:
    """The process is up and holds the index in memory."""
    return Health(
        status="ok",
        catalog_size=len(ranker),
        model=ranker.model,
        device=str(ranker.device),
        generation=ranker.generation,
    )


@router.get(
    "/readyz",
    responses={503: {"description": "Not ready: no keys loaded, or the database is unreachable."}},
)
def readyz(searcher: LoadedSearcherDep, engine: StartedEngineDep) -> Ready:
    """Ready to answer searches: the index's keys are loaded and the database answers."""
    if searcher is None or engine is None:
        raise NotReadyError("the index is still loading")
    if len(searcher.ranker) == 0:
        raise NotReadyError("the index holds no books yet: run `attend index CATALOG` first")
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as e:
        raise NotReadyError(f"the database does not answer ({type(e).__name__})") from e
    return Ready(status="ready", catalog_size=len(searcher.ranker))


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format."}},
)
def metrics(metrics: MetricsDep) -> Response:
    """Prometheus metrics: requests and latency by route and status, search batch sizes,
    catalog size, index generation, re-index progress."""
    return Response(metrics.render(), media_type=CONTENT_TYPE)
