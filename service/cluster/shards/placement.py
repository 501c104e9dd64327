"""The router's `KeyPlacement` (service/engine/startup.py): a generation's keys on the shard
deployments of Ray Serve. It knows which generations every shard holds (their `describe`), gives
the engine the keys of a generation as `RayShard`s bound to it, says when a new generation is
held by every shard (so the router switches only then, and no answer mixes two), and once the
router serves one, lets the shards drop the ones before it after a grace.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, cast

from ray.serve.handle import DeploymentHandle

from indexer.db import SchemaError
from indexer.loaded_index import LoadedIndex
from models.shard_merge import shard_bounds
from service.cluster.shards.deployments import NO_INDEX, RayShard
from service.cluster.shards.router import ShardedKeys

logger = logging.getLogger(__name__)

Layout = dict[int, tuple[int, int, int]]  # a shard's describe(): generation → (start, stop, total)


class ShardPlacement:
    """The keys on `shards` (one deployment handle each, `replicas` replicas behind each); the
    router polls generations every `poll_s` seconds and waits `timeout_s` at most for a shard's
    reply to a search."""

    incremental = False  # the router holds no keys to fold a diff into: a new one is loaded whole

    def __init__(
        self,
        shards: list[DeploymentHandle[Any]],
        *,
        replicas: int,
        poll_s: float,
        timeout_s: float = 30.0,
    ) -> None:
        self.shards, self.replicas, self.poll_s = shards, replicas, poll_s
        self.timeout_s = timeout_s
        replies = [h.describe.remote() for h in shards]
        self.layouts: list[Layout] = [cast(Layout, r.result(timeout_s=60)) for r in replies]
        if not self._common():
            raise SchemaError(f"the shards hold no generation in common: {self.layouts}")
        logger.info("router: %d shards: %s", len(shards), self.layouts)

    def _common(self) -> set[int]:
        return set.intersection(*(set(layout) for layout in self.layouts))

    def first(self, active: int | None) -> int | None:
        """The active generation if every shard holds it, else the newest they all hold (the
        watcher switches later). No shard asked here: their layouts are known."""
        common = self._common()
        g = active or NO_INDEX
        return (g if g in common else max(common)) or None

    def keys(self, index: LoadedIndex) -> ShardedKeys:
        g = index.generation or NO_INDEX
        want = shard_bounds(len(index), len(self.shards))
        shards = []
        for i, (handle, layout, (start, stop)) in enumerate(
            zip(self.shards, self.layouts, want, strict=True)
        ):
            if layout.get(g, (start, stop, len(index))) != (start, stop, len(index)):
                raise SchemaError(
                    f"shard-{i} holds {layout[g]} of generation {g}, not {start, stop}"
                )
            shards.append(
                RayShard(
                    handle,
                    generation=g,
                    name=f"shard-{i}",
                    start=start,
                    stop=stop,
                    timeout_s=self.timeout_s,
                )
            )
        return ShardedKeys.of(index, shards)

    def ready(self, generation: int) -> bool:
        """Every shard holds `generation` (asked off the event loop: the watcher's thread),
        else the shards that do not are asked to load the active generation now, and asked
        again. Without that ask a notified switch waited for the shards' own poll and then the
        router's next check, an hour by a poll of 3600 s (issue 32, finding 6); a load that
        fails (the database gone meanwhile) leaves it not ready, for the next check.
        A handle reaches one replica a call: with R > 1 replicas each shard is asked 4R times,
        so every replica most likely answered (not surely: one that has not loaded it yet
        answers 503 until it has)."""
        asks = 1 if self.replicas == 1 else 4 * self.replicas
        if self._held(generation, asks):
            return True
        loads = [[h.load_active.remote() for _ in range(asks)] for h in self.shards]
        try:
            for replies in loads:
                for reply in replies:
                    reply.result(timeout_s=600)
        except Exception as e:  # the next check (a notification, a poll) asks again
            logger.warning("router: the shards could not load generation %d: %s", generation, e)
            return False
        return self._held(generation, asks)

    def _held(self, generation: int, asks: int) -> bool:
        """Every shard's replicas asked answered holding `generation`; their layouts kept."""
        replies = [[h.describe.remote() for _ in range(asks)] for h in self.shards]
        layouts = [[cast(Layout, r.result(timeout_s=30)) for r in rs] for rs in replies]
        if not all(generation in layout for rs in layouts for layout in rs):
            return False
        self.layouts = [rs[0] for rs in layouts]
        return True

    def served(self, generation: int | None) -> None:
        """After a grace (searches still on the old index finish), the shards forget the
        generations loaded before the one served."""
        g = generation or NO_INDEX

        def drop() -> None:
            for h in self.shards:
                h.drop_before.remote(g)

        timer = threading.Timer(max(5.0, 2 * self.poll_s), drop)
        timer.daemon = True
        timer.start()
