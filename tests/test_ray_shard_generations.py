"""A Ray Serve shard replica's generations, without Ray: it loads a new generation's slice
beside the served one, answers only the generation it is asked for, and drops older ones."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from sqlalchemy import Engine

from conftest import FakeEncoder, write_jsonl
from indexer import pipeline
from indexer.data import DEMO_CATALOG
from indexer.filters import Filters
from indexer.settings import IndexSettings
from service.config.settings import ServiceSettings

pytest.importorskip("ray", reason="the ray engine is an extra: pip install 'attend[ray]'")

from service.cluster.ray_serve import shard_config
from service.cluster.shards.deployments import ShardDeployment
from service.cluster.shards.shard import ShardQuery


def _index(engine: Engine, path: Path) -> None:
    url = engine.url.render_as_string(hide_password=False)
    pipeline.run(IndexSettings(database_url=url), engine=engine, encoder=FakeEncoder(), path=path)


def test_shard_holds_generations_side_by_side(engine: Engine, tmp_path: Path) -> None:
    rows = [json.loads(line) for line in DEMO_CATALOG.read_text(encoding="utf-8").splitlines()]
    _index(engine, write_jsonl(tmp_path / "a.jsonl", rows[:20]))
    url = engine.url.render_as_string(hide_password=False)
    settings = ServiceSettings(
        database_url=url, device="cpu", model=FakeEncoder.name, generation_poll_s=0
    )
    shard = ShardDeployment.func_or_class(shard_config(settings), 1, 2)  # type: ignore[attr-defined]
    try:
        (g1,) = asyncio.run(shard.describe())
        assert asyncio.run(shard.describe()) == {g1: (10, 20, 20)}
        assert not shard.check()  # nothing new

        _index(engine, write_jsonl(tmp_path / "b.jsonl", rows[:15]))
        assert shard.check()
        layout = asyncio.run(shard.describe())
        (g2,) = set(layout) - {g1}
        assert layout == {g1: (10, 20, 20), g2: (7, 15, 15)}

        q = FakeEncoder().encode(["deep learning"])
        query = ShardQuery(q, [("description", 20.0)], [Filters()])
        old, held = asyncio.run(shard.top(g1, query, 5))
        new, _ = asyncio.run(shard.top(g2, query, 5))
        assert old is not None and new is not None and held == [g1, g2]
        assert int(old[0].indices.max()) >= 15 and int(new[0].indices.max()) < 15  # global rows
        assert asyncio.run(shard.top(g2 + 1, query, 5)) == (None, [g1, g2])
        cand = torch.tensor([[10]])
        assert asyncio.run(shard.scores(g2 + 1, query, cand))[0] is None

        asyncio.run(shard.drop_before(g2))
        assert asyncio.run(shard.describe()) == {g2: (7, 15, 15)}
    finally:
        shard.engine.dispose()
