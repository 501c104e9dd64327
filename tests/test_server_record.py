"""Issue 33: where the `attend serve` of a database listens is recorded beside it (or, for a
server database, in the user's cache) while it serves, for `attend search` to find it whatever
ATTEND_PORT says (service/commands/server_record.py); a record whose process is gone is ignored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.commands.server_record import record_file, recorded, recorded_url


def test_a_server_is_recorded_beside_its_database_while_it_serves(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'attend.db'}"
    assert record_file(url) == tmp_path / "attend.db.server"
    assert recorded_url(url) is None
    with recorded(url, "http://127.0.0.1:8090"):
        assert recorded_url(url) == "http://127.0.0.1:8090"
        assert json.loads(record_file(url).read_text())["pid"] == os.getpid()
    assert recorded_url(url) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_record_of_a_process_that_is_gone_is_ignored(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'attend.db'}"
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    record_file(url).write_text(json.dumps({"url": "http://x:1", "pid": int(gone.stdout)}))
    assert recorded_url(url) is None
    record_file(url).write_text("{not json")
    assert recorded_url(url) is None


def test_a_server_database_is_recorded_in_the_users_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    url = "postgresql+psycopg://attend:secret@db:5432/attend"
    file = record_file(url)
    assert file.parent == tmp_path / "attend" / "servers"
    assert record_file("postgresql+psycopg://attend:other@db:5432/attend") == file  # no password
    with recorded(url, "http://10.0.0.2:8000"):
        assert recorded_url(url) == "http://10.0.0.2:8000"
        assert "secret" not in file.read_text()
    assert not file.exists()
