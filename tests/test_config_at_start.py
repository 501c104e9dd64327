"""Configuration checked when a command starts, before the model loads (issue 25): each bad
value is one sentence naming its ATTEND_* variable on stderr, exit status 2, no traceback. The
real `attend serve` and `attend index` in a subprocess."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from conftest import ATTEND, write_jsonl
from service.config.settings import ServiceSettings

CASES = [
    ("ATTEND_LOG_LEVEL", "garbage", "ATTEND_LOG_LEVEL: must be one of DEBUG, INFO"),
    ("ATTEND_CORS_ORIGINS", "ftp:x", "ATTEND_CORS_ORIGINS: 'ftp:x' is not an origin"),
    ("ATTEND_DATABASE_URL", "notaurl", "ATTEND_DATABASE_URL: is not a database URL"),
    (
        "ATTEND_DATABASE_URL",
        "postgresql+psycopg://postgres:pw@127.0.0.1:1/x",
        "cannot reach the database at postgresql+psycopg://postgres:***@127.0.0.1:1/x",
    ),
    ("ATTEND_MODEL", "/nonexistent/model", "ATTEND_MODEL=/nonexistent/model is neither"),
    ("ATTEND_CHUNK_SIZE", "1", "ATTEND_CHUNK_SIZE: Input should be greater than or equal to 64"),
    ("ATTEND_DEVICE", "gpu", "ATTEND_DEVICE: must be auto, cpu, cuda or cuda:N"),
    # a run's bound, which `attend serve` reads too now, for its admin re-index (issue 31)
    (
        "ATTEND_MAX_DELETE_FRACTION",
        "2",
        "ATTEND_MAX_DELETE_FRACTION: Input should be less than or equal to 1",
    ),
    ("ATTEND_ONNX_CACHE_DIR", "{file}/sub", "ATTEND_ONNX_CACHE_DIR={file}/sub is not a folder"),
    # a folder no one can make, root included (os.access says yes to root there)
    ("ATTEND_ONNX_CACHE_DIR", "/proc/attend-onnx", "ATTEND_ONNX_CACHE_DIR=/proc/attend-onnx is"),
]
if not torch.cuda.is_available():
    CASES.append(("ATTEND_DEVICE", "cuda", "ATTEND_DEVICE=cuda but torch sees no CUDA GPU"))


@pytest.mark.parametrize(("name", "value", "said"), CASES, ids=[f"{c[0]}={c[1]}" for c in CASES])
@pytest.mark.parametrize("command", ["serve", "index"])
def test_a_bad_setting_is_one_sentence_naming_it(
    tmp_path: Path, command: str, name: str, value: str, said: str
) -> None:
    if command == "index" and name in (
        "ATTEND_LOG_LEVEL",
        "ATTEND_CORS_ORIGINS",
        "ATTEND_CHUNK_SIZE",
    ):
        pytest.skip(f"{name} is the service's")
    file = tmp_path / "a-file"
    file.write_text("")
    value, said = value.format(file=file), said.format(file=file)
    env = {
        **os.environ,
        "ATTEND_DATABASE_URL": f"sqlite:///{tmp_path / 'attend.db'}",
        # the export folder matters where the encoder is onnx: auto's for serve, asked for index
        "ATTEND_ENCODER_BACKEND": "onnx" if name == "ATTEND_ONNX_CACHE_DIR" else "auto",
        name: value,
    }
    catalog = write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "title": "A"}])
    args = [ATTEND, command] + ([str(catalog)] if command == "index" else [])
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.splitlines() == [
        f"attend {command}: " + done.stderr.split(": ", 1)[1].strip()
    ]
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "pw" not in done.stderr
    assert not (tmp_path / "attend.db").exists()  # nothing made


def test_cors_origins_take_a_plain_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, origins in (
        ("https://a.example", ["https://a.example"]),
        (
            "https://a.example, http://b.example:8080",
            ["https://a.example", "http://b.example:8080"],
        ),
        ('["https://a.example"]', ["https://a.example"]),
        ("*", ["*"]),
        ("", []),
    ):
        monkeypatch.setenv("ATTEND_CORS_ORIGINS", value)
        assert ServiceSettings().cors_origins == origins, value
    monkeypatch.setenv("ATTEND_CORS_ORIGINS", "https://a.example")
    monkeypatch.setenv("ATTEND_LOG_LEVEL", "debug")
    assert ServiceSettings().log_level == "DEBUG"
    with pytest.raises(ValidationError, match="chunk_size"):
        ServiceSettings(chunk_size=1)
