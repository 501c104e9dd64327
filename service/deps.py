"""Dependencies of the routes. The only module that reads app state."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from service.explainer import Explainer
from service.metrics import Metrics
from service.ranker import Ranker
from service.searcher import Searcher
from service.settings import ServiceSettings


def get_searcher(request: Request) -> Searcher:
    searcher: Searcher = request.app.state.searcher
    return searcher


def get_loaded_searcher(request: Request) -> Searcher | None:
    """The searcher, or None before the start-up has loaded the index."""
    searcher: Searcher | None = getattr(request.app.state, "searcher", None)
    return searcher


def get_started_engine(request: Request) -> Engine | None:
    """The database engine, or None before the start-up has made it."""
    engine: Engine | None = getattr(request.app.state, "engine", None)
    return engine


def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


def get_ranker(request: Request) -> Ranker:
    return get_searcher(request).ranker


def get_explainer(request: Request) -> Explainer:
    explainer: Explainer = request.app.state.explainer
    return explainer


def get_settings(request: Request) -> ServiceSettings:
    settings: ServiceSettings = request.app.state.settings
    return settings


def get_session(request: Request) -> Iterator[Session]:
    engine: Engine = request.app.state.engine
    with Session(engine) as session:
        yield session


SearcherDep = Annotated[Searcher, Depends(get_searcher)]
RankerDep = Annotated[Ranker, Depends(get_ranker)]
SessionDep = Annotated[Session, Depends(get_session)]
LoadedSearcherDep = Annotated[Searcher | None, Depends(get_loaded_searcher)]
StartedEngineDep = Annotated[Engine | None, Depends(get_started_engine)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
ExplainerDep = Annotated[Explainer, Depends(get_explainer)]
SettingsDep = Annotated[ServiceSettings, Depends(get_settings)]
