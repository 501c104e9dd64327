"""Suggestions as a reader types."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import FrontDep
from service.api.suggest_schemas import SuggestParams, SuggestResponse

router = APIRouter(tags=["search"])


@router.get("/suggest")
async def suggest(params: Annotated[SuggestParams, Query()], front: FrontDep) -> SuggestResponse:
    """Titles and author names that complete what a reader has typed."""
    found = await front.suggest(params.q, params.k)
    return SuggestResponse.model_validate(found, from_attributes=True)
