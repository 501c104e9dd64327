"""Dependencies of the routes. The only module that reads app state."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from models.encoder import Encoder
from service.ranker import Ranker
from service.settings import ServiceSettings


def get_settings(request: Request) -> ServiceSettings:
    settings: ServiceSettings = request.app.state.settings
    return settings


def get_ranker(request: Request) -> Ranker:
    ranker: Ranker = request.app.state.ranker
    return ranker


def get_encoder(request: Request) -> Encoder:
    encoder: Encoder = request.app.state.encoder
    return encoder


def get_session(request: Request) -> Iterator[Session]:
    engine: Engine = request.app.state.engine
    with Session(engine) as session:
        yield session


SettingsDep = Annotated[ServiceSettings, Depends(get_settings)]
RankerDep = Annotated[Ranker, Depends(get_ranker)]
EncoderDep = Annotated[Encoder, Depends(get_encoder)]
SessionDep = Annotated[Session, Depends(get_session)]
