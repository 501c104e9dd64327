"""A shard replica whose generation poll fails (the database gone) logs the traceback once, then
a line at most every POLL_FAILURE_EVERY_S, and says when the poll works again (issue 50: Ray
shards logged a 60-line traceback on every failed poll). The replica's class
(service/cluster/shards/deployments.py) in this process, over a real SQLite file moved away and
back."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from conftest import FakeEncoder, index_books
from indexer import db

pytest.importorskip("ray", reason="the ray engine is an extra: pip install 'attend[ray]'")

from service.cluster.shards import deployments

POLL_S = 0.05
EVERY_S = 0.5


def _said(caplog: pytest.LogCaptureFixture, words: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if words in r.getMessage()]


def test_a_failing_poll_logs_its_traceback_once_then_says_it_recovered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "attend.db"
    engine = db.create_db_engine(f"sqlite:///{path}")
    index_books(engine, tmp_path, [{"id": "a", "title": "A book", "description": "words"}])
    engine.dispose()
    monkeypatch.setattr(deployments, "POLL_FAILURE_EVERY_S", EVERY_S)
    caplog.set_level(logging.INFO, logger=deployments.__name__)
    config = deployments.ShardConfig(
        f"sqlite:///{path}", FakeEncoder.name, "cpu", "auto", None, POLL_S
    )
    replica = deployments.ShardDeployment.func_or_class(config, 0, 1)  # type: ignore[attr-defined]
    try:
        assert list(replica.held) == [1]
        path.rename(tmp_path / "away.db")
        time.sleep(2.5 * EVERY_S)  # ~25 polls, every one failing
        failed = _said(caplog, "checking for a new generation failed")
        assert len(failed) == 1 and failed[0].exc_info is not None  # the traceback, once
        again = _said(caplog, "still fails after")
        assert 1 <= len(again) <= 3 and all(r.exc_info is None for r in again)
        path.unlink(missing_ok=True)
        (tmp_path / "away.db").rename(path)
        deadline = time.monotonic() + 10
        while not _said(caplog, "works again after"):
            assert time.monotonic() < deadline, "the poll did not say it works again"
            time.sleep(POLL_S)
        assert len(_said(caplog, "checking for a new generation failed")) == 1
    finally:
        replica.close()
