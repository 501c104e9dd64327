"""The running softmax's bookkeeping on the GPU in two small kernels (models/cuda_kernels.py),
where torch's operations on (B,) and (B, k) tensors took some thirty launches a call
(models/running_softmax.py):

- `merge_blocks`: a chunk's block maxima and rests (models/cuda_fold.py) into the running max
  m and sum l = Σ 2^(x − m), in float64;
- `select_blocks`: the same, and the running top k too, where it is small (`select_applies`):
  one kernel in place of `chunk_candidates`'s and `_merge_top`'s dozen launches;
- `finish_rows`: the winners' exact float64 scores and, with them, the sum, the log-sum-exp and
  the weights, as `_exact_sums` computes them.

Below a million keys a call's time was these launches, not its bytes: an H200 took 0.17 ms a
B = 1 call over 10,000 keys in a CUDA graph with torch's operations, 0.11 ms with these.
One program per query row.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from models.attention_chunks import BLOCK

LN_2 = math.log(2)


def merge_blocks(
    block_max: Tensor, rest: Tensor, m: Tensor | None, l: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """The running (m, m_safe, l) (B,) fp32, fp32, float64 after a chunk's block maxima and
    rests (B, G): m the max x (−inf for a row masked so far), m_safe m but 0 for −inf, l
    Σ 2^(x − m_safe) over every key so far. `m` and `l` the running ones before, None for the
    first chunk; updated in place otherwise."""
    B, G = block_max.shape
    has_old = m is not None and l is not None
    m_out = m if m is not None else block_max.new_empty(B)
    l_out = l if l is not None else block_max.new_empty(B, dtype=torch.float64)
    m_safe = torch.empty_like(m_out)
    from models import cuda_kernels  # triton, on a kernel's first launch

    cuda_kernels.merge_blocks_kernel[(B,)](
        block_max, rest, m_out, m_safe, l_out, G, block_max.stride(0),
        HAS_OLD=has_old, BG=1024,
    )  # fmt: skip
    return m_out, m_safe, l_out


# `select_blocks` takes k passes over a row's G block maxima, one program per row: up to
# k·G = 2^16 (k = 10 up to N = 419,000 keys in a chunk). On an H200 (4 warps a program), one
# B = 1 call over 100,000 fp16 keys took 0.090 ms with it, 0.119 with torch's top-k; over 1M
# keys 0.355 against 0.338, the passes longer than torch's launches there.
SELECT_MAX = 1 << 16
SELECT_MAX_K = 64  # its candidates, k blocks of BLOCK columns, sit in registers
# a program's warps: below SELECT_WARP_G blocks as few as hold the k·BLOCK candidates without
# spilling registers (ptxas for sm_90a: k ≤ 16 one warp, ≤ 32 two), each pass's reductions then
# a warp's shuffles, not barriers between warps; four past it
SELECT_WARP_G = 2048


_state: dict[str, bool] = {"select": True}


def set_select_enabled(enabled: bool) -> None:
    """Take `select_blocks` where it applies (True, the default) or torch's top-k (benchmarks)."""
    _state["select"] = enabled


def select_enabled() -> bool:
    return _state["select"]


def select_applies(k: int, G: int) -> bool:  # noqa: N803
    """Whether `select_blocks` takes a chunk of G blocks for a running top k."""
    return _state["select"] and k <= SELECT_MAX_K and k * G <= SELECT_MAX


def select_blocks(  # noqa: PLR0917
    s: Tensor,
    block_max: Tensor,
    rest: Tensor,
    k: int,
    start: int,
    top: Tensor | None,
    top_idx: Tensor | None,
    m: Tensor | None,
    l: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The running (top, top_idx, m, m_safe, l) after a chunk from row `start` on: its x s
    (B, W) and block maxima and rests (B, W / BLOCK); top (B, k) the largest x, descending (by
    row, ascending, among equals), top_idx their rows (−1 for padding); m, m_safe, l as
    `merge_blocks`. The running ones before, all None for the first chunk. The top k of the k
    blocks with the largest maxima, as `chunk_candidates` takes them (models/attention_chunks.py).
    """
    B, G = block_max.shape
    has_old = top is not None and top_idx is not None and m is not None and l is not None
    new_top = block_max.new_empty(B, k)
    new_idx = torch.empty(B, k, dtype=torch.long, device=s.device)
    m_out = block_max.new_empty(B)
    m_safe = torch.empty_like(m_out)
    l_out = block_max.new_empty(B, dtype=torch.float64)
    BK = max(16, 1 << (k - 1).bit_length())
    warps = max(1, BK // 16) if G <= SELECT_WARP_G else 4
    from models import cuda_kernels

    cuda_kernels.select_blocks_kernel[(B,)](
        s, block_max, rest,
        top if has_old else new_top, top_idx if has_old else new_idx,
        m if has_old else m_out, l if has_old else l_out,
        new_top, new_idx, m_out, m_safe, l_out,
        k, G, start, s.stride(0), block_max.stride(0),
        HAS_OLD=has_old, BK=BK, BLOCK=BLOCK,
        BG=256 if G <= SELECT_WARP_G else 1024, num_warps=warps,
    )  # fmt: skip
    return new_top, new_idx, m_out, m_safe, l_out


def finish_rows(  # noqa: PLR0917
    top: Tensor, top_idx: Tensor, m_safe: Tensor, l: Tensor, q: Tensor, keys: Tensor, scale2: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Indices (−1 for padding), exact scores, weights (B, k) and the log-sum-exp (B,) float64
    from the running top (B, k) x and rows, m_safe (B,) and l (B,) float64, for q (B, d) as
    multiplied (the keys' dtype) and keys (N, d) in any strides: `_exact_sums`'s sums."""
    B, k = top.shape
    top, top_idx, q = top.contiguous(), top_idx.contiguous(), q.contiguous()
    idx = torch.empty_like(top_idx)
    scores = torch.empty_like(top)
    weights = torch.empty_like(top)
    lse = torch.empty(B, dtype=torch.float64, device=top.device)
    from models import cuda_kernels

    cuda_kernels.finish_rows_kernel[(B,)](
        top, top_idx, m_safe, l, q, keys, idx, scores, weights, lse,
        k, q.shape[1], q.stride(0), keys.stride(0), keys.stride(1), *_halves(scale2),
        *_LN_2_HALVES,
        BK=max(16, 1 << (k - 1).bit_length()), BD=64,
    )  # fmt: skip
    return idx, scores, weights, lse


def _halves(x: float) -> tuple[float, float]:
    """x as hi + lo, each exact in float32: their float64 sum is x within ~2^-48 of it, where
    x rounded to float32 (as a kernel's float argument is) is within 2^-24."""
    hi = float(np.float32(x))
    return hi, float(np.float32(x - hi))


_LN_2_HALVES = _halves(LN_2)  # once, not at every call
