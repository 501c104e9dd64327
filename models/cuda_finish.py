"""The running softmax's bookkeeping on the GPU in two small kernels, where torch's operations on
(B,) and (B, k) tensors took some fifty launches a call (models/running_softmax.py):

- `merge_blocks`: a chunk's block maxima and rests (models/cuda_fold.py) into the running max
  m and sum l = Σ 2^(x − m), in float64;
- `finish_rows`: the winners' exact float64 scores and, with them, the sum, the log-sum-exp and
  the weights, as `_exact_sums` computes them.

Below a million keys a call's time was these launches, not its bytes (an H200 took 0.17 ms a
call at N = 10k with them in a CUDA graph, 1.1-1.8 ms without). One program per query row.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

try:  # as models/cuda_fold.py; these run only where its `on_device` holds
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the install
    triton = None

LN_2 = math.log(2)

if triton is not None:

    @triton.jit
    def _merge_blocks_kernel(  # noqa: PLR0917
        bmax_ptr, rest_ptr, m_ptr, m_safe_ptr, l_ptr,
        G, stride_xb,
        HAS_OLD: tl.constexpr, BG: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0).to(tl.int64)
        mx = tl.full((BG,), float("-inf"), tl.float32)
        for g0 in range(0, G, BG):
            g = g0 + tl.arange(0, BG)
            mx = tl.maximum(mx, tl.load(bmax_ptr + b * stride_xb + g, mask=g < G, other=-math.inf))
        m = tl.max(mx, axis=0)  # the chunk's max x
        if HAS_OLD:
            m_old = tl.load(m_ptr + b)
            m = tl.maximum(m, m_old)
        m_safe = tl.where(m == float("-inf"), 0.0, m).to(tl.float64)  # 0 for a masked row
        total = tl.zeros((BG,), tl.float64)
        for g0 in range(0, G, BG):
            g = g0 + tl.arange(0, BG)
            ok = g < G
            bm = tl.load(bmax_ptr + b * stride_xb + g, mask=ok, other=-math.inf).to(tl.float64)
            r = tl.load(rest_ptr + b * stride_xb + g, mask=ok, other=0.0).to(tl.float64)
            total += tl.exp2(bm - m_safe) * (1.0 + r)  # 0 for a −inf block
        l = tl.sum(total, axis=0)
        if HAS_OLD:
            l += tl.load(l_ptr + b) * tl.exp2(m_old.to(tl.float64) - m_safe)
        tl.store(m_ptr + b, m)
        tl.store(m_safe_ptr + b, m_safe.to(tl.float32))
        tl.store(l_ptr + b, l)

    @triton.jit
    def _finish_rows_kernel(  # noqa: PLR0917
        top_ptr, top_idx_ptr, m_safe_ptr, l_ptr, q_ptr, k_ptr,
        idx_ptr, scores_ptr, weights_ptr, lse_ptr,
        k, D, stride_qb, stride_kn, stride_kd, scale2_hi, scale2_lo, ln2_hi, ln2_lo,
        BK: tl.constexpr, BD: tl.constexpr,
    ):  # fmt: skip
        # float arguments arrive as float32: the float64 constants come as two halves each
        scale2 = tl.cast(scale2_hi, tl.float64) + tl.cast(scale2_lo, tl.float64)
        ln2 = tl.cast(ln2_hi, tl.float64) + tl.cast(ln2_lo, tl.float64)
        b = tl.program_id(0).to(tl.int64)
        j = tl.arange(0, BK)
        j_ok = j < k
        top = tl.load(top_ptr + b * k + j, mask=j_ok, other=-math.inf)  # (BK,) x as summed
        found = top > float("-inf")  # False for masked keys and padding
        idx = tl.where(found, tl.load(top_idx_ptr + b * k + j, mask=j_ok, other=0), -1)
        safe = tl.maximum(idx, 0)
        exact = tl.zeros((BK,), tl.float64)  # their q·k, float32 products exact in float64
        for d0 in range(0, D, BD):
            dd = (d0 + tl.arange(0, BD)).to(tl.int64)
            d_ok = dd < D
            qv = tl.load(q_ptr + b * stride_qb + dd, mask=d_ok, other=0.0).to(tl.float64)
            kv = tl.load(
                k_ptr + safe[:, None] * stride_kn + dd[None, :] * stride_kd,
                mask=j_ok[:, None] & d_ok[None, :],
                other=0.0,
            ).to(tl.float64)  # (BK, BD)
            exact += tl.sum(kv * qv[None, :], axis=1)
        m = tl.load(m_safe_ptr + b).to(tl.float64)
        z = exact * scale2  # their exact x
        # their exact terms in place of their terms as summed: the sum's largest
        fix = tl.where(found, tl.exp2(z - m) - tl.exp2(top.to(tl.float64) - m), 0.0)
        l = tl.load(l_ptr + b) + tl.sum(fix, axis=0)
        lse2 = tl.where(l > 0, m + tl.log2(tl.where(l > 0, l, 1.0)), float("-inf"))
        tl.store(idx_ptr + b * k + j, idx, mask=j_ok)
        tl.store(scores_ptr + b * k + j, tl.where(found, exact, float("-inf")), mask=j_ok)
        tl.store(weights_ptr + b * k + j, tl.where(found, tl.exp2(z - lse2), 0.0), mask=j_ok)
        tl.store(lse_ptr + b, lse2 * ln2)


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
    _merge_blocks_kernel[(B,)](
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
    _finish_rows_kernel[(B,)](
        top, top_idx, m_safe, l, q, keys, idx, scores, weights, lse,
        k, q.shape[1], q.stride(0), keys.stride(0), keys.stride(1), *_halves(scale2),
        *_halves(LN_2),
        BK=max(16, triton.next_power_of_2(k)), BD=64,
    )  # fmt: skip
    return idx, scores, weights, lse


def _halves(x: float) -> tuple[float, float]:
    """x as hi + lo, each exact in float32: their float64 sum is x within ~2^-48 of it, where
    x rounded to float32 (as a kernel's float argument is) is within 2^-24."""
    hi = float(np.float32(x))
    return hi, float(np.float32(x - hi))
