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

import logging
from types import ModuleType

import numpy as np
import torch
from torch import Tensor

logger = logging.getLogger(__name__)

# The C top k inserts into a sorted list, O(k) an insertion: past this k (the mixture's deeper
# rounds ask for up to the whole catalog) torch's top-k is the faster, and fold_chunk is not
# used. The service's k = 10 asks for 40.
MAX_K = 128

_state: dict[str, bool] = {"enabled": True}


def _load() -> ModuleType | None:
    try:
        from models import _cpu_kernels  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _cpu_kernels  # type: ignore[no-any-return]


_kernels = _load()


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
        torch.get_num_threads(),
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
        torch.get_num_threads(),
    )
    return out


def describe() -> str:
    """What the log and benchmarks say of the CPU passes."""
    if _kernels is None:
        return "torch (models/_cpu_kernels.c not built)"
    return "C (models/_cpu_kernels.c)" if _state["enabled"] else "torch (C passes disabled)"
