"""`attend index --engine ray`: the encoder calls of a run go to a Ray cluster.

    catalog → plan each batch (driver: which texts have no stored vector, indexer/batches.py)
      → a window of batches' texts, deduplicated by content hash → ray.data.from_items
      → map_batches(EncodeTexts, concurrency=workers)   one actor per GPU (num_gpus=1) when the
                                                          cluster has GPUs, CPU actors otherwise
      → vectors by hash → each batch written by the driver with the same store code, one
        transaction per batch, into the building generation (crash-safe, resumable)

Only the books that need embedding travel (the same incremental plan as a local run), and the
result is the local run's: same books, same vectors up to float noise. Needs the extra:
`pip install "attend[ray]"`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import islice
from typing import Any

import numpy as np
import ray

from indexer.batches import BatchPlan
from indexer.settings import IndexSettings
from models.encoder import SentenceTransformerEncoder

logger = logging.getLogger(__name__)

WINDOW_BATCHES = 64  # batches planned and embedded together: one Ray Data run each


class EncodeTexts:
    """A Ray Data actor: loads the model once, then embeds batches of texts."""

    def __init__(self, model: str, device: str, batch_size: int, backend: str, cache_dir: str):
        self.encoder = SentenceTransformerEncoder(
            model,
            device=device,
            batch_size=batch_size,
            backend="onnx" if backend == "onnx" else "torch",
            cache_dir=cache_dir,
        )

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        vectors = self.encoder.encode([str(t) for t in batch["text"]]).numpy()  # (n, d)
        return {"hash": batch["hash"], "vector": vectors}


@contextmanager
def ray_session(address: str | None, *, num_cpus: int | None = None) -> Iterator[None]:
    """Ray for the run: the cluster at `address`, or a local Ray started (and stopped) here
    with `num_cpus` logical CPUs (default: this machine's)."""
    t0 = time.perf_counter()
    if address:
        ray.init(address=address)
    else:
        ray.init(num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    logger.info("ray ready in %.1f s: %s", time.perf_counter() - t0, ray.cluster_resources())  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        ray.shutdown()


def pool(workers: int) -> tuple[int, dict[str, Any]]:
    """How many encoder actors, and each one's resources: one GPU each when the cluster has
    GPUs (as many actors as GPUs unless `workers` says), else an equal share of the CPUs."""
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 1))
    if gpus:
        n = workers or gpus
        return n, {"num_gpus": 1, "num_cpus": 1}
    n = workers or 1
    return n, {"num_gpus": 0, "num_cpus": max(1, cpus // n)}


def embed_plans(
    plans: Iterable[BatchPlan], settings: IndexSettings, *, model: str, workers: int = 0
) -> Iterator[tuple[BatchPlan, dict[str, np.ndarray], int]]:
    """Each plan, in order, with a vector for every text of its `to_embed`, embedded on Ray,
    and how many texts were embedded for it."""
    n, resources = pool(workers)
    device = "cuda" if resources["num_gpus"] else "cpu"
    logger.info("embedding on %d Ray actor(s) %s", n, resources)
    it = iter(plans)
    while window := list(islice(it, WINDOW_BATCHES)):
        texts = {h: t for plan in window for h, t in plan.to_embed.items()}
        vectors: dict[str, np.ndarray] = {}
        if texts:
            items = ray.data.from_items([{"hash": h, "text": t} for h, t in texts.items()])
            ds = items.map_batches(
                EncodeTexts,
                fn_constructor_kwargs={
                    "model": model,
                    "device": device,
                    "batch_size": settings.encode_batch_size,
                    "backend": settings.encoder_backend,  # auto: torch, for batches
                    "cache_dir": str(settings.onnx_cache_dir),
                },
                batch_size=settings.encode_batch_size,
                concurrency=n,
                batch_format="numpy",
                **resources,
            )
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                vectors.update(zip(batch["hash"].tolist(), batch["vector"], strict=True))
        given: set[str] = set()  # a text two plans of the window share counts for the first
        for plan in window:
            new = set(plan.to_embed) - given
            given |= new
            yield plan, {h: vectors[h] for h in plan.to_embed}, len(new)
