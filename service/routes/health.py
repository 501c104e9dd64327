"""Liveness."""

from __future__ import annotations

from fastapi import APIRouter

from service.deps import RankerDep
from service.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz(ranker: RankerDep) -> Health:
    """The process is up and holds the index in memory."""
    return Health(
        status="ok", catalog_size=len(ranker), model=ranker.model, device=str(ranker.device)
    )
