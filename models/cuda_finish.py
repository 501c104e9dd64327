"""The running softmax's bookkeeping on the GPU in two small kernels (models/cuda_kernels.py),
where torch's operations on (B,) and (B, k) tensors took some thirty launches a call
(models/running_softmax.py):

- `merge_blocks`: a chunk's block maxima and rests (models/cuda_fold.py) into the running max
  m and sum l = Σ 2^(x − m), in float64;
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
