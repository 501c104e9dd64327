"""Attend on Ray Serve (`attend serve --engine ray --shards S`): keys beyond one device.

    HTTP → attend serve's own server (service/api/server.py: the same bounds as the local engine)
           → the router (this process: the FastAPI app; encodes the queries, batches, merges)
             ├─ shard-0 (rows 0 … N/S, replicas for load)   ─┐ each: per dense head top-k,
             ├─ shard-1                                       ├ log-sum-exp, matched; scores
             └─ …                                            ─┘ and entropy parts; global rows

Every shard replica loads its contiguous slice of the index from the database (every field's
keys), and of each newly activated generation beside it, and answers the dense heads' operations
for it (service/cluster/shards/deployments.py), building masks from the filters itself. The
router is the `attend serve` process itself, with a `ServedIndex` whose keys are the shards'
(service/cluster/shards/placement.py places them, router.py asks them): it holds the books and
the whole catalog's BM25 index but no keys, and merges the shards' answers exactly
(models/shard_merge.py), so a search is the single-process mixture of heads, and the HTTP
server, its bounds, routes, errors and request batching are the single-process ones: Ray Serve
runs the shards only, with no HTTP proxy of its own (which bounded no header, timed out no slow
client and answered errors in plain text). Every shard call names the generation the router
serves; the router switches to a new one only once every shard holds it, so no answer mixes
two. This module composes the application (above the API); what it composes over, the shards,
sits below the engine, which asks them for keys and is never called back. Needs the extra:
`pip install "attend[ray]"`.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

import ray
from ray import serve
from ray.serve.handle import DeploymentHandle

from service.api import server
from service.api.main import create_app
from service.cluster.shards.deployments import ShardConfig, ShardDeployment
from service.cluster.shards.placement import ShardPlacement
from service.config.settings import ServiceSettings

logger = logging.getLogger(__name__)

APP_NAME = "attend"


@serve.deployment
class Shards:
    """The application's ingress, holding nothing: it binds the shard deployments, so that Ray
    Serve deploys them all at once; the router reaches each by its own handle."""

    def __init__(self, shards: list[DeploymentHandle[Any]]) -> None:
        self.count = len(shards)

    def __call__(self) -> int:
        return self.count


def shard_config(settings: ServiceSettings) -> ShardConfig:
    """What each shard replica is told of the settings."""
    return ShardConfig(
        database_url=settings.database_url,
        model=settings.model,
        device=settings.device,
        key_dtype=settings.key_dtype,
        chunk_size=settings.chunk_size,
        generation_poll_s=settings.generation_poll_s,
    )


def build_app(settings: ServiceSettings, *, gpus: bool = False) -> serve.Application:
    """The deployment graph: `settings.shards` shard deployments of `settings.shard_replicas`
    replicas each (one GPU per replica when `gpus`), bound to an ingress that holds nothing."""
    shard_options: dict[str, Any] = {"num_cpus": 1, "num_gpus": 1 if gpus else 0}
    config = shard_config(settings)
    shards = [
        ShardDeployment.options(  # type: ignore[attr-defined]
            name=f"shard-{i}",
            num_replicas=settings.shard_replicas,
            ray_actor_options=shard_options,
        ).bind(config, i, settings.shards)
        for i in range(settings.shards)
    ]
    return Shards.options(ray_actor_options={"num_cpus": 0}).bind(shards)  # type: ignore[attr-defined, no-any-return]


def serve_forever(settings: ServiceSettings, sock: socket.socket) -> None:
    """Start (or join, with `ray_address`) Ray, deploy the shards, and serve HTTP on `sock`
    (bound already) until SIGINT/SIGTERM, as the local engine does."""
    replicas = settings.shards * settings.shard_replicas
    if settings.ray_address:
        ray.init(address=settings.ray_address)
    else:  # a local Ray; logical CPUs enough for every replica (they share the real ones)
        ray.init(num_cpus=max(os.cpu_count() or 1, replicas + 1), include_dashboard=False)
    try:
        resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        gpus = resources.get("GPU", 0) >= replicas
        serve.start(proxy_location="Disabled")  # HTTP is this process's own server
        t0 = time.perf_counter()
        serve.run(build_app(settings, gpus=gpus), name=APP_NAME, route_prefix=None)
        handles = [
            serve.get_deployment_handle(f"shard-{i}", app_name=APP_NAME)
            for i in range(settings.shards)
        ]
        logger.info(
            "%d shards × %d replicas (%s) deployed in %.1f s; serving on http://%s:%d",
            settings.shards,
            settings.shard_replicas,
            "GPU" if gpus else "CPU",
            time.perf_counter() - t0,
            settings.host,
            settings.port,
        )
        placement = ShardPlacement(
            handles,
            replicas=settings.shard_replicas,
            poll_s=settings.generation_poll_s,
            timeout_s=settings.shard_timeout_s,
        )
        server.serve(create_app(settings, placement=placement), settings, sock)
    finally:
        if settings.ray_address:  # a shared cluster: take down only this application
            serve.delete(APP_NAME)
        else:
            serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
