"""Building the engine from settings: the encoder, the served index of the active generation,
the searcher, and what follows new generations (`IndexSource`)."""

from __future__ import annotations

import logging
from typing import Protocol

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from indexer import loaded_index, store
from indexer.db import SchemaError
from indexer.loaded_index import LoadedIndex
from indexer.settings import IndexSettings, StoreSettings
from models.device import pick_device
from models.encoder import Encoder, SentenceTransformerEncoder
from service.engine.reloader import GenerationWatcher
from service.engine.searcher import Searcher
from service.engine.served_index import ServedIndex
from service.settings import ServiceSettings

logger = logging.getLogger(__name__)


def build_encoder(settings: StoreSettings) -> Encoder:
    device = pick_device(settings.device).type
    return SentenceTransformerEncoder(
        settings.model,
        device=device,
        batch_size=settings.encode_batch_size,
        backend=settings.backend(device),
        cache_dir=settings.onnx_cache_dir,
    )


def load_index(session: Session, *, model: str) -> LoadedIndex:
    """The active generation's keys for `model`. Refuses an index of another model."""
    index = loaded_index.load_index(session=session, model=model)
    total = store.count_books(session=session, generation=index.generation)
    if total and not len(index):
        active = store.active_generation(session=session)
        built_with = active.model if active else None
        raise SchemaError(
            f"the index holds {total} books but none embedded with model {model!r} (it was built "
            f"with {built_with!r}): set ATTEND_MODEL to that model, or re-run `attend index`"
        )
    if total > len(index):
        logger.warning(
            "%d of %d books have no vectors for model %s and cannot be found; "
            "re-run `attend index`",
            total - len(index),
            total,
            model,
        )
    return index


class IndexSource(Protocol):
    """Where a service's index comes from: the first one, and what follows new generations
    (None: nothing does). `LocalIndexSource`, or the Ray router (service/cluster/ray_serve.py)."""

    def load(self, *, session: Session, model: str) -> ServedIndex: ...

    def follow(self, *, engine: Engine, searcher: Searcher) -> GenerationWatcher | None: ...


class LocalIndexSource:
    """The index in this process: keys on `settings.device`, reloaded by diff."""

    def __init__(self, settings: ServiceSettings):
        self.settings = settings

    def build(self, index: LoadedIndex, session: Session) -> ServedIndex:
        """The served index of `index` (the lexical head's descriptions and the books' subject
        headings read at its generation)."""
        ids, generation = index.ids, index.generation
        return ServedIndex.local(
            index,
            device=self.settings.device,
            key_dtype=self.settings.key_dtype,
            chunk_size=self.settings.chunk_size,
            descriptions=store.book_descriptions(
                session=session, book_ids=ids, generation=generation
            ),
            subjects=store.book_subjects(session=session, book_ids=ids, generation=generation),
        )

    def load(self, *, session: Session, model: str) -> ServedIndex:
        return self.build(load_index(session, model=model), session)

    def follow(self, *, engine: Engine, searcher: Searcher) -> GenerationWatcher:
        return GenerationWatcher(
            engine=engine,
            searcher=searcher,
            build=self.build,
            poll_s=self.settings.generation_poll_s,
        )


def build_searcher(
    settings: ServiceSettings,
    *,
    engine: Engine,
    encoder: Encoder | None = None,
    source: IndexSource | None = None,
) -> Searcher:
    """The encoder (the configured model unless one is given) and the active generation's
    index, ready to search."""
    encoder = encoder or build_encoder(settings)
    source = source or LocalIndexSource(settings)
    with Session(engine) as session:
        index = source.load(session=session, model=encoder.name)
    return searcher_of(settings, encoder, index)


def searcher_of(settings: ServiceSettings, encoder: Encoder, index: ServedIndex) -> Searcher:
    """The searcher of `index`, with every value of the settings'."""
    return Searcher(
        encoder,
        index,
        scales=settings.scales,
        heads=settings.default_heads,
        window_ms=settings.batch_window_ms,
        max_batch=settings.max_batch,
        cache_size=settings.query_cache_size,
        batch_budget_ms=settings.batch_budget_ms,
    )


def index_settings(settings: ServiceSettings) -> IndexSettings:
    """What an admin re-index runs with: the service's database and model."""
    return IndexSettings(
        database_url=settings.database_url,
        model=settings.model,
        device=settings.device,
        encode_batch_size=settings.encode_batch_size,
    )
