"""Attend on Ray Serve (`attend serve --engine ray --shards S`): keys beyond one device.

    HTTP → Router (the FastAPI app: encodes the queries, batches them, merges)
             ├─ shard-0 (rows 0 … N/S, replicas for load)   ─┐ each: per dense head top-k,
             ├─ shard-1                                       ├ log-sum-exp, matched; scores
             └─ …                                            ─┘ and entropy parts; global rows

Every shard replica loads its contiguous slice of the index from the database (every field's
keys), and of each newly activated generation beside it, and answers the dense heads' operations
for it (service/cluster/deployments.py), building masks from the filters itself. The router
serves the same app as `attend serve`, with a `ServedIndex` whose keys are the shards'
(service/cluster/router.py): it holds the books and the whole catalog's BM25 index but no keys,
and merges the shards' answers exactly (models/shard_merge.py), so a search is the
single-process mixture of heads, and routes, errors and request batching are the single-process
ones. Every shard call names the generation the router serves; the router switches to a new one
only once every shard holds it, so no answer mixes two. Needs the extra:
`pip install "attend[ray]"`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import Any, cast

import ray
from fastapi import FastAPI
from ray import serve
from ray.serve.handle import DeploymentHandle
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from indexer import store
from indexer.db import SchemaError
from indexer.store import LoadedIndex
from models.shard_merge import split
from service.api.main import create_app
from service.cluster.deployments import NO_INDEX, RayShard, ShardDeployment
from service.cluster.router import sharded_index
from service.engine.reloader import GenerationWatcher
from service.engine.searcher import Searcher
from service.engine.served_index import ServedIndex
from service.settings import ServiceSettings

logger = logging.getLogger(__name__)

APP_NAME = "attend"


Layout = dict[int, tuple[int, int, int]]  # a shard's describe(): generation → (start, stop, total)


@serve.deployment
@serve.ingress()
class Router:
    """The HTTP entry: the app of `attend serve`, ranking through the shards. It follows new
    generations with a `GenerationWatcher` that switches only once every shard holds the new
    one (`ready`), so a search is answered by one generation throughout; a few seconds after
    a switch the shards drop the generations loaded before it."""

    # Ray Serve awaits an async constructor: the shards are asked here, off the lifespan.
    async def __init__(  # type: ignore[misc]
        self, settings: ServiceSettings, shards: list[DeploymentHandle[Any]]
    ) -> None:
        self.settings = settings
        self.shards = shards
        self.layouts: list[Layout] = list(
            await asyncio.gather(*(h.describe.remote() for h in shards))
        )
        common = set.intersection(*(set(layout) for layout in self.layouts))
        if not common:
            raise SchemaError(f"the shards hold no generation in common: {self.layouts}")
        logger.info("router: %d shards: %s", len(shards), self.layouts)

    def load(self, *, session: Session, model: str) -> ServedIndex:
        """The active generation's index if every shard holds it, else the newest they all
        hold (the watcher switches later). Runs on the event loop: no shard asked here."""
        common = set.intersection(*(set(layout) for layout in self.layouts))
        active = store.active_generation_id(session=session) or NO_INDEX
        g = active if active in common else max(common)
        index = store.load_index(session=session, model=model, generation=g or None)
        return self._build(index, session)

    def _build(self, index: LoadedIndex, session: Session) -> ServedIndex:
        g = index.generation or NO_INDEX
        want = split(len(index), len(self.shards))
        shards = []
        for i, (handle, layout, (start, stop)) in enumerate(
            zip(self.shards, self.layouts, want, strict=True)
        ):
            if layout.get(g, (start, stop, len(index))) != (start, stop, len(index)):
                raise SchemaError(
                    f"shard-{i} holds {layout[g]} of generation {g}, not {start, stop}"
                )
            shards.append(RayShard(handle, generation=g, name=f"shard-{i}", start=start, stop=stop))
        # the lexical head's BM25 is the router's, over the whole catalog (global IDF)
        ids, generation = index.ids, index.generation
        return sharded_index(
            index,
            shards,
            descriptions=store.book_descriptions(
                session=session, book_ids=ids, generation=generation
            ),
            subjects=store.book_subjects(session=session, book_ids=ids, generation=generation),
        )

    def _ready(self, generation: int) -> bool:
        """Every shard holds `generation` (asked off the event loop: the watcher's thread).
        A handle reaches one replica a call: with R > 1 replicas each shard is asked 4R times,
        so every replica most likely answered (not surely: one that has not loaded it yet
        answers 503 until it has)."""
        asks = 1 if self.settings.shard_replicas == 1 else 4 * self.settings.shard_replicas
        replies = [[h.describe.remote() for _ in range(asks)] for h in self.shards]
        layouts = [[cast(Layout, r.result(timeout_s=30)) for r in rs] for rs in replies]
        if not all(generation in layout for rs in layouts for layout in rs):
            return False
        self.layouts = [rs[0] for rs in layouts]
        return True

    def _drop_older(self, served: ServedIndex) -> None:
        """After a grace (searches still on the old index finish), the shards forget the
        generations loaded before the one served."""
        g = served.generation or NO_INDEX

        def drop() -> None:
            for h in self.shards:
                h.drop_before.remote(g)

        timer = threading.Timer(max(5.0, 2 * self.settings.generation_poll_s), drop)
        timer.daemon = True
        timer.start()

    def follow(self, *, engine: Engine, searcher: Searcher) -> GenerationWatcher:
        return GenerationWatcher(
            engine=engine,
            searcher=searcher,
            build=self._build,
            poll_s=self.settings.generation_poll_s,
            ready=self._ready,
            incremental=False,
            on_swap=self._drop_older,
        )

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(self.settings, source=self)


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
