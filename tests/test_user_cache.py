"""The ONNX export's folder is the user's cache folder by the XDG rule, the same from every
working folder (issue 24: it was ./.attend-cache, 88 MB and a 2-minute export in each), unless
ATTEND_ONNX_CACHE_DIR names another. The export itself is not run here (minutes on this
machine; tests/test_encoder.py covers it): what is checked is the folder each runnable's
settings and the encoder resolve to."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.settings import IndexSettings
from models.defaults import default_onnx_cache_dir
from service.config.settings import ServiceSettings


@pytest.fixture
def no_override(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The environment without the test session's ATTEND_ONNX_CACHE_DIR (conftest.py)."""
    monkeypatch.delenv("ATTEND_ONNX_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return monkeypatch


def test_two_working_folders_share_one_export_under_xdg_cache_home(
    no_override: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    xdg = tmp_path / "xdg-cache"
    no_override.setenv("XDG_CACHE_HOME", str(xdg))
    seen = set()
    for name in ("project-a", "project-b"):
        folder = tmp_path / name
        folder.mkdir()
        no_override.chdir(folder)
        seen |= {IndexSettings().onnx_cache_dir, ServiceSettings().onnx_cache_dir}
    assert seen == {str(xdg / "attend" / "onnx")}
    assert not any(p.name == ".attend-cache" for p in tmp_path.rglob("*"))


def test_without_xdg_cache_home_it_is_under_home(
    no_override: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    no_override.setenv("HOME", str(tmp_path))
    assert ServiceSettings().onnx_cache_dir == str(tmp_path / ".cache" / "attend" / "onnx")
    no_override.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored, as XDG says
    assert default_onnx_cache_dir() == tmp_path / ".cache" / "attend" / "onnx"


def test_attend_onnx_cache_dir_still_wins(no_override: pytest.MonkeyPatch, tmp_path: Path) -> None:
    no_override.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    no_override.setenv("ATTEND_ONNX_CACHE_DIR", str(tmp_path / "mine"))
    assert IndexSettings().onnx_cache_dir == str(tmp_path / "mine")
    assert ServiceSettings().onnx_cache_dir == str(tmp_path / "mine")
