"""Two of `attend`'s CPU passes in C (models/_cpu_kernels.c, built by `pip install`): a chunk's
fold in one read of its logits, and the winners' exact rescoring in column order.

torch's eager operations read a chunk of base-2 logits x (B, c) four times and wrote it once
per fold (block maxima, exp2 in place, a scatter, a sum): at N = 10k, B = 256 that was 4.0 ms
of a 15.6 ms call, where FAISS's whole search took 10.8. The C pass reads x once (0.9 ms there).
The rescoring gathered each winner's d values from the (d, N) keys one cache line apiece
(index_select, 2.2 ms there); taking the winners in ascending column order reads each of the
d rows front to back (0.9 ms).

Both give what the torch passes give within float32 rounding, and the same bits on every x86
CPU (no fused multiply-add, fixed summation order; the C file says how). Without a compiler at
install time the extension is missing and `attend` keeps torch's passes: `available()`.
"""

from __future__ import annotations

import functools
import logging
import math
import os
from types import ModuleType

import numpy as np
import torch
from torch import Tensor

from models import spare_arrays

logger = logging.getLogger(__name__)

# The C top k inserts into a sorted list, O(k) an insertion: past this k (the mixture's deeper
# rounds ask for up to the whole catalog) torch's top-k is the faster, and fold_chunk is not
# used. The service's k = 10 asks for 40.
MAX_K = 128
# `support_top` inserts the same way, into a row's top k among the few books a head holds: past
# this k (a sorted or faceted search ranks 2,010 hits, and asks its heads for 8,040 at 1M
# books) numpy's partition is the faster, and the C pass refuses k past its stack's 4,096.
SUPPORT_MAX_K = 1024

_state: dict[str, bool] = {"enabled": True}


def _load() -> ModuleType | None:
    try:
        from models import _cpu_kernels  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _cpu_kernels  # type: ignore[no-any-return]


_kernels = _load()


@functools.cache
def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def threads() -> int:
    """Threads a C pass may split its work over: every core this process may run on, or
    torch's intra-op threads where more are set. `attend serve` gives torch one thread (its
    OpenMP threads woke for a few thousand elements: service/commands/threads.py), but a C pass
    starts plain threads only for work worth them (2^18 elements and more), ended with it."""
    return max(torch.get_num_threads(), _cores())


def available() -> bool:
    """Whether the C passes are built and enabled (`set_enabled`)."""
    return _kernels is not None and _state["enabled"]


def set_enabled(enabled: bool) -> None:
    """Use the C passes where they apply (True, the default) or torch's (tests, benchmarks)."""
    _state["enabled"] = enabled


def applies(s: Tensor, k: int) -> bool:
    """Whether `fold_chunk` takes this (B, c) logits view and k: float32 on the CPU, rows
    contiguous, k ≤ MAX_K."""
    return (
        available()
        and k <= MAX_K
        and s.device.type == "cpu"
        and s.dtype == torch.float32
        and s.stride(1) == 1
    )


def fold_chunk(s: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One read of x, s (B, c) with c whole BLOCKs (−inf past the keys), left as it is: each
    row's k' = min(k, c) largest x (B, k') descending and their columns (B, k') (the lowest
    first among equal values); rest (B,) float64, Σ 2^(x − shift) over the row but its max's
    term; shift (B,) float64, 0, or the row's max where that is past ±64."""
    assert _kernels is not None
    B, c = s.shape
    k = min(k, c)
    top = torch.empty(B, k)
    top_col = torch.empty(B, k, dtype=torch.int64)
    rest = torch.empty(B, dtype=torch.float64)
    shift = torch.empty(B, dtype=torch.float64)
    _kernels.fold_chunk(
        s.data_ptr(),
        B,
        s.stride(0),
        c,
        k,
        top.data_ptr(),
        top_col.data_ptr(),
        rest.data_ptr(),
        shift.data_ptr(),
        threads(),
    )
    return top, top_col, rest, shift


def exact_scores(q: Tensor, keys: Tensor, idx: Tensor) -> Tensor:
    """q·k in float64 (B, k) for the keys idx (B, k) (rows ≥ 0) of float32 CPU keys (N, d) in
    any strides, each summed over d in order: the same bits for any layout or batch."""
    assert _kernels is not None
    q = q.contiguous()
    idx = idx.contiguous()
    B, k = idx.shape
    # ascending columns: (d, N) keys are read row by row, each row front to back
    order = np.argsort(idx.numpy().reshape(-1))  # equal columns in any order: a sum a winner
    out = torch.empty(B, k, dtype=torch.float64)
    _kernels.exact_scores(
        q.data_ptr(),
        B,
        q.shape[1],
        keys.data_ptr(),
        keys.stride(0),
        keys.stride(1),
        idx.data_ptr(),
        k,
        order.ctypes.data,
        out.data_ptr(),
        threads(),
    )
    return out


def positive_support(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The support of a head of scores ≥ 0 (B, n) float32 C-contiguous: each row's columns of
    a positive score, (nnz,) int64 ascending row by row, and its count (B,); −inf written over
    every other score of a row that has one, in place (a row with none is left as it is)."""
    assert _kernels is not None
    assert s.dtype == np.float32 and s.flags.c_contiguous and s.ndim == 2
    B, n = s.shape
    counts = np.zeros(B, dtype=np.int64)
    n_threads = threads()
    _kernels.positive_support(s.ctypes.data, B, n, 0, counts.ctypes.data, 0, n_threads)
    offsets = np.zeros(B + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    cols = spare_arrays.empty("support.cols", (int(offsets[-1]),), np.int64)
    _kernels.positive_support(
        s.ctypes.data, B, n, offsets.ctypes.data, counts.ctypes.data, cols.ctypes.data, n_threads
    )
    return cols, counts


def support_top(s: np.ndarray, cols: np.ndarray, starts: np.ndarray, k: int) -> np.ndarray:
    """(B, k) int64: each row b's k largest of s (B, n) float32 C-contiguous among its columns
    cols[starts[b]:starts[b + 1]] (int64), best first, the lower column first among equal
    values; −1 past a row's columns."""
    assert _kernels is not None
    assert s.dtype == np.float32 and s.flags.c_contiguous and s.ndim == 2
    B, n = s.shape
    cols = np.ascontiguousarray(cols, np.int64)
    starts = np.ascontiguousarray(starts, np.int64)
    assert len(starts) == B + 1
    top = np.empty((B, k), dtype=np.int64)
    _kernels.support_top(
        s.ctypes.data, B, n, cols.ctypes.data, starts.ctypes.data, k, top.ctypes.data, threads()
    )
    return top


def sweep_entropy(
    dense: list[tuple[Tensor, float]],
    sparse: list[tuple[Tensor, float, Tensor, Tensor]],
    shift: Tensor,
    mask: Tensor | None,
) -> Tensor:
    """−Σ_i w_i ln w_i (B,) float64 of w_i = Σ_h exp(scale_h · s_hi + shift_bh), 0 where `mask`
    (bool (n,) or (B, n)) is False. `dense`: heads read whole, their scores (B, n) float32
    (rows contiguous) and scale; `sparse`: heads read at their support alone, their scores
    (B, n) float32, scale, columns (nnz,) int64 (ascending within a row) and row offsets
    (B + 1,) int64; shift (B, H) float64, their columns in that order."""
    assert _kernels is not None
    B = shift.shape[0]
    heads = [(x, scale) for x, scale in dense] + [(x, scale) for x, scale, _, _ in sparse]
    n = int(heads[0][0].shape[1]) if heads else int(mask.shape[-1]) if mask is not None else 0
    ptrs = np.array([x.data_ptr() for x, _ in heads], dtype=np.int64)
    strides = np.array([x.stride(0) for x, _ in heads], dtype=np.int64)
    scale2 = np.array([scale * math.log2(math.e) for _, scale in heads], dtype=np.float64)
    shift2 = np.ascontiguousarray(shift.double().cpu().numpy() * math.log2(math.e))
    support = [(c.contiguous(), o.contiguous()) for _, _, c, o in sparse]
    cols = np.array([c.data_ptr() for c, _ in support], dtype=np.int64)
    offsets = np.array([o.data_ptr() for _, o in support], dtype=np.int64)
    m = None if mask is None else mask.to(torch.bool).contiguous()
    out = torch.empty(B, dtype=torch.float64)
    _kernels.sweep_entropy(
        B,
        n,
        len(dense),
        len(sparse),
        ptrs.ctypes.data,
        strides.ctypes.data,
        scale2.ctypes.data,
        shift2.ctypes.data,
        cols.ctypes.data,
        offsets.ctypes.data,
        0 if m is None else m.data_ptr(),
        0 if m is None or m.dim() == 1 else n,
        out.data_ptr(),
        threads(),
    )
    del heads, support  # held until here: the kernel read their memory
    return out


def describe() -> str:
    """What the log and benchmarks say of the CPU passes."""
    if _kernels is None:
        return "torch (models/_cpu_kernels.c not built)"
    return "C (models/_cpu_kernels.c)" if _state["enabled"] else "torch (C passes disabled)"
