"""Embedding a run's batches: the texts each batch plan still needs, turned into vectors, here or
(the same `Embedder` shape) on a Ray cluster by indexer/ray_embed.py; and the encoder of a run,
loaded at its first text (`LazyEncoder`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from indexer.batches import BatchPlan
from indexer.schema import Vector

if TYPE_CHECKING:  # torch loads with the model: a run with nothing to embed never needs it
    from torch import Tensor

    from models.encoder import Encoder


def embed(texts: dict[str, str], encoder: Encoder) -> dict[str, np.ndarray]:
    """content hash → vector (d,) for each text, in one encoder call."""
    if not texts:
        return {}
    vectors = encoder.encode(list(texts.values())).numpy()  # (n, d)
    return dict(zip(texts, vectors, strict=True))


# Plans in; out, in the same order, each plan with a vector for every text of its `to_embed`
# and how many of those were embedded for it (a text two plans share is embedded once):
# `local_embedder` here, or indexer/ray_embed.py's on a Ray cluster.
Embedder = Callable[[Iterator[BatchPlan]], Iterator[tuple[BatchPlan, dict[str, np.ndarray], int]]]


def local_embedder(encoder: Encoder) -> Embedder:
    """Each batch's texts in one call of `encoder`, in this process."""

    def run(plans: Iterator[BatchPlan]) -> Iterator[tuple[BatchPlan, dict[str, np.ndarray], int]]:
        for plan in plans:
            vectors = embed(plan.to_embed, encoder)
            yield plan, vectors, len(vectors)

    return run


class LazyEncoder:
    """An encoder built by `build` at the first text it must embed, so a re-index that finds
    every text embedded already never loads the model: on the shared catalog a no-op
    `attend index` spent 12 of its 26 s loading an encoder it never called. `name` is the
    model's name, known without loading it (the hashes and the generation record it)."""

    def __init__(self, name: str, build: Callable[[], Encoder]):
        self.name = name
        self._build = build
        self._encoder: Encoder | None = None
        self._lock = threading.Lock()  # a run's embedder may call from a thread of its own

    @property
    def loaded(self) -> bool:
        """Whether the model was built (a text was embedded, or `dim` asked)."""
        return self._encoder is not None

    @property
    def encoder(self) -> Encoder:
        """The model, built now if it was not yet."""
        with self._lock:
            if self._encoder is None:
                encoder = self._build()
                if encoder.name != self.name:
                    raise ValueError(f"built encoder {encoder.name!r}, expected {self.name!r}")
                self._encoder = encoder
            return self._encoder

    @property
    def dim(self) -> int:
        return self.encoder.dim

    def encode(self, texts: list[str]) -> Tensor:
        return self.encoder.encode(texts)


def indexed_dim(session: Session, encoder: Encoder) -> int:
    """The width of `encoder`'s vectors, for the run's metadata: a stored vector's when the
    encoder is lazy and was never loaded (a no-op run), so asking does not load it."""
    if isinstance(encoder, LazyEncoder) and not encoder.loaded:
        stored = session.scalar(select(Vector.dim).where(Vector.model == encoder.name).limit(1))
        if stored is not None:
            return stored
    return encoder.dim
