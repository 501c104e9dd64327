"""Issue 33: `make demo` checks its port before it installs anything
(service/commands/port_check.py): with the port taken it fails at once, naming the port, and creates
no virtual environment; the port is read as the settings read it (the environment, else `.env`)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.commands import port_check

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port something listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_with_its_port_taken_fails_before_the_install(
    taken_port: int, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    env = {**os.environ, "ATTEND_PORT": str(taken_port), "ATTEND_HOST": "127.0.0.1"}
    # the install takes minutes: past the timeout, the check did not come first
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), "demo", f"VENV={venv}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert done.returncode != 0
    assert done.stderr.splitlines()[0] == (
        f"make demo: port {taken_port} is already in use on 127.0.0.1 (another `attend "
        "serve`?): stop what listens there, or serve the demo on another port: ATTEND_PORT=8080 "
        "make demo (nothing was installed)"
    )
    assert not venv.exists()


def test_the_port_is_read_from_the_environment_else_dotenv(
    taken_port: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ATTEND_PORT", raising=False)
    monkeypatch.setenv("ATTEND_HOST", "127.0.0.1")
    (tmp_path / ".env").write_text(f"# the demo's port\nATTEND_PORT='{taken_port}'\n", "utf-8")
    assert port_check.main() == 2
    assert f"port {taken_port} is already in use" in capsys.readouterr().err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    monkeypatch.setenv("attend_port", str(free))  # the environment wins, in any case
    assert port_check.main() == 0
    assert capsys.readouterr().err == ""
