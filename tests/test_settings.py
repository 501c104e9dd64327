"""Settings: one pydantic-settings class per runnable, from ATTEND_* variables and a .env file in
the working folder, the environment winning; bad values fail loudly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from indexer.settings import IndexSettings
from service.commands.threads import apply_serve_threads, serve_torch_threads
from service.config.settings import ServiceSettings


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("ATTEND_MAX_BATCH", "ATTEND_CORS_ORIGINS", "ATTEND_LOG_JSON", "ATTEND_BATCH_SIZE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_dot_env_is_read_and_the_environment_wins(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (workdir / ".env").write_text(
        "ATTEND_MAX_BATCH=7\n"
        'ATTEND_CORS_ORIGINS=["https://books.example"]\n'
        "ATTEND_LOG_JSON=true\n"
        "ATTEND_BATCH_SIZE=32\n"
        "UNRELATED=ignored\n"
    )
    settings = ServiceSettings()
    assert settings.max_batch == 7 and settings.log_json is True
    assert settings.cors_origins == ["https://books.example"]
    assert IndexSettings().batch_size == 32  # each runnable reads its own settings
    monkeypatch.setenv("ATTEND_MAX_BATCH", "9")
    assert ServiceSettings().max_batch == 9


def test_defaults_are_safe(workdir: Path) -> None:
    settings = ServiceSettings()
    assert settings.cors_origins == [] and settings.log_json is False
    assert settings.host == "127.0.0.1" and settings.max_body_bytes == 1_048_576


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ATTEND_MAX_BATCH", "0"),
        ("ATTEND_MAX_BODY_BYTES", "lots"),
        ("ATTEND_CORS_ORIGINS", "not-an-origin.example"),
        ("ATTEND_CORS_ORIGINS", '["https://a.example"'),
        ("ATTEND_LOG_JSON", "perhaps"),
        ("ATTEND_HEADS", "title:0"),
        ("ATTEND_SIMILAR_HEADS", "writer:1"),
        ("ATTEND_RECOMMEND_HEADS", "lexical:-1"),
        ("ATTEND_HEAD_SCALES", "title:19,description:25"),  # every head needs its scale
        ("ATTEND_HEAD_SCALES", "title:0,description:25,lexical:1"),
        ("ATTEND_SIMILAR_HEAD_SCALES", "title:19,description:nan,lexical:1"),
    ],
)
def test_a_bad_value_fails_loudly(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises((ValidationError, ValueError)):
        ServiceSettings()


def test_head_scales_reach_the_search_and_similar(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "ATTEND_HEAD_SCALES", "lexical:2,title:10,description:30,series:4,author:3,subjects:6"
    )
    monkeypatch.setenv("ATTEND_SIMILAR_HEADS", "title:1,lexical:3")
    settings = ServiceSettings()
    assert settings.scales == {
        "title": 10.0,
        "description": 30.0,
        "lexical": 2.0,
        "author": 3.0,
        "series": 4.0,
        "subjects": 6.0,
    }
    assert settings.similar.weights == {"title": 0.25, "lexical": 0.75}
    assert settings.recommend.scales == settings.similar.scales  # the same heads, other weights
    assert settings.similar.scales == {
        "title": 19.0,
        "description": 25.0,
        "lexical": 0.55,
        "author": 5.0,
        "series": 2.0,
        "subjects": 10.0,
    }


def test_serve_gives_torch_one_thread_beside_the_onnx_encoder_on_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """service/commands/threads.py: the product and the encoder have their own threads there; an
    explicit ATTEND_TORCH_THREADS wins, and the torch encoder keeps torch's threads, as do
    spinning OpenMP threads (the product then runs in them)."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    onnx = ServiceSettings(device="cpu", encoder_backend="onnx")
    assert serve_torch_threads(onnx) == 1
    assert serve_torch_threads(ServiceSettings(device="cpu", encoder_backend="torch")) is None
    explicit = ServiceSettings(device="cpu", encoder_backend="onnx", torch_threads=3)
    assert serve_torch_threads(explicit) == 3
    before = torch.get_num_threads()
    try:
        apply_serve_threads(onnx)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ValidationError, match="torch_threads"):
        ServiceSettings(torch_threads=0)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert serve_torch_threads(onnx) is None
    assert serve_torch_threads(explicit) == 3


def test_a_setting_both_commands_read_is_declared_once() -> None:
    """`engine` (ATTEND_ENGINE) is one field of one class that both runnables inherit, so its
    default and meaning cannot drift apart."""
    declared = [
        cls.__name__
        for cls in {*ServiceSettings.__mro__, *IndexSettings.__mro__}
        if "engine" in vars(cls).get("__annotations__", {})
    ]
    assert declared == ["RaySettings"]
    assert ServiceSettings().engine == IndexSettings().engine == "local"


def test_the_encoder_backend_is_declared_once_and_auto_fits_the_command(workdir: Path) -> None:
    """ATTEND_ENCODER_BACKEND has one default, `auto`, which takes the faster backend for what
    the command encodes: a search's short queries on onnx (on the CPU, when installed), an
    index run's batches of book texts on torch. An explicit value is taken by both."""
    declared = [
        cls.__name__
        for cls in {*ServiceSettings.__mro__, *IndexSettings.__mro__}
        if "encoder_backend" in vars(cls).get("__annotations__", {})
    ]
    assert declared == ["StoreSettings"]
    assert ServiceSettings().encoder_backend == IndexSettings().encoder_backend == "auto"
    assert ServiceSettings().backend("cpu") == "onnx"  # the [dev] install has onnxruntime
    assert IndexSettings().backend("cpu") == "torch"
    assert IndexSettings(encoder_backend="onnx").backend("cpu") == "onnx"
    assert ServiceSettings(encoder_backend="torch").backend("cpu") == "torch"
