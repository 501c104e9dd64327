"""Search: ranked books with the attention weights behind the ranking."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.deps import SearcherDep
from service.schemas import SearchBatchResponse, SearchParams, SearchRequest, SearchResponse

router = APIRouter(tags=["search"])


@router.get("/search")
async def search_get(
    params: Annotated[SearchParams, Query()], searcher: SearcherDep
) -> SearchResponse:
    """Rank the catalog for one query; each result carries its score and attention weight."""
    return (await searcher.search([params.q], params))[0]


@router.post("/search")
async def search_post(body: SearchRequest, searcher: SearcherDep) -> SearchBatchResponse:
    """Rank the catalog for several queries at once (one batched encoder and attention call)."""
    return SearchBatchResponse(responses=await searcher.search(body.queries, body))
