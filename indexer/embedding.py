"""Embedding a run's batches: the texts each batch plan still needs, turned into vectors, here or
(the same `Embedder` shape) on a Ray cluster by indexer/ray_embed.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from indexer.batches import BatchPlan
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
