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
    _fold_tile(x, rows, row_ok, pid // n_row_tiles, W, bmax_ptr, rest_ptr, stride_xb, BQ, BN, BLOCK)


@triton.jit
def block_fold_kernel(  # noqa: PLR0917
    s_ptr, bmax_ptr, rest_ptr, mask_ptr,
    B, c, W, n_row_tiles, stride_sb, stride_xb, stride_mb,
    HAS_MASK: tl.constexpr, BQ: tl.constexpr, BN: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # logits_fold_kernel's blocks for a chunk whose x cuBLAS wrote into s (fp32 keys)
    pid = tl.program_id(0)
    rows = ((pid % n_row_tiles) * BQ + tl.arange(0, BQ)).to(tl.int64)  # (BQ,)
    cols = ((pid // n_row_tiles) * BN + tl.arange(0, BN)).to(tl.int64)  # (BN,)
    row_ok = rows < B
    at = s_ptr + rows[:, None] * stride_sb + cols[None, :]
    x = tl.load(at, mask=row_ok[:, None] & (cols[None, :] < W), other=-math.inf)  # (BQ, BN)
    if HAS_MASK:  # masked keys −inf in s too: the top k is taken from it
        in_c = row_ok[:, None] & (cols[None, :] < c)
        m = tl.load(mask_ptr + rows[:, None] * stride_mb + cols[None, :], mask=in_c, other=1)
        x = tl.where(m != 0, x, float("-inf"))
        tl.store(at, x, mask=in_c)
    _fold_tile(x, rows, row_ok, pid // n_row_tiles, W, bmax_ptr, rest_ptr, stride_xb, BQ, BN, BLOCK)


@triton.jit
def _fold_tile(  # noqa: PLR0917
    x, rows, row_ok, tile, W, bmax_ptr, rest_ptr, stride_xb,
    BQ: tl.constexpr, BN: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Store the block maxima and rests of x (BQ, BN), columns tile·BN on (cuda_fold.py)."""
    G: tl.constexpr = BN // BLOCK
    xb = tl.reshape(x, (BQ, G, BLOCK))
    bm = tl.max(xb, axis=2)  # (BQ, G)
    below = xb < bm[:, :, None]
    e = tl.where(below, tl.exp2(xb - bm[:, :, None]), 0.0)
    n_eq = tl.sum(tl.where(below, 0.0, 1.0), axis=2)  # x = bmax (all of a −inf block)
    rest = tl.where(bm == float("-inf"), 0.0, tl.sum(e, axis=2) + (n_eq - 1.0))
    g = (tile * G + tl.arange(0, G)).to(tl.int64)  # (G,) block numbers
    g_ok = row_ok[:, None] & (g[None, :] * BLOCK < W)
    tl.store(bmax_ptr + rows[:, None] * stride_xb + g[None, :], bm, mask=g_ok)
    tl.store(rest_ptr + rows[:, None] * stride_xb + g[None, :], rest, mask=g_ok)


@triton.jit
def _merge_row(  # noqa: PLR0917
    bmax_row, rest_row, m_old, l_old, G, HAS_OLD: tl.constexpr, BG: tl.constexpr
):
    """A row's running (m, m_safe float64, l) after a chunk's G block maxima and rests."""
    mx = tl.full((BG,), float("-inf"), tl.float32)
    for g0 in range(0, G, BG):
        g = g0 + tl.arange(0, BG)
        mx = tl.maximum(mx, tl.load(bmax_row + g, mask=g < G, other=-math.inf))
    m = tl.max(mx, axis=0)  # the chunk's max x
    if HAS_OLD:
        m = tl.maximum(m, m_old)
    m_safe = tl.where(m == float("-inf"), 0.0, m).to(tl.float64)  # 0 for a masked row
    total = tl.zeros((BG,), tl.float64)
    for g0 in range(0, G, BG):
        g = g0 + tl.arange(0, BG)
        ok = g < G
        bm = tl.load(bmax_row + g, mask=ok, other=-math.inf).to(tl.float64)
        r = tl.load(rest_row + g, mask=ok, other=0.0).to(tl.float64)
        total += tl.exp2(bm - m_safe) * (1.0 + r)  # 0 for a −inf block
    l = tl.sum(total, axis=0)
    if HAS_OLD:
        l += l_old * tl.exp2(m_old.to(tl.float64) - m_safe)
    return m, m_safe, l


@triton.jit
def merge_blocks_kernel(  # noqa: PLR0917
    bmax_ptr, rest_ptr, m_ptr, m_safe_ptr, l_ptr,
    G, stride_xb,
    HAS_OLD: tl.constexpr, BG: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64)
    m_old = tl.load(m_ptr + b) if HAS_OLD else 0.0
    l_old = tl.load(l_ptr + b) if HAS_OLD else 0.0
    m, m_safe, l = _merge_row(
        bmax_ptr + b * stride_xb, rest_ptr + b * stride_xb, m_old, l_old, G, HAS_OLD, BG
    )
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


@triton.jit
def _top_blocks(bmax_row, k, G, BK: tl.constexpr, BG: tl.constexpr):
    """(BK,) int64 the k blocks of a row with the largest maxima, by (max descending, block
    ascending), G past them: k passes, each the largest after the last one taken."""
    zero = tl.program_id(0).to(tl.int64) * 0  # int64: the loop-carried indices are
    j = tl.arange(0, BK)
    sel = tl.zeros((BK,), tl.int64) + G
    prev_v = float("inf")
    prev_i = zero - 1
    for i in range(0, k):
        best_v = float("-inf")
        best_i = zero + G
        for g0 in range(0, G, BG):
            g = (g0 + tl.arange(0, BG)).to(tl.int64)
            v = tl.load(bmax_row + g, mask=g < G, other=-math.inf)
            ok = (g < G) & ((v < prev_v) | ((v == prev_v) & (g > prev_i)))
            tv = tl.max(tl.where(ok, v, float("-inf")), axis=0)
            ti = tl.min(tl.where(ok & (v == tv), g, G), axis=0)
            better = (tv > best_v) | ((tv == best_v) & (ti < best_i))
            best_v = tl.where(better, tv, best_v)
            best_i = tl.where(better, ti, best_i)
        sel = tl.where(j == i, best_i, sel)
        prev_v = best_v
        prev_i = best_i
    return sel


@triton.jit
def select_blocks_kernel(  # noqa: PLR0917
    s_ptr, bmax_ptr, rest_ptr, old_top_ptr, old_idx_ptr, m_ptr, l_ptr,
    top_ptr, idx_ptr, m_out_ptr, m_safe_ptr, l_out_ptr,
    k, G, start, stride_sb, stride_xb,
    HAS_OLD: tl.constexpr, BK: tl.constexpr, BG: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64)
    bmax_row = bmax_ptr + b * stride_xb
    m_old = tl.load(m_ptr + b) if HAS_OLD else 0.0
    l_old = tl.load(l_ptr + b) if HAS_OLD else 0.0
    m, m_safe, l = _merge_row(bmax_row, rest_ptr + b * stride_xb, m_old, l_old, G, HAS_OLD, BG)
    tl.store(m_out_ptr + b, m)
    tl.store(m_safe_ptr + b, m_safe.to(tl.float32))
    tl.store(l_out_ptr + b, l)
    # the candidates: the k blocks' BLOCK columns each, and the running top
    sel = _top_blocks(bmax_row, k, G, BK, BG)  # (BK,)
    taken = sel < G
    cols = sel[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]  # (BK, BLOCK) in the chunk
    x = tl.load(s_ptr + b * stride_sb + cols, mask=taken[:, None], other=-math.inf)
    far = b * 0 + start + G * BLOCK  # int64 past the chunk's rows: none
    rows = tl.where(taken[:, None], cols + start, far)  # (BK, BLOCK) catalog rows
    j = tl.arange(0, BK)
    n_old = k if HAS_OLD else 0
    ox = tl.load(old_top_ptr + b * k + j, mask=j < n_old, other=-math.inf)  # (BK,)
    orow = tl.load(old_idx_ptr + b * k + j, mask=j < n_old, other=-1)  # rows < start
    orow = tl.where(j < n_old, orow, far)  # −1 for the old top's own padding
    # the k largest, by (x descending, row ascending): k passes, as _top_blocks
    prev_v = float("inf")
    prev_i = far * 0 - 2  # below padding's −1
    for i in range(0, k):
        ok = ((x < prev_v) | ((x == prev_v) & (rows > prev_i))) & (rows < far)
        tv = tl.max(tl.max(tl.where(ok, x, float("-inf")), axis=1), axis=0)
        ti = tl.min(tl.min(tl.where(ok & (x == tv), rows, far), axis=1), axis=0)
        ook = ((ox < prev_v) | ((ox == prev_v) & (orow > prev_i))) & (orow < far)
        otv = tl.max(tl.where(ook, ox, float("-inf")), axis=0)
        oti = tl.min(tl.where(ook & (ox == otv), orow, far), axis=0)
        older = (otv > tv) | ((otv == tv) & (oti < ti))
        tv = tl.where(older, otv, tv)
        ti = tl.where(older, oti, ti)
        tl.store(top_ptr + b * k + i, tv)
        tl.store(idx_ptr + b * k + i, tl.where(ti < far, ti, -1))
        prev_v = tv
        prev_i = ti
