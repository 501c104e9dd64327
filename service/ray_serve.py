"""Attend on Ray Serve (`attend serve --engine ray --shards S`): keys beyond one device.

    HTTP → Router (the FastAPI app: encodes the queries, batches them, merges)
             ├─ shard-0 (rows 0 … N/S, replicas for load)   ─┐ each: per dense head top-k,
             ├─ shard-1                                       ├ log-sum-exp, matched; scores
             └─ …                                            ─┘ and entropy parts; global rows

Every shard replica loads its contiguous slice of the index from the database (every field's
keys), and of each newly activated generation beside it (`ShardDeployment`), and answers the
dense heads' operations for it (service/sharded.py), building masks from the filters itself; the
router holds the books (ids, titles, … for the responses) and the whole catalog's BM25 index but
no keys, and merges the shards' answers exactly (models/sharded.py), so a search is the
single-process mixture of heads. Every shard call names the generation the router serves; the
router switches to a new one only once every shard holds it, so no answer mixes two. The router
serves the same app as `attend serve`, so routes, errors and request batching are the
single-process ones. Needs the extra:
`pip install "attend[ray]"`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any, Generic, TypeVar, cast

import ray
from fastapi import FastAPI
from ray import serve
from ray.serve.handle import DeploymentHandle, DeploymentResponse
from sqlalchemy import Engine
from sqlalchemy.orm import Session
from torch import Tensor

from indexer import store
from indexer.db import SchemaError, create_db_engine
from indexer.store import LoadedIndex
from models.sharded import ShardAnswer, SparseScores, split
from service.errors import ShardsOutOfStepError
from service.main import create_app
from service.ranker import Filters, Ranker
from service.reloader import GenerationWatcher
from service.searcher import Searcher
from service.settings import ServiceSettings
from service.sharded import Fields, Shard, ShardedRanker

logger = logging.getLogger(__name__)

T = TypeVar("T")

APP_NAME = "attend"


NO_INDEX = 0  # the generation key of an empty database (generations count from 1)
KEEP = 3  # generations a shard replica holds at most (the router drops older ones sooner)


@serve.deployment
class ShardDeployment:
    """One shard of the keys, on the replica's device (a GPU when Ray gave it one), for each
    generation it holds (the one the router serves, and a newer one loaded beside it).

    A thread polls the active generation (`generation_poll_s`) and loads this shard's slice of a
    new one beside the others; the router switches to it once every shard holds it, and asks
    each call for one generation. Not `service.reloader.GenerationWatcher`: that swaps a
    searcher's one ranker, where a shard keeps several and swaps nothing."""

    def __init__(self, settings: ServiceSettings, shard: int, shards: int) -> None:
        self.settings, self.shard, self.shards = settings, shard, shards
        self.engine = create_db_engine(settings.database_url)
        self.held: dict[int, Shard] = {}  # by generation, in the order loaded
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.check()
        if settings.generation_poll_s > 0:
            threading.Thread(target=self._poll, name="attend-shard-gens", daemon=True).start()

    def _poll(self) -> None:
        while not self._stop.wait(self.settings.generation_poll_s):
            try:
                self.check()
            except Exception:  # a database hiccup must not end the polling
                logger.exception("shard %d: checking for a new generation failed", self.shard)

    def check(self) -> bool:
        """Load this shard's slice of the active generation if not held; True if it loaded."""
        t0 = time.perf_counter()
        with Session(self.engine) as session:
            g = store.active_generation_id(session=session)
            if (g or NO_INDEX) in self.held:
                return False
            index = store.load_index(session=session, model=self.settings.model, generation=g)
        shard = Shard(
            index,
            shard=self.shard,
            shards=self.shards,
            device=self.settings.device,
            key_dtype=self.settings.key_dtype,
            chunk_size=self.settings.chunk_size,
        )
        with self._lock:
            self.held[g or NO_INDEX] = shard
            for old in list(self.held)[:-KEEP]:
                del self.held[old]
        logger.info(
            "shard %d: loaded generation %s (%d books) in %.2f s; holding %s",
            self.shard,
            g,
            shard.total,
            time.perf_counter() - t0,
            list(self.held),
        )
        return True

    # async, computing inline: a replica answers one search at a time (torch uses its cores);
    # more replicas, not threads, serve more load.
    async def describe(self) -> dict[int, tuple[int, int, int]]:
        """Per generation held: (start, stop, total), the rows this shard holds, of how many."""
        return {g: (s.start, s.stop, s.total) for g, s in list(self.held.items())}

    async def drop_before(self, generation: int) -> None:
        """Forget the generations loaded before `generation` (the one the router now serves)."""
        with self._lock:
            if generation in self.held:
                for old in list(self.held)[: list(self.held).index(generation)]:
                    del self.held[old]
        logger.info("shard %d: holding generations %s", self.shard, list(self.held))

    def _at(self, generation: int) -> Shard | None:
        return self.held.get(generation)

    async def top(
        self,
        generation: int,
        q: Tensor,
        heads: list[tuple[str, float]],
        k: int,
        filters: list[Filters],
    ) -> tuple[list[ShardAnswer] | None, list[int]]:
        """Per dense head this shard's top-k and log-sum-exp at `generation` (None when not
        held), and the generations held (as every answer here)."""
        if (shard := self._at(generation)) is None:
            return None, list(self.held)
        return shard.top(q, heads=heads, k=k, filters=filters), list(self.held)

    async def scores(
        self, generation: int, q: Tensor, heads: list[tuple[str, float]], cand: Tensor
    ) -> tuple[Tensor | None, list[int]]:
        """The raw scores of the candidates in this shard (0 for the others)."""
        if (shard := self._at(generation)) is None:
            return None, list(self.held)
        return shard.scores(q, heads=heads, cand=cand), list(self.held)

    async def keys(
        self, generation: int, rows: Tensor, fields: list[str]
    ) -> tuple[Tensor | None, list[int]]:
        """The keys of the rows this shard holds (0 for the others): books as queries."""
        if (shard := self._at(generation)) is None:
            return None, list(self.held)
        return shard.keys(rows, fields), list(self.held)

    async def sweep(
        self,
        generation: int,
        q: Tensor,
        *,
        heads: list[tuple[str, float]],
        filters: list[Filters],
        pi: Tensor,
        lse: Tensor,
        cand: Tensor,
        scored: list[SparseScores],
    ) -> tuple[tuple[Tensor, Tensor] | None, list[int]]:
        """The candidates' scores and this shard's part of the mixture's entropy."""
        if (shard := self._at(generation)) is None:
            return None, list(self.held)
        swept = shard.sweep(
            q, heads=heads, filters=filters, pi=pi, lse=lse, cand=cand, scored=scored
        )
        return swept, list(self.held)


class _Reply(Generic[T]):
    """A shard's answer on its way, at the generation the router asked for."""

    def __init__(self, response: DeploymentResponse[Any], generation: int, name: str, kind: type):
        self.response, self.generation, self.name, self.kind = response, generation, name, kind

    def result(self) -> T:
        answer, held = self.response.result()
        if answer is None:
            raise ShardsOutOfStepError(
                f"{self.name} does not hold generation {self.generation} (it holds {held}): "
                "the index changed under the deployment; retry"
            )
        if not isinstance(answer, self.kind):
            raise TypeError(f"{self.name} answered {type(answer).__name__}, not {self.kind}")
        return cast(T, answer)


class RayShard:
    """The router's `ShardClient` for one shard deployment (any of its replicas), rows
    [start, stop) of generation `generation`."""

    def __init__(
        self, handle: DeploymentHandle[Any], *, generation: int, name: str, start: int, stop: int
    ):
        self.handle, self.generation, self.name = handle, generation, name
        self.start, self.stop = start, stop

    def submit_top(
        self, q: Tensor, *, heads: Fields, k: int, filters: Sequence[Filters]
    ) -> _Reply[list[ShardAnswer]]:
        response = self.handle.top.remote(self.generation, q, list(heads), k, list(filters))
        return self._reply(response, list)

    def submit_scores(self, q: Tensor, *, heads: Fields, cand: Tensor) -> _Reply[Tensor]:
        response = self.handle.scores.remote(self.generation, q, list(heads), cand)
        return self._reply(response, Tensor)

    def submit_keys(self, rows: Tensor, *, fields: Sequence[str]) -> _Reply[Tensor]:
        response = self.handle.keys.remote(self.generation, rows, list(fields))
        return self._reply(response, Tensor)

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
            self.generation,
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
        return _Reply(cast(DeploymentResponse[Any], response), self.generation, self.name, kind)


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

    def load_ranker(self, settings: ServiceSettings, *, session: Session, model: str) -> Ranker:
        """The active generation's ranker if every shard holds it, else the newest they all
        hold (the watcher switches later). Runs on the event loop: no shard asked here."""
        common = set.intersection(*(set(layout) for layout in self.layouts))
        active = store.active_generation_id(session=session) or NO_INDEX
        g = active if active in common else max(common)
        index = store.load_index(session=session, model=model, generation=g or None)
        return self._build(index, session)

    def _build(self, index: LoadedIndex, session: Session) -> Ranker:
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
        descriptions = store.book_descriptions(
            session=session, book_ids=index.ids, generation=index.generation
        )
        return ShardedRanker(index, shards, descriptions=descriptions)

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

    def _drop_older(self, ranker: Ranker) -> None:
        """After a grace (searches still on the old ranker finish), the shards forget the
        generations loaded before the one served."""
        g = ranker.generation or NO_INDEX

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
        return create_app(self.settings, ranker_loader=self.load_ranker, follow=self.follow)


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
