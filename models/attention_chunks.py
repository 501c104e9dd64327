"""What `attend` (models/attention.py) does to one chunk of keys: its logits q Kᵀ into a buffer
the calling thread reuses, the candidates for the running top-k by block maxima, and the
winners' exact float64 rescoring; and `raw_scores`, the float32 q Kᵀ for keys of any dtype on
any device (with the CPU's faster BLAS).
"""

from __future__ import annotations

import math
import threading

import numpy as np
import torch
from torch import Tensor

from models import cpu_blas, cpu_kernels

BLOCK = 64  # columns per block of a chunk's block-max top-k (chunk_candidates)
# logits buffers up to 64 MiB (attend's SCORES_BUDGET of fp32) are kept for the thread's next call
_REUSE_MAX = 1 << 24
_NUMPY_ROWS = 512  # up to this many winners (B·k) are rescored with numpy on the CPU


def chunk_logits(
    s: Tensor, q: Tensor, kc: Tensor, *, scale: float | None, kept: Tensor | None
) -> None:
    """s (B, W), W ≥ c: x = q kcᵀ (B, c), times `scale` unless q is scaled already, and −inf
    past the keys; `kept` (B, c) receives the raw q kcᵀ (q unscaled then)."""
    c = kc.shape[0]
    # the raw scores asked for are the product's own output: scaled from there into s, where
    # a copy of them was one more pass over (B, c) (at N = 1M, B = 32: 128 MB a head)
    x = raw_scores(q, kc, out=s[:, :c] if kept is None else kept)  # (B, c) fp32
    if kept is not None and x.data_ptr() != kept.data_ptr():  # a product that took no `out`
        kept.copy_(x)
    if scale is not None:
        torch.mul(x, scale, out=s[:, :c])  # in place when x is s's own columns
    elif x.data_ptr() != s.data_ptr():
        s[:, :c] = x
    if s.shape[1] > c:
        s[:, c:] = -math.inf  # the last block's columns past the keys


def exact_scores(q: Tensor, keys: Tensor, idx: Tensor) -> Tensor:
    """q·k in float64 (B, k) for the keys idx (B, k): float32 products are exact in float64."""
    if keys.device.type == "cpu" and keys.dtype == torch.float32 and cpu_kernels.available():
        return cpu_kernels.exact_scores(q, keys, idx)  # the winners in column order, in C
    if keys.device.type == "cpu" and keys.dtype == torch.float32 and idx.numel() <= _NUMPY_ROWS:
        # numpy gathers and sums on the calling thread. torch's index and float64 product each
        # woke a second OpenMP thread under OMP_WAIT_POLICY=PASSIVE (80-90 µs apiece, most of
        # a small search's `attend`) for a few thousand elements.
        rows = keys.numpy()[idx.numpy()]  # (B, k, d) float32
        q64 = q.numpy().astype(np.float64)  # (B, d)
        return torch.from_numpy(np.einsum("bd,bkd->bk", q64, rows, dtype=np.float64))
    if keys.T.is_contiguous():
        # the served layout, (d, N) memory seen as (N, d): a key's d values are d cache lines
        # apart, and `keys[idx]` walked them key by key; taking the winners' columns from the
        # (d, N) rows reads each row once (2,560 winners, B = 256: 3.6 → 2.4 ms at N = 10k, 37
        # → 8 at N = 1M), and index_select then a product on the (B, d, k) view of the float64
        # columns, where gather and einsum copied them once more (5.1 → 2.2 ms at N = 10k)
        B, k = idx.shape
        cols = keys.T.index_select(1, idx.reshape(-1)).double()  # (d, B·k)
        rows = cols.view(-1, B, k).permute(1, 0, 2)  # (B, d, k), a view
        return torch.bmm(q.double()[:, None, :], rows)[:, 0]  # (B, k)
    return torch.einsum("bd,bkd->bk", q.double(), keys[idx].double())


def chunk_candidates(
    s: Tensor, k: int, block_max: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Entries of s (B, c), c a whole number of BLOCKs, among which are each row's k largest:
    (values, columns) (B, k'); and each row's max (B,) and its column (B, 1). `block_max`
    (B, c / BLOCK), each block's max, where the caller has it (models/cuda_fold.py).

    The k blocks with the largest maxima hold every top-k entry (a block outside them has k
    blocks above it, each holding an entry above every entry of its own), so a pass of block
    maxima and a gather of k·BLOCK candidates replace a top-k over all c columns: 4x faster at
    (256, 65536) here.
    """
    B, c = s.shape
    if c <= 4 * k * BLOCK:
        values, cols = s.topk(min(k, c), dim=-1)  # (B, k') descending
        return values, cols, values[:, 0], cols[:, :1]
    s_blocks = s.view(B, c // BLOCK, BLOCK)  # (B, c / BLOCK, BLOCK)
    if block_max is None:
        block_max = s_blocks.amax(-1)  # (B, c / BLOCK)
    top_max, blocks = block_max.topk(k, dim=-1)  # (B, k) descending
    cols = (blocks[:, :, None] * BLOCK + _block_cols(s.device)).view(B, k * BLOCK)  # (B, kW)
    # the k blocks whole, BLOCK values at a time (gather took them one by one: 4x slower here)
    values = s_blocks[_rows(B, s.device), blocks].view(B, k * BLOCK)  # (B, kW); max's block first
    arg = cols.gather(1, values[:, :BLOCK].argmax(dim=-1, keepdim=True))  # (B, 1)
    return values, cols, top_max[:, 0], arg


def whole_blocks(c: int) -> int:
    return -(-c // BLOCK) * BLOCK


_block_cols_on: dict[torch.device, Tensor] = {}


def _block_cols(device: torch.device) -> Tensor:
    """arange(BLOCK) on `device`, made once."""
    if device not in _block_cols_on:
        _block_cols_on[device] = torch.arange(BLOCK, device=device)
    return _block_cols_on[device]


def _rows(B: int, device: torch.device) -> Tensor:  # noqa: N803
    """arange(B)[:, None] on `device`: each row's index for a (B, k) advanced index."""
    return torch.arange(B, device=device)[:, None]


_workspace = threading.local()


def logits_buffer(B: int, width: int, device: torch.device) -> Tensor:  # noqa: N803
    """(B, width) fp32; on the CPU the calling thread's buffer from its last call: a fresh one
    per call costs a page fault per 4 KiB (22 ms for 64 MiB here, a quarter of the product)."""
    n = B * width
    if device.type != "cpu" or n > _REUSE_MAX:
        return torch.empty(B, width, device=device)
    buf: Tensor | None = getattr(_workspace, "logits", None)
    if buf is None or buf.numel() < n:
        buf = _workspace.logits = torch.empty(n)
    return buf[:n].view(B, width)


def raw_scores(q: Tensor, kc: Tensor, *, out: Tensor | None = None) -> Tensor:
    """q kcᵀ (B, C) in float32 for keys of any dtype, into `out` (fp32) where the device
    allows."""
    q = q.to(kc.dtype)
    if kc.dtype == torch.float32:
        if kc.device.type == "cpu":
            return cpu_blas.matmul(q, kc.T, out=out)  # the faster BLAS of this CPU
        return torch.mm(q, kc.T, out=out) if out is not None else q @ kc.T
    if kc.is_cuda:
        # half-precision keys stream at half the bytes; cuBLAS accumulates in fp32 and writes
        # fp32, so the scores are not rounded to fp16
        return torch.mm(q, kc.T, out_dtype=torch.float32)
    return (q @ kc.T).float()  # half keys on the CPU: correct, slow (no fast fp16 matmul here)
