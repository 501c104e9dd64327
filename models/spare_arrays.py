"""Large per-batch arrays kept from one batch to the next instead of freed and made again.

glibc hands an allocation over 32 MiB back to the kernel when it is freed (its mmap threshold
cannot be raised past that), so the next batch's array of the same size is fresh pages, one
fault per 4 KiB on its first write: at 1M books a batch's (B, N) BM25 rows and its lexical
support are each 100+ MiB, and their faults cost as much as the passes that fill them. Here
each purpose keeps its largest array; a caller gets a view of it when nothing else holds one
(its reference count says so: every view, and every tensor made from one, holds the array),
else a fresh array. So an array is never lent twice, whatever outlives a batch.
"""

from __future__ import annotations

import math
import sys
import threading

import numpy as np

# Below this an allocation comes from the heap glibc keeps (no faults after the first): kept
# arrays would only hold memory.
KEPT_FROM = 1 << 22

_kept: dict[str, np.ndarray] = {}  # purpose → (bytes,) uint8, the largest made for it
_lock = threading.Lock()


def empty(purpose: str, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """An uninitialised C-contiguous array of `shape` and `dtype`: a view of the purpose's
    kept array when no one holds it and it is large enough, else a new array (kept for the
    purpose's next call when it is the larger)."""
    dt = np.dtype(dtype)
    size = math.prod(shape) * dt.itemsize
    if size < KEPT_FROM:
        return np.empty(shape, dt)
    with _lock:
        # two references while only the dict holds it: the dict's and getrefcount's argument
        free = purpose in _kept and sys.getrefcount(_kept[purpose]) == 2
        if free and _kept[purpose].nbytes >= size:
            return _kept[purpose][:size].view(dt).reshape(shape)
        fresh = np.empty(size, np.uint8)
        if free or purpose not in _kept:  # the one it replaces is no one's: let it go
            _kept[purpose] = fresh
        return fresh.view(dt).reshape(shape)


def kept_bytes() -> int:
    """The bytes the kept arrays hold (in use or not)."""
    with _lock:
        return sum(a.nbytes for a in _kept.values())


def release() -> None:
    """Forget every kept array (each is freed once no view of it is left): a reloader
    retiring a generation, a test."""
    with _lock:
        _kept.clear()
