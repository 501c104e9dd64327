"""What the encoder uses when told nothing: the packaged model, and the folder its one-time ONNX
export goes into. No torch here: the settings import these, and `attend search` reads its
settings before it knows whether it needs torch at all (service/remote_search.py)."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def user_cache_dir() -> Path:
    """Attend's cache folder by the XDG base directory rule: `$XDG_CACHE_HOME/attend`, else
    `~/.cache/attend` (a relative XDG_CACHE_HOME is ignored, as the rule says)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".cache"
    return root / "attend"


def default_onnx_cache_dir() -> Path:
    """Where the ONNX export of a model goes: once per user and model, shared by every working
    folder. (It was `./.attend-cache/onnx`: 88 MB and a 2-minute export in every folder where
    `attend` first ran.)"""
    return user_cache_dir() / "onnx"
