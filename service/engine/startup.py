"""Building the engine from settings: the encoder, the served index of the active generation
with its keys where a `KeyPlacement` holds them, the searcher, and what follows new
generations."""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from indexer import boilerplate_rows, loaded_index, store
from indexer.db import SchemaError
from indexer.loaded_index import IndexDiff, LoadedIndex
from indexer.settings import IndexSettings, StoreSettings
from models.defaults import user_cache_dir
from models.device import pick_device
from models.encoder import Encoder, SentenceTransformerEncoder
from models.keys import LocalKeys
from service.config.settings import ServiceSettings
from service.engine import served_form
from service.engine.reloader import GenerationWatcher, return_free_heap
from service.engine.searcher import Searcher
from service.engine.served_index import KeyStore, ServedIndex, row_moves

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


def load_index(session: Session, *, model: str, generation: int | None = None) -> LoadedIndex:
    """The keys of `generation` (default: the active one) for `model`. Refuses an index of
    another model."""
    index = loaded_index.load_index(session=session, model=model, generation=generation)
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


class KeyPlacement(Protocol):
    """Where a generation's keys are held: on this process's device (`LocalPlacement`), or on
    a cluster's shards (service/cluster/shards/placement.py). The engine asks it, at start-up
    and at each new generation; it never calls the engine back."""

    @property
    def incremental(self) -> bool:
        """True: a new generation's diff is folded into the keys served (they are here)."""
        ...

    def first(self, active: int | None) -> int | None:
        """The generation to serve at start-up, given the active one (None: none)."""
        ...

    def keys(self, index: LoadedIndex) -> KeyStore:
        """The keys of `index`, where this placement holds them."""
        ...

    def ready(self, generation: int) -> bool:
        """Whether `generation` can be served now (False: asked again at the next check)."""
        ...

    def served(self, generation: int | None) -> None:
        """`generation` serves now: what was held for the ones before it may go."""
        ...


class LocalPlacement:
    """The keys on this process's device (`settings.device`), diffs folded into them."""

    incremental = True

    def __init__(self, settings: ServiceSettings):
        self.settings = settings

    def first(self, active: int | None) -> int | None:
        return active

    def keys(self, index: LoadedIndex) -> LocalKeys:
        s = self.settings
        device = pick_device(s.device)
        return LocalKeys(index.keys, device=device, key_dtype=s.key_dtype, chunk_size=s.chunk_size)

    def ready(self, generation: int) -> bool:
        return True

    def served(self, generation: int | None) -> None:
        return None


def build_served(
    placement: KeyPlacement,
    index: LoadedIndex,
    session: Session,
    *,
    follows: tuple[ServedIndex, IndexDiff, np.ndarray] | None = None,
) -> ServedIndex:
    """The served index of `index`: its keys placed, the lexical head's descriptions and the
    books' subject headings read at its generation. `follows`: the served index `index` is a
    diff of, the diff, and where each row of `index` came from (indexer/loaded_index.py
    `diff_order`): the new index is the previous one's moved (served_index.ServedIndex), and
    only the changed books' descriptions and headings are read."""
    t0 = time.perf_counter()
    ids, generation = index.ids, index.generation
    moves, since = None, None
    if follows is not None:
        previous, diff, order = follows
        moves, since = (previous, row_moves(order, len(previous))), diff.since
        ids = [ids[r] for r in moves[1].changed.tolist()]
    extras = store.book_extras(session=session, book_ids=ids, generation=generation, since=since)
    descriptions = store.book_descriptions(
        session=session, book_ids=ids, generation=generation, since=since
    )
    boilerplate = boilerplate_rows.stored(session=session, generation=generation)
    served = ServedIndex(
        index,
        placement.keys(index),
        descriptions=descriptions,
        subjects=extras.subjects,
        series=extras.series,
        isbns=extras.isbns,
        ratings=extras.ratings,
        rating_counts=extras.rating_counts,
        publishers=extras.publishers,
        follows=moves,
        boilerplate=boilerplate,
    )
    logger.info(
        "generation %s: %d books, %s, served in %.2f s",
        generation,
        len(served),
        served.keys,
        time.perf_counter() - t0,
    )
    return served


def served_root(settings: ServiceSettings, engine: Engine) -> Path | None:
    """Where the served forms are (service/engine/served_form.py): `settings.served_dir`, by
    default beside a SQLite database file, else in Attend's cache folder; None for none (an
    empty setting, an in-memory database)."""
    if settings.served_dir is not None:
        return Path(settings.served_dir).expanduser() if settings.served_dir else None
    if engine.dialect.name == "sqlite":
        file = engine.url.database
        return None if not file or file == ":memory:" else Path(f"{file}.served")
    return user_cache_dir() / "served"


def load_served(
    placement: KeyPlacement, session: Session, *, model: str, forms: Path | None = None
) -> ServedIndex:
    """The served index of the generation `placement` serves first: from its served form under
    `forms` where there is one that is whole and the database's, else from the database (and
    its served form then written there)."""
    generation = placement.first(store.active_generation_id(session=session))
    stamp = None
    if forms is not None:
        stamp = served_form.stamp_of(session, generation=generation, model=model)
        if stamp is not None and (served := _from_form(placement, forms, stamp)) is not None:
            return served
    index = load_index(session, model=model, generation=generation)
    served = build_served(placement, index, session)
    if stamp is not None and forms is not None and len(index):
        served_form.write(forms, stamp, served.arrays(index.keys))
    return served


def _from_form(
    placement: KeyPlacement, forms: Path, stamp: served_form.Stamp
) -> ServedIndex | None:
    t0 = time.perf_counter()
    arrays = served_form.read(forms, stamp)
    if arrays is None:
        return None
    try:
        served = ServedIndex.from_arrays(
            arrays, placement.keys, model=stamp.model, generation=stamp.generation
        )
    except (ValueError, KeyError) as e:  # arrays that do not hold together, or one missing
        served_form.discard(forms, stamp, f"{type(e).__name__}: {e}")
        return None
    logger.info(
        "generation %s: %d books, %s, served from %s in %.2f s",
        stamp.generation,
        len(served),
        served.keys,
        forms / stamp.folder,
        time.perf_counter() - t0,
    )
    return served


def write_form(forms: Path, served: ServedIndex, engine: Engine) -> None:
    """The served form of `served`, a generation swapped in, written under `forms`: where its
    keys are in this process in float32, so exactly the database's (a cluster's router, or
    half-precision keys, write theirs at a start, from the rows read)."""
    keys = served.keys
    if not isinstance(keys, LocalKeys) or keys.dtype != torch.float32 or not len(served):
        return
    with Session(engine) as session:
        stamp = served_form.stamp_of(session, generation=served.generation, model=served.model)
    if stamp is not None:
        served_form.write(forms, stamp, served.arrays(keys.host()))


def follow(
    settings: ServiceSettings, placement: KeyPlacement, *, engine: Engine, searcher: Searcher
) -> GenerationWatcher:
    """What swaps the searcher to each new generation once `placement` has its keys, and
    writes each one's served form once it serves (the next start reads it)."""
    forms = served_root(settings, engine)

    def swapped(served: ServedIndex) -> None:
        placement.served(served.generation)
        if forms is not None:
            write_form(forms, served, engine)

    return GenerationWatcher(
        engine=engine,
        searcher=searcher,
        build=functools.partial(build_served, placement),
        poll_s=settings.generation_poll_s,
        ready=placement.ready,
        incremental=placement.incremental,
        on_swap=swapped,
    )


def build_searcher(
    settings: ServiceSettings,
    *,
    engine: Engine,
    encoder: Encoder | None = None,
    placement: KeyPlacement | None = None,
) -> Searcher:
    """The encoder (the configured model unless one is given) and the first generation's
    index, its keys placed by `placement` (this process's device unless given), ready to
    search."""
    encoder = encoder or build_encoder(settings)
    forms = served_root(settings, engine)
    with Session(engine) as session:
        index = load_served(
            placement or LocalPlacement(settings), session, model=encoder.name, forms=forms
        )
    # what the load freed (the rows read, the descriptions, the BM25 builds' tokens) back to
    # the OS: glibc kept ~100 MiB of it at 100,000 books, in the resident memory for good
    return_free_heap()
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
        similar=settings.similar,
        min_match_cosine=settings.min_match_cosine,
    )


def index_settings(settings: ServiceSettings) -> IndexSettings:
    """What an admin re-index runs with: every setting the two share from the app's settings
    object (the database, the model and its encoder, a run's batch size, row and delete bounds,
    catalog columns), none read again from the environment; it embeds in this process."""
    shared = IndexSettings.model_fields.keys() & ServiceSettings.model_fields.keys()
    return IndexSettings(**{name: getattr(settings, name) for name in sorted(shared)})
