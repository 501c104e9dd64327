"""A stored vector: its little-endian float32 bytes, and the content hash that names it (the
model and the exact text embedded), so a vector already stored is found, never embedded again."""

from __future__ import annotations

import hashlib

import numpy as np

DTYPE = "float32"
NP_DTYPE = np.dtype("<f4")


def content_hash(model: str, text: str) -> str:
    """What a vector was made from: the model and the exact text embedded."""
    return hashlib.sha256(f"{model}\x00{text}".encode()).hexdigest()


def to_bytes(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype=NP_DTYPE).tobytes()


def from_bytes(data: bytes, dim: int) -> np.ndarray:
    vector = np.frombuffer(data, dtype=NP_DTYPE)
    if vector.shape != (dim,):
        raise ValueError(f"stored vector has {vector.size} floats, its row says dim={dim}")
    return vector
