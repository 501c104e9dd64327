"""The Triton kernels of the attention core on a GPU, imported only when one runs (importing
triton takes 0.2 s): the chunk's logits and block sums (models/cuda_fold.py), the running sum
and the exact finish (models/cuda_finish.py). What each computes is said where it is launched.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl


@triton.jit
def logits_fold_kernel(  # noqa: PLR0917
    q_ptr, k_ptr, s_ptr, bmax_ptr, rest_ptr, kept_ptr, mask_ptr,
    B, c, W, D, n_row_tiles,
    stride_qb, stride_kn, stride_kd, stride_sb, stride_xb, stride_keptb, stride_mb,
    scale2,
    HAS_KEPT: tl.constexpr, HAS_MASK: tl.constexpr,
    BQ: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # one program: BQ query rows × BN columns; the row tiles of one column tile are
    # neighbours in launch order, so a key tile read for one is in L2 for the next
    pid = tl.program_id(0)
    # int64 offsets: 10M keys × 384 values is past 2^31
    rows = ((pid % n_row_tiles) * BQ + tl.arange(0, BQ)).to(tl.int64)  # (BQ,)
    cols = ((pid // n_row_tiles) * BN + tl.arange(0, BN)).to(tl.int64)  # (BN,)
    row_ok, col_ok = rows < B, cols < c
    acc = tl.zeros((BQ, BN), dtype=tl.float32)  # raw q·k
    for d0 in range(0, D, BD):
        dd = (d0 + tl.arange(0, BD)).to(tl.int64)  # (BD,)
        d_ok = dd < D
        qt = tl.load(
            q_ptr + rows[:, None] * stride_qb + dd[None, :],
            mask=row_ok[:, None] & d_ok[None, :],
            other=0.0,
        )  # (BQ, BD)
        kt = tl.load(
            k_ptr + cols[None, :] * stride_kn + dd[:, None] * stride_kd,
            mask=col_ok[None, :] & d_ok[:, None],
            other=0.0,
        )  # (BD, BN)
        acc += tl.dot(qt, kt)  # half keys: exact products, fp32 sums, as cuBLAS
    out_ok = row_ok[:, None] & col_ok[None, :]
    if HAS_KEPT:
        tl.store(kept_ptr + rows[:, None] * stride_keptb + cols[None, :], acc, mask=out_ok)
    ok = out_ok
    if HAS_MASK:
        m = tl.load(mask_ptr + rows[:, None] * stride_mb + cols[None, :], mask=out_ok, other=0)
        ok = ok & (m != 0)
    x = tl.where(ok, acc * scale2, float("-inf"))  # (BQ, BN)
    tl.store(
        s_ptr + rows[:, None] * stride_sb + cols[None, :],
        x,
        mask=row_ok[:, None] & (cols[None, :] < W),
    )
    G: tl.constexpr = BN // BLOCK
    xb = tl.reshape(x, (BQ, G, BLOCK))
    bm = tl.max(xb, axis=2)  # (BQ, G)
    below = xb < bm[:, :, None]
    e = tl.where(below, tl.exp2(xb - bm[:, :, None]), 0.0)
    n_eq = tl.sum(tl.where(below, 0.0, 1.0), axis=2)  # x = bmax (all of a −inf block)
    rest = tl.where(bm == float("-inf"), 0.0, tl.sum(e, axis=2) + (n_eq - 1.0))
    g = ((pid // n_row_tiles) * G + tl.arange(0, G)).to(tl.int64)  # (G,) block numbers
    g_ok = row_ok[:, None] & (g[None, :] * BLOCK < W)
    tl.store(bmax_ptr + rows[:, None] * stride_xb + g[None, :], bm, mask=g_ok)
    tl.store(rest_ptr + rows[:, None] * stride_xb + g[None, :], rest, mask=g_ok)


@triton.jit
def merge_blocks_kernel(  # noqa: PLR0917
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
def finish_rows_kernel(  # noqa: PLR0917
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
