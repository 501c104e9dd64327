"""The shards on Ray Serve: `ShardDeployment` holds one shard of the keys per generation (on the
replica's device, a GPU when Ray gave it one), and `RayShard` is the router's `ShardClient` for
it. Every call names the generation the router serves; a shard that does not hold it answers
None, which the router's reply raises as `ShardsOutOfStepError` (a 503: retry).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from ray import serve
from ray.serve.handle import DeploymentHandle, DeploymentResponse
from sqlalchemy.orm import Session
from torch import Tensor

from indexer import loaded_index, store
from indexer.db import create_db_engine
from models.shard_merge import ShardAnswer
from service.cluster.shards.shard import (
    Shard,
    ShardQuery,
    ShardsOutOfStepError,
    ShardSweep,
    ShardTimeoutError,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

NO_INDEX = 0  # the generation key of an empty database (generations count from 1)
PING_S = 2.0  # a /readyz's wait for each shard (compose's healthcheck gives up after 3 s)
KEEP = 3  # generations a shard replica holds at most (the router drops older ones sooner)
# a failing generation poll (the database down) logs its traceback once, then a line at most
# this often until it works again: a traceback at every poll filled the log
POLL_FAILURE_EVERY_S = 60.0


@dataclass(frozen=True)
class ShardConfig:
    """What a shard replica reads of the service's settings (`ATTEND_*`: the router fills it
    from its `ServiceSettings`, service/cluster/ray_serve.py), and nothing else."""

    database_url: str
    model: str
    device: str
    key_dtype: str
    chunk_size: int | None
    generation_poll_s: float


@serve.deployment
class ShardDeployment:
    """One shard of the keys, on the replica's device (a GPU when Ray gave it one), for each
    generation it holds (the one the router serves, and a newer one loaded beside it).

    A thread polls the active generation (`generation_poll_s`) and loads this shard's slice of a
    new one beside the others; the router switches to it once every shard holds it, and asks
    each call for one generation. Not `service.engine.reloader.GenerationWatcher`: that swaps a
    searcher's one served index, where a shard keeps several and swaps nothing."""

    def __init__(self, config: ShardConfig, shard: int, shards: int) -> None:
        self.config, self.shard, self.shards = config, shard, shards
        self.engine = create_db_engine(config.database_url)
        self.held: dict[int, Shard] = {}  # by generation, in the order loaded
        self._lock = threading.Lock()
        self._loading = threading.Lock()  # one load at a time: the poll's, or the router's ask
        self._stop = threading.Event()
        self.check()
        if config.generation_poll_s > 0:
            threading.Thread(target=self._poll, name="attend-shard-gens", daemon=True).start()

    def _poll(self) -> None:
        failing: tuple[float, float] | None = None  # since when, and when last said
        while not self._stop.wait(self.config.generation_poll_s):
            try:
                self.check()
            except Exception as e:  # a database hiccup must not end the polling
                now = time.monotonic()
                if failing is None:
                    logger.exception("shard %d: checking for a new generation failed", self.shard)
                    failing = (now, now)
                elif now - failing[1] >= POLL_FAILURE_EVERY_S:
                    logger.warning(
                        "shard %d: checking for a new generation still fails after %.0f s: %s",
                        self.shard,
                        now - failing[0],
                        type(e).__name__,
                    )
                    failing = (failing[0], now)
            else:
                if failing is not None:
                    logger.info(
                        "shard %d: checking for a new generation works again after %.0f s",
                        self.shard,
                        time.monotonic() - failing[0],
                    )
                failing = None

    def close(self) -> None:
        """Stop polling."""
        self._stop.set()

    def __del__(self) -> None:  # Ray Serve's hook at a replica's shutdown
        if (stop := getattr(self, "_stop", None)) is not None:  # an __init__ that failed has none
            stop.set()

    def check(self) -> bool:
        """Load this shard's slice of the active generation if not held; True if it loaded."""
        with self._loading:
            return self._load_active()

    def _load_active(self) -> bool:
        t0 = time.perf_counter()
        with Session(self.engine) as session:
            g = store.active_generation_id(session=session)
            if (g or NO_INDEX) in self.held:
                return False
            index = loaded_index.load_index(session=session, model=self.config.model, generation=g)
        shard = Shard(
            index,
            shard=self.shard,
            shards=self.shards,
            device=self.config.device,
            key_dtype=self.config.key_dtype,
            chunk_size=self.config.chunk_size,
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

    async def load_active(self) -> bool:
        """`check` now, asked by the router when it is told of a switch the shards have not
        loaded yet: on PostgreSQL the router hears of it at once (LISTEN/NOTIFY), and the
        shards, which poll, may only in `generation_poll_s` (an hour, or never at 0). Off the
        replica's event loop: searches of the served generation go on meanwhile."""
        return await asyncio.to_thread(self.check)

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
        self, generation: int, query: ShardQuery, k: int
    ) -> tuple[list[ShardAnswer] | None, list[int]]:
        """Per dense head this shard's top-k and log-sum-exp at `generation` (None when not
        held), and the generations held (as every answer here)."""
        if (shard := self._at(generation)) is None:
            return None, list(self.held)
        return shard.top(query, k), list(self.held)

    async def scores(
        self, generation: int, query: ShardQuery, cand: Tensor
    ) -> tuple[Tensor | None, list[int]]:
        """The raw scores of the candidates in this shard (0 for the others)."""
        if (shard := self._at(generation)) is None:
            return None, list(self.held)
        return shard.scores(query, cand), list(self.held)

    async def sweep(
        self, generation: int, query: ShardQuery, sweep: ShardSweep
    ) -> tuple[tuple[Tensor, Tensor] | None, list[int]]:
        """The candidates' scores and this shard's part of the mixture's entropy."""
        if (shard := self._at(generation)) is None:
            return None, list(self.held)
        return shard.sweep(query, sweep), list(self.held)

    async def keys(
        self, generation: int, rows: Tensor, fields: list[str]
    ) -> tuple[Tensor | None, list[int]]:
        """The keys of the rows this shard holds (0 for the others): books as queries."""
        if (shard := self._at(generation)) is None:
            return None, list(self.held)
        return shard.keys_of(rows, fields), list(self.held)


def _within(response: DeploymentResponse[Any], timeout_s: float, name: str) -> Any:
    """The shard's answer to `response`, awaited `timeout_s` at most, else the request is
    cancelled and ShardTimeoutError raised."""
    try:
        return response.result(timeout_s=timeout_s)
    except TimeoutError:
        response.cancel()  # type: ignore[no-untyped-call]
        raise ShardTimeoutError(f"{name} did not answer within {timeout_s:g} s") from None


class _Reply(Generic[T]):
    """A shard's answer on its way, at the generation the router asked for, awaited at most
    `timeout_s` seconds."""

    def __init__(
        self,
        response: DeploymentResponse[Any],
        generation: int,
        name: str,
        kind: type,
        timeout_s: float,
    ):
        self.response, self.generation, self.name, self.kind = response, generation, name, kind
        self.timeout_s = timeout_s

    def result(self) -> T:
        answer, held = _within(self.response, self.timeout_s, self.name)
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
        self,
        handle: DeploymentHandle[Any],
        *,
        generation: int,
        name: str,
        start: int,
        stop: int,
        timeout_s: float,
    ):
        self.handle, self.generation, self.name = handle, generation, name
        self.start, self.stop, self.timeout_s = start, stop, timeout_s

    def submit_top(self, query: ShardQuery, k: int) -> _Reply[list[ShardAnswer]]:
        return self._reply(self.handle.top.remote(self.generation, query, k), list)

    def submit_scores(self, query: ShardQuery, cand: Tensor) -> _Reply[Tensor]:
        return self._reply(self.handle.scores.remote(self.generation, query, cand), Tensor)

    def submit_sweep(self, query: ShardQuery, sweep: ShardSweep) -> _Reply[tuple[Tensor, Tensor]]:
        return self._reply(self.handle.sweep.remote(self.generation, query, sweep), tuple)

    def submit_keys(self, rows: Tensor, fields: Sequence[str]) -> _Reply[Tensor]:
        return self._reply(self.handle.keys.remote(self.generation, rows, list(fields)), Tensor)

    def ping(self) -> str | None:
        """Whether a replica of the shard answers `describe` within PING_S (or the shard
        timeout, if shorter): a frozen or stopped one does not."""
        try:
            response = cast(DeploymentResponse[Any], self.handle.describe.remote())
            _within(response, min(self.timeout_s, PING_S), self.name)
        except ShardTimeoutError as e:
            return str(e)
        return None

    def _reply(self, response: Any, kind: type) -> _Reply[Any]:
        response = cast(DeploymentResponse[Any], response)
        return _Reply(response, self.generation, self.name, kind, self.timeout_s)
