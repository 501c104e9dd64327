"""Attend on Ray Serve (`attend serve --engine ray --shards S`): keys beyond one device.

    HTTP → Router (the FastAPI app: encodes the queries, batches them, merges)
             ├─ shard-0 (rows 0 … N/S, replicas for load)   ─┐ each: per dense head top-k,
             ├─ shard-1                                       ├ log-sum-exp, matched; scores
             └─ …                                            ─┘ and entropy parts; global rows

Every shard replica loads its contiguous slice of the index from the database (every field's
keys) and answers the dense heads' operations for it (service/sharded.py), building masks from
the filters itself; the router holds the books (ids, titles, … for the responses) and the whole
catalog's BM25 index but no keys, and merges the shards' answers exactly (models/sharded.py),
so a search is the single-process mixture of heads. The router serves the same app as `attend
serve`, so routes, errors and request batching are the single-process ones. Needs the extra:
`pip install "attend[ray]"`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any, Generic, TypeVar, cast

import ray
from fastapi import FastAPI
from ray import serve
from ray.serve.handle import DeploymentHandle, DeploymentResponse
from sqlalchemy.orm import Session
from torch import Tensor

from indexer import store
from indexer.db import SchemaError, create_db_engine
from models.sharded import ShardAnswer, SparseScores
from service.errors import ShardsOutOfStepError
from service.main import create_app
from service.ranker import Filters, Ranker
from service.settings import ServiceSettings
from service.sharded import Fields, Shard, ShardedRanker

logger = logging.getLogger(__name__)

T = TypeVar("T")

APP_NAME = "attend"


@serve.deployment
class ShardDeployment:
    """One shard of the keys, on the replica's device (a GPU when Ray gave it one)."""

    def __init__(self, settings: ServiceSettings, shard: int, shards: int) -> None:
        engine = create_db_engine(settings.database_url)
        try:
            with Session(engine) as session:
                index = store.load_index(session=session, model=settings.model)
        finally:
            engine.dispose()
        self.shard = Shard(
            index,
            shard=shard,
            shards=shards,
            device=settings.device,
            key_dtype=settings.key_dtype,
            chunk_size=settings.chunk_size,
        )

    # async, computing inline: a replica answers one search at a time (torch uses its cores);
    # more replicas, not threads, serve more load.
    async def describe(self) -> tuple[int, int, int]:
        """(start, stop, total): the rows this shard holds, of how many."""
        return self.shard.start, self.shard.stop, self.shard.total

    async def top(
        self, q: Tensor, heads: list[tuple[str, float]], k: int, filters: list[Filters]
    ) -> tuple[list[ShardAnswer], int]:
        """Per dense head this shard's top-k and log-sum-exp, and the catalog size it was
        loaded with (as every answer here)."""
        return self.shard.top(q, heads=heads, k=k, filters=filters), self.shard.total

    async def scores(
        self, q: Tensor, heads: list[tuple[str, float]], cand: Tensor
    ) -> tuple[Tensor, int]:
        """The raw scores of the candidates in this shard (0 for the others)."""
        return self.shard.scores(q, heads=heads, cand=cand), self.shard.total

    async def sweep(
        self,
        q: Tensor,
        *,
        heads: list[tuple[str, float]],
        filters: list[Filters],
        pi: Tensor,
        lse: Tensor,
        cand: Tensor,
        scored: list[SparseScores],
    ) -> tuple[tuple[Tensor, Tensor], int]:
        """The candidates' scores and this shard's part of the mixture's entropy."""
        swept = self.shard.sweep(
            q, heads=heads, filters=filters, pi=pi, lse=lse, cand=cand, scored=scored
        )
        return swept, self.shard.total


class _Reply(Generic[T]):
    """A shard's answer on its way, checked against the catalog size the router holds."""

    def __init__(self, response: DeploymentResponse[Any], total: int, name: str, kind: type):
        self.response, self.total, self.name, self.kind = response, total, name, kind

    def result(self) -> T:
        answer, total = self.response.result()
        if total != self.total:
            raise ShardsOutOfStepError(
                f"{self.name} holds {total} books, the router {self.total}: the index changed "
                "under the deployment; restart it"
            )
        if not isinstance(answer, self.kind):
            raise TypeError(f"{self.name} answered {type(answer).__name__}, not {self.kind}")
        return cast(T, answer)


class RayShard:
    """The router's `ShardClient` for one shard deployment (any of its replicas), rows
    [start, stop) of a catalog of `total` books."""

    def __init__(
        self, handle: DeploymentHandle[Any], *, total: int, name: str, start: int, stop: int
    ):
        self.handle, self.total, self.name = handle, total, name
        self.start, self.stop = start, stop

    def submit_top(
        self, q: Tensor, *, heads: Fields, k: int, filters: Sequence[Filters]
    ) -> _Reply[list[ShardAnswer]]:
        response = self.handle.top.remote(q, list(heads), k, list(filters))
        return self._reply(response, list)

    def submit_scores(self, q: Tensor, *, heads: Fields, cand: Tensor) -> _Reply[Tensor]:
        return self._reply(self.handle.scores.remote(q, list(heads), cand), Tensor)

    def submit_sweep(
        self,
        q: Tensor,
        *,
        heads: Fields,
        filters: Sequence[Filters],
        pi: Tensor,
        lse: Tensor,
        cand: Tensor,
        scored: list[SparseScores],
    ) -> _Reply[tuple[Tensor, Tensor]]:
        response = self.handle.sweep.remote(
            q,
            heads=list(heads),
            filters=list(filters),
            pi=pi,
            lse=lse,
            cand=cand,
            scored=scored,
        )
        return self._reply(response, tuple)

    def _reply(self, response: Any, kind: type) -> _Reply[Any]:
        return _Reply(cast(DeploymentResponse[Any], response), self.total, self.name, kind)


@serve.deployment
@serve.ingress()
class Router:
    """The HTTP entry: the app of `attend serve`, ranking through the shards."""

    # Ray Serve awaits an async constructor: the shards are asked here, off the lifespan.
    async def __init__(  # type: ignore[misc]
        self, settings: ServiceSettings, shards: list[DeploymentHandle[Any]]
    ) -> None:
        self.settings = settings
        self.shards = shards
        layout = await asyncio.gather(*(h.describe.remote() for h in shards))
        self.layout: list[tuple[int, int, int]] = list(layout)
        totals = {total for _, _, total in layout}
        if len(totals) != 1:
            raise SchemaError(f"the shards loaded different indexes: {layout}")
        self.total = totals.pop()
        logger.info("router: %d shards over %d books: %s", len(shards), self.total, layout)

    def load_ranker(self, settings: ServiceSettings, *, session: Session, model: str) -> Ranker:
        index = store.load_index(session=session, model=model)
        if len(index) != self.total:
            raise SchemaError(
                f"the shards hold {self.total} books, the database now {len(index)} "
                "(a re-index in between): redeploy"
            )
        shards = [
            RayShard(h, total=self.total, name=f"shard-{i}", start=start, stop=stop)
            for i, (h, (start, stop, _)) in enumerate(zip(self.shards, self.layout, strict=True))
        ]
        # the lexical head's BM25 is the router's, over the whole catalog (global IDF)
        descriptions = store.book_descriptions(
            session=session, book_ids=index.ids, generation=index.generation
        )
        return ShardedRanker(index, shards, descriptions=descriptions)

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(self.settings, ranker_loader=self.load_ranker)


def build_app(settings: ServiceSettings, *, gpus: bool = False) -> serve.Application:
    """The deployment graph: `settings.shards` shard deployments of `settings.shard_replicas`
    replicas each (one GPU per replica when `gpus`), and the router."""
    shard_options: dict[str, Any] = {"num_cpus": 1, "num_gpus": 1 if gpus else 0}
    shards = [
        ShardDeployment.options(  # type: ignore[attr-defined]
            name=f"shard-{i}",
            num_replicas=settings.shard_replicas,
            ray_actor_options=shard_options,
        ).bind(settings, i, settings.shards)
        for i in range(settings.shards)
    ]
    return Router.options(ray_actor_options={"num_cpus": 1}).bind(settings, shards)  # type: ignore[attr-defined, no-any-return]


def serve_forever(settings: ServiceSettings) -> None:
    """Start (or join, with `ray_address`) Ray, deploy, and serve HTTP until SIGINT/SIGTERM."""
    replicas = settings.shards * settings.shard_replicas + 1
    if settings.ray_address:
        ray.init(address=settings.ray_address)
    else:  # a local Ray; logical CPUs enough for every replica (they share the real ones)
        ray.init(num_cpus=max(os.cpu_count() or 1, replicas + 1), include_dashboard=False)
    stop = False

    def _stop(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        gpus = resources.get("GPU", 0) >= settings.shards * settings.shard_replicas
        serve.start(http_options={"host": settings.host, "port": settings.port})
        t0 = time.perf_counter()
        serve.run(build_app(settings, gpus=gpus), name=APP_NAME, route_prefix="/")
        logger.info(
            "serving %d shards × %d replicas (%s) on http://%s:%d, deployed in %.1f s",
            settings.shards,
            settings.shard_replicas,
            "GPU" if gpus else "CPU",
            settings.host,
            settings.port,
            time.perf_counter() - t0,
        )
        while not stop:
            time.sleep(0.2)
    finally:
        if settings.ray_address:  # a shared cluster: take down only this application
            serve.delete(APP_NAME)
        else:
            serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
