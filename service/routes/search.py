"""Search: ranked books with the attention weights behind the ranking."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.deps import EncoderDep, RankerDep, SettingsDep
from service.schemas import SearchBatchResponse, SearchParams, SearchRequest, SearchResponse
from service.search import search

router = APIRouter(tags=["search"])


@router.get("/search")
def search_get(
    params: Annotated[SearchParams, Query()],
    encoder: EncoderDep,
    ranker: RankerDep,
    settings: SettingsDep,
) -> SearchResponse:
    """Rank the catalog for one query; each result carries its score and attention weight."""
    return search([params.q], params, encoder=encoder, ranker=ranker, scale=settings.scale)[0]


@router.post("/search")
def search_post(
    body: SearchRequest, encoder: EncoderDep, ranker: RankerDep, settings: SettingsDep
) -> SearchBatchResponse:
    """Rank the catalog for several queries at once (one batched encoder and attention call)."""
    responses = search(body.queries, body, encoder=encoder, ranker=ranker, scale=settings.scale)
    return SearchBatchResponse(responses=responses)
