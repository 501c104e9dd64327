"""Liveness, readiness and metrics: what an orchestrator and Prometheus poll.

All three are `async def` and read memory, so no load on the routes' thread pool delays them:
as plain `def` routes they queued there behind 60 clients' /recommend requests (`/healthz` 5.7 s
against 2 ms idle; issue 25, finding 6). /readyz's database checks run on a thread of their own
(service/engine/readiness.py)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from service.api.deps import (
    IndexDep,
    LoadedSearcherDep,
    MetricsDep,
    ReadinessDep,
    StartedEngineDep,
    WatcherDep,
)
from service.api.metrics import CONTENT_TYPE
from service.api.ops_schemas import Health, Ready
from service.engine.exceptions import NotReadyError

router = APIRouter(tags=["health"])


@router.get("/healthz")
@router.head("/healthz", include_in_schema=False)  # what many probes send
async def healthz(index: IndexDep, watcher: WatcherDep) -> Health:
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


@router.head("/readyz", include_in_schema=False)
@router.get(
    "/readyz",
    responses={
        503: {
            "description": "Not ready: no keys loaded, the database unreachable or not an "
            "Attend index at this schema, not the database the keys were loaded from, or a "
            "shard that does not answer."
        }
    },
)
async def readyz(
    searcher: LoadedSearcherDep,
    engine: StartedEngineDep,
    watcher: WatcherDep,
    readiness: ReadinessDep,
) -> Ready:
    """Ready to answer searches: the keys are loaded, the database is the index they came from
    (its schema, its identity, the generation served), not merely a server answering, and with
    the ray engine every shard answers."""
    if searcher is None or engine is None or readiness is None:
        raise NotReadyError("the index is still loading")
    if len(searcher.index) == 0:
        raise NotReadyError("the index holds no books yet: run `attend index CATALOG` first")
    if (problem := await readiness.problem(engine, watcher, searcher.index.keys)) is not None:
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
    # a plain def: FastAPI runs it on its thread pool, so a scrape (every gauge read, the text
    # rendered) never holds the event loop that answers the other requests
    return Response(metrics.render(), media_type=CONTENT_TYPE)
