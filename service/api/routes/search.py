"""Search: ranked books with the attention weights behind the ranking."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import SearcherDep
from service.api.search_schemas import (
    SearchBatchResponse,
    SearchParams,
    SearchRequest,
    SearchResponse,
    search_response,
)

router = APIRouter(tags=["search"])


@router.get("/search")
async def search_get(
    params: Annotated[SearchParams, Query()], searcher: SearcherDep
) -> SearchResponse:
    """Rank the catalog for one query; each result carries its score and attention weight."""
    (result,) = await searcher.search([params.q], params.options())
    return search_response(result)


@router.post("/search")
async def search_post(body: SearchRequest, searcher: SearcherDep) -> SearchBatchResponse:
    """Rank the catalog for several queries at once (one batched encoder and attention call)."""
    results = await searcher.search(body.queries, body.options())
    return SearchBatchResponse(responses=[search_response(r) for r in results])
