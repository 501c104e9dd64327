"""Search: ranked books with the attention weights behind the ranking."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool

from service.api.deps import FrontDep
from service.api.search_schemas import (
    ModelJSON,
    SearchBatchResponse,
    SearchParams,
    SearchRequest,
    SearchResponse,
    search_response,
)
from service.engine.results import SearchResult

router = APIRouter(tags=["search"])


@router.get("/search", response_model=SearchResponse)
async def search_get(params: Annotated[SearchParams, Query()], front: FrontDep) -> ModelJSON:
    """Rank the catalog for one query; each result carries its score and attention weight."""
    (result,) = await front.search([params.q], params.options())
    return ModelJSON(search_response(result))


@router.post("/search", response_model=SearchBatchResponse)
async def search_post(body: SearchRequest, front: FrontDep) -> ModelJSON:
    """Rank the catalog for several queries at once (one batched encoder and attention call)."""
    results = await front.search(body.queries, body.options())
    # in a worker thread: validating 64 responses takes about 14 ms, which every other request
    # waited for on the event loop; in a thread it yields the GIL to the loop every few ms
    return await run_in_threadpool(_batch_response, results)


def _batch_response(results: list[SearchResult]) -> ModelJSON:
    return ModelJSON(SearchBatchResponse(responses=[search_response(r) for r in results]))
