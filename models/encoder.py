"""Sentence encoders: text in, unit-length vectors out (N, d)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

import torch
from torch import Tensor

from models.defaults import DEFAULT_MODEL, PACKAGED_ALIASES, default_onnx_cache_dir, resolve_model
from models.onnx_encoder import load_or_export, onnx_available
from models.tokens import TokenEmbeddings, embed_tokens

logger = logging.getLogger(__name__)

Backend = Literal["torch", "onnx"]


class Encoder(Protocol):
    """What the indexer and the service need of an encoder."""

    name: str  # recorded beside every stored vector

    @property
    def dim(self) -> int:
        """The width d of its vectors (a property: a lazy encoder knows it once loaded)."""
        ...

    def encode(self, texts: list[str]) -> Tensor:
        """(len(texts), dim) float32 on the CPU, each row of unit length."""
        ...


def pick_backend(preference: str, device: str, *, batches: bool = False) -> Backend:
    """The encoder backend for `preference` (auto, torch or onnx) on `device` (cpu, cuda, …).

    `auto` takes the faster for what is encoded: for short texts one or a few at a time (a
    search's queries) ONNX Runtime on the CPU when its packages are installed (3.4 ms a short
    query against PyTorch's 17.9 ms), for `batches` of long texts (indexing a catalog) PyTorch,
    which embedded them faster (63 against 56 texts/s); on CUDA PyTorch. `onnx` runs on the CPU
    only (the onnxruntime package has no CUDA).
    """
    on_cpu = torch.device(device).type == "cpu"
    if preference == "auto":
        return "onnx" if on_cpu and not batches and onnx_available() else "torch"
    if preference == "torch":
        return "torch"
    if preference == "onnx":
        if not on_cpu:
            raise ValueError(f"the onnx encoder backend runs on the CPU, not on {device!r}")
        if not onnx_available():
            raise RuntimeError("the onnx encoder backend needs onnxruntime, onnx and onnxscript")
        return "onnx"
    raise ValueError(f"unknown encoder backend {preference!r}: expected auto, torch or onnx")


class SentenceTransformerEncoder:
    """A sentence-transformers model, loaded offline from a local folder.

    `backend="torch"` runs it with sentence-transformers on `device`; `backend="onnx"` runs it with
    ONNX Runtime on the CPU from an export made once into `cache_dir` (default: the user's cache
    folder, models/defaults.py; see models/onnx_encoder.py).
    Both give the same unit-length vectors (cosine ≥ 0.9999).
    """

    def __init__(
        self,
        name: str = DEFAULT_MODEL,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        backend: Backend = "torch",
        cache_dir: str | os.PathLike[str] | None = None,
    ):
        # Nothing may come from a model hub at run time: fail fast instead of hanging on a fetch.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        if backend not in ("torch", "onnx"):
            raise ValueError(f"unknown encoder backend {backend!r}: expected torch or onnx")
        path = resolve_model(name)
        if name not in PACKAGED_ALIASES and not Path(path).exists():
            logger.warning("model %r is not a local folder; it must be in the local HF cache", name)
        t0 = time.perf_counter()
        self.name = name
        self._path = path
        self._model: Any = None  # the sentence-transformers model (torch), loaded when needed
        self.backend: Backend = backend
        self.batch_size = batch_size
        self._encode: Callable[[list[str]], Tensor]
        if backend == "onnx":
            pick_backend("onnx", device)  # CPU only, packages installed
            onnx_model, exported = load_or_export(
                name,
                Path(path),
                Path(cache_dir) if cache_dir is not None else default_onnx_cache_dir(),
                batch_size=batch_size,
            )
            self.dim = onnx_model.dim
            self._encode = onnx_model.encode
            device = (
                f"cpu (onnxruntime, {'exported to' if exported else 'from'} {onnx_model.folder})"
            )
        else:
            self.dim = self._load_torch(path, device)
            self._encode = self._encode_torch
        # Fast tokenizers are not safe to call from two threads at once ("Already borrowed").
        self._lock = threading.Lock()
        # token embeddings come from the PyTorch model: its own lock when that is a second model
        self._token_lock = self._lock if backend == "torch" else threading.Lock()
        logger.info(
            "loaded encoder %s d=%d on %s in %.1f s",
            name,
            self.dim,
            device,
            time.perf_counter() - t0,
        )

    def _load_torch(self, path: str, device: str) -> int:
        from sentence_transformers import SentenceTransformer

        self._model = SentenceTransformer(path, device=device)
        # sentence-transformers 6 renamed get_sentence_embedding_dimension
        get_dim = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        dim = get_dim()
        if dim is None:
            raise RuntimeError(f"model {self.name!r} does not report its embedding dimension")
        return int(dim)

    def _encode_torch(self, texts: list[str]) -> Tensor:
        with torch.inference_mode():
            vecs: Tensor = self._model.encode(
                texts,
                batch_size=self.batch_size,
                convert_to_tensor=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return vecs.float().cpu()

    def encode(self, texts: list[str]) -> Tensor:
        """(len(texts), dim) float32 on the CPU, each row of unit length."""
        if not texts:
            return torch.empty(0, self.dim)
        with self._lock:
            return self._encode(texts)

    def token_embeddings(self, texts: list[str]) -> list[TokenEmbeddings]:
        """Each text's word pieces, their character spans and their (T, d) unit embeddings.

        Always PyTorch: the ONNX export outputs only the pooled sentence embedding, so with the
        onnx backend the PyTorch model is loaded (on the CPU) at the first call and kept.
        """
        with self._token_lock:
            if self._model is None:
                t0 = time.perf_counter()
                self._load_torch(self._path, "cpu")
                logger.info(
                    "loaded the PyTorch model for token embeddings in %.1f s",
                    time.perf_counter() - t0,
                )
            return embed_tokens(self._model, texts)
