"""Exact scaled dot-product attention over a whole catalog, streamed in chunks.

For queries q (B, d), keys K (N, d) and values V (N, d_v):

    logits  = scale · q Kᵀ                      (B, N), masked entries −inf
    weights = softmax(logits)                    over every unmasked key
    output  = weights @ V                        (B, d_v)

plus the top-k keys by weight: `reference_attention`, the listing above, is what `attend`
computes and what the tests hold it to. `attend` never holds anything of size (B, N): it scores
the keys in chunks of C and folds each into a `RunningSoftmax` (running top-k, max, sum and,
with values, output), as flash-attention merges blocks. Memory is O(B·C + B·k + B·d_v). What it
does to each chunk (its logits into a reused buffer, a block-max top-k, the winners' exact
rescoring) is in models/attention_chunks.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from models.attention_chunks import (
    BLOCK,
    chunk_candidates,
    chunk_logits,
    exact_scores,
    logits_buffer,
    whole_blocks,
)

# Logits per chunk (B·C) when `attend` sizes the chunk: 64 MiB of fp32. Up to it, bigger chunks
# measured faster at N = 1M (B = 1: 19.1 q/s in one chunk against 16.1 in chunks of 65,536;
# B = 256: 157 q/s at 65,536 against 151 at 16,384): each chunk's top-k and bookkeeping cost
# more than reading its logits back from DRAM.
SCORES_BUDGET = 1 << 24
# On a GPU, 1 GiB: on an H200 each chunk cost ~0.4 ms beyond its bytes (its few dozen kernel
# launches), so wider chunks paid there (N = 10M fp16 keys, B = 256: 38 ms a call in chunks of
# 2^20 against 96 ms in chunks of 65,536; B = 16: 4.8 ms in chunks of 2^22 against 8.1 in 2^20).
CUDA_SCORES_BUDGET = 1 << 28
LOG2_E, LN_2 = 1 / math.log(2), math.log(2)
# a chunk whose rows' max x are all within ±UNSHIFTED (or −inf) sums 2^x as it is: ≤ 2^24 terms
# of at most 2^64 stay far from float32's 2^128, and what underflows is under 2^−62 of its max
UNSHIFTED = 64.0


@dataclass(frozen=True)
class Attention:
    """The result of `attend` (or `reference_attention`) for a batch of B queries.

    Rows with fewer than k unmasked keys are padded: index −1, score −inf, weight 0.
    """

    indices: Tensor  # (B, k') int64 row numbers into keys, best first; k' = min(k, N)
    scores: Tensor  # (B, k') raw q·k (the exact dot product, rounded once to float32)
    weights: Tensor  # (B, k') softmax weight over all unmasked keys
    logsumexp: Tensor  # (B,) float64 log Σ exp(logits); −inf for a fully masked row
    matched: Tensor  # (B,) int64 number of unmasked keys
    output: Tensor | None  # (B, d_v) weights_all @ values, or None without values


def chunk_for(B: int, N: int, device: torch.device | None = None) -> int:  # noqa: N803
    """Keys per chunk for B queries over N keys on `device` (the CPU if None): (B, C) logits
    within the device's budget, at most N rounded up to a whole BLOCK."""
    budget = CUDA_SCORES_BUDGET if device is not None and device.type == "cuda" else SCORES_BUDGET
    return whole_blocks(min(max(BLOCK, budget // max(B, 1)), max(N, 1)))


def reference_attention(
    q: Tensor,
    keys: Tensor,
    values: Tensor | None = None,
    *,
    k: int,
    scale: float | None = None,
    mask: Tensor | None = None,
) -> Attention:
    """What `attend` computes, as the textbook lists it: the whole (B, N) logits at once, in
    float64 (q rounded to the keys' dtype first, as `attend` multiplies). O(B·N) memory."""
    scale, mask = _check(q, keys, values, k=k, scale=scale, mask=mask)
    B, N = q.shape[0], keys.shape[0]
    mask = torch.ones(N, dtype=torch.bool, device=keys.device) if mask is None else mask
    raw = q.to(keys.device, keys.dtype).double() @ keys.double().T  # (B, N) q·k
    att = (raw * scale).masked_fill(~mask, -math.inf)  # (B, N) logits, masked −inf
    lse = att.logsumexp(dim=-1)  # (B,) −inf for a fully masked row
    weights = att.softmax(dim=-1).nan_to_num(0.0)  # (B, N) a fully masked row's NaN → 0
    top, idx = att.topk(min(k, N), dim=-1)  # (B, k') best first
    found = torch.isfinite(top)  # (B, k') False past a row's unmasked keys: padding
    return Attention(
        indices=torch.where(found, idx, -1),
        scores=torch.where(found, raw.gather(1, idx), -math.inf).float(),
        weights=weights.gather(1, idx).float(),  # 0 for padding
        logsumexp=lse,
        matched=mask.expand(B, N).sum(-1),
        output=None if values is None else (weights @ values.double()).float(),  # (B, d_v)
    )


def attend(
    q: Tensor,
    keys: Tensor,
    values: Tensor | None = None,
    *,
    k: int,
    scale: float | None = None,
    mask: Tensor | None = None,
    chunk_size: int | None = None,
    scores_out: Tensor | None = None,
) -> Attention:
    """Top-k keys of softmax(scale · q Kᵀ) with their exact weights; `output` if values given:
    `reference_attention`, in chunks.

    `scale` defaults to 1/√d as in `torch.nn.functional.scaled_dot_product_attention`.
    `mask` is bool, (B, N) or (N,), True where a key may be attended to. `chunk_size` keys per
    chunk; by default `chunk_for(B, N, keys.device)`. `scores_out`, a (B, N) fp32 tensor on the
    keys' device, receives every raw score q·k (float32, masked keys too): O(B·N), for a caller
    that would otherwise read the keys again (the mixture's entropy sweep, models/heads.py).
    """
    scale, mask = _check(q, keys, values, k=k, scale=scale, mask=mask)
    B, N = q.shape[0], keys.shape[0]
    if N == 0:  # nothing to stream
        return reference_attention(q, keys, values, k=k, scale=scale, mask=mask)
    device = keys.device
    C = chunk_size or chunk_for(B, N, device)
    q = q.to(device=device, dtype=keys.dtype)
    # The loop works in base-2 logits x = log2(e) · scale · q·k, Σ 2^x being Σ e^logit: exp2
    # ran 2.2x faster than exp here, and the exp is most of what the loop adds to the product.
    # fp32 keys: x straight from the product (scale > 0 keeps the order, and the winners'
    # scores are recomputed exactly at the end); half keys, or raw scores asked for: scaled
    # after (not rounded to half; the raw scores not rounded twice).
    scale2 = scale * LOG2_E
    qs = q * scale2 if keys.dtype == torch.float32 and scores_out is None else q  # (B, d)
    # (B,) unmasked keys: counted chunk by chunk with a mask, else all N
    matched = torch.full((B,), N if mask is None else 0, dtype=torch.long, device=device)
    state = RunningSoftmax(min(k, N), matched)
    buf = logits_buffer(B, whole_blocks(min(C, N)), device)  # (B, W) W ≥ C
    for start in range(0, N, C):
        kc = keys[start : start + C]  # (c, d)
        s = buf[:, : whole_blocks(kc.shape[0])]  # (B, c rounded up to whole blocks)
        kept = None if scores_out is None else scores_out[:, start : start + C]
        chunk_logits(s, qs, kc, scale=scale2 if qs is q else None, kept=kept)  # s = x
        vc = None if values is None else values[start : start + C]  # (c, d_v)
        state.fold(s, start, vc, None if mask is None else mask[..., start : start + C])
    return state.finish(q, keys, scale=scale)


@dataclass
class RunningSoftmax:
    """The softmax over the chunks folded in so far, in base-2 logits x, merged as flash-attention
    merges blocks; None before the first chunk (a small catalog has just one)."""

    k: int  # k' = min(k, N)
    matched: Tensor  # (B,) int64 unmasked keys (so far, with a mask)
    top: Tensor | None = None  # (B, k') the largest x, descending
    top_idx: Tensor | None = None  # (B, k') their rows, −1 for padding
    m: Tensor | None = None  # (B,) max x; −inf for a row masked so far
    m_safe: Tensor | None = None  # (B,) m, but 0 where −inf: what l and acc are relative to
    l: Tensor | None = None  # (B,) float64 Σ 2^(x − m_safe)
    acc: Tensor | None = None  # (B, d_v) Σ 2^(x − m_safe)·v, with values

    def fold(self, s: Tensor, start: int, values: Tensor | None, mask: Tensor | None) -> None:
        """Fold in a chunk of c keys from row `start` on: their x, s (B, c rounded up to whole
        BLOCKs, −inf past the keys), values (c, d_v) and mask ((c,) or (B, c)). Overwrites s."""
        if mask is not None:
            s[:, : mask.shape[-1]].masked_fill_(~mask, -math.inf)
            self.matched += mask.sum(-1) if mask.dim() == 2 else mask.sum()
        # running top-k, before the exp overwrites s; and the chunk's max x and its column
        cand, cand_col, c_max, c_arg = chunk_candidates(s, self.k)  # (B, k'), ..., (B, 1)
        self._merge_top(cand, cand_col + start if start else cand_col)
        # running log-sum-exp (and output), rescaled to the new max like flash-attention
        m_old = self.m
        self.m = c_max if m_old is None else torch.maximum(m_old, c_max)  # (B,)
        self.m_safe = m_safe = self.m.nan_to_num(neginf=0.0)  # 0, not −inf, for masked rows
        # (B,) float64 2^(m_old − m_new), 0 where m_old was −inf; none for the first chunk
        alpha = None if m_old is None else torch.exp2(m_old.double() - m_safe.double())
        if values is None and _unshifted(c_max):
            # 2^x itself, and the sum rescaled by 2^(−m) in float64 after: one pass over the
            # (B, c) logits fewer than subtracting m first (4% of attend at N = 100k, B = 256), and
            # the same float32 mantissas summed, none overflowing nor lost to underflow
            p = s.exp2_()  # (B, c) 2^x, in place
            shift = torch.exp2(-m_safe.double())  # (B,)
        else:
            p = s.sub_(m_safe[:, None]).exp2_()  # (B, c) 2^(x − m) = e^(logit − m·ln 2)
            shift = None
        if values is not None:
            pv = p[:, : values.shape[0]] @ values.to(p.dtype)  # (B, d_v)
            acc = self.acc
            self.acc = pv if acc is None or alpha is None else acc * alpha.float()[:, None] + pv
        # Σ p in float32 but for the chunk's top key, whose term goes in in float64: a float32
        # sum keeps ~1e-7 of its largest terms, and of a peaked softmax that is 1e-7 of the
        # log-sum-exp, which a mixture's entropy (models/mixture.py) would carry as 1e-6 and
        # more, and shards (their own sums) would disagree on. The rest is small when peaked.
        top_p = torch.exp2(c_max.double() - m_safe.double())  # (B,)
        rest = p.scatter_(1, c_arg, 0.0).sum(dim=-1).double()  # (B,)
        if shift is not None:
            rest = rest * shift
        l = self.l
        self.l = top_p + rest if l is None or alpha is None else l * alpha + top_p + rest

    def _merge_top(self, cand: Tensor, cand_idx: Tensor) -> None:
        """The k best of the running top (B, k) and a chunk's candidates (B, k'), with their
        rows; the first chunk's k sorted candidates are taken as they are."""
        k, top, top_idx = self.k, self.top, self.top_idx
        if top is not None and top_idx is not None:
            cand, cand_idx = torch.cat([top, cand], dim=-1), torch.cat([top_idx, cand_idx], dim=-1)
        elif cand.shape[1] == k:  # a whole chunk's own top-k, already sorted (chunk_candidates)
            self.top, self.top_idx = cand, cand_idx
            return
        if cand.shape[1] < k:  # fewer keys so far than k: pad, as a row short of keys ends
            pad = k - cand.shape[1]
            cand = torch.cat([cand, cand.new_full((cand.shape[0], pad), -math.inf)], dim=-1)
            cand_idx = torch.cat([cand_idx, cand_idx.new_full((cand.shape[0], pad), -1)], dim=-1)
        best_x, best = cand.topk(k, dim=-1)  # (B, k)
        self.top, self.top_idx = best_x, cand_idx.gather(1, best)

    def finish(self, q: Tensor, keys: Tensor, *, scale: float) -> Attention:
        """The result, once every chunk of keys is folded in."""
        if self.top is None or self.top_idx is None or self.m_safe is None or self.l is None:
            raise ValueError("no chunk was folded in")
        top, m, l, acc = self.top, self.m_safe, self.l, self.acc
        # The winners' scores again, exactly (float64 over their k gathered keys): how a BLAS
        # sums a chunk's products depends on the chunk's shape (OpenBLAS's edge kernels
        # differ), so the float32 scores of one key can differ in the last bit between a whole
        # index and a shard. Their exact values replace their float32 terms in the sum too:
        # they are its largest, so the weights agree to ~1e-7 however the keys were chunked.
        found = torch.isfinite(top)  # (B, k) False for masked keys and padding
        top_idx = torch.where(found, self.top_idx, -1)
        exact = exact_scores(q, keys, top_idx.clamp_min(0))  # (B, k) float64
        z = exact * scale  # (B, k) their exact logits
        m2 = m.double()[:, None]  # (B, 1) the max x the sum is relative to
        m64 = m2 * LN_2  # (B, 1) in natural log units
        summed = torch.exp2(top.double() - m2)  # their terms as summed (≈)
        l = l + torch.where(found, torch.exp(z - m64) - summed, 0.0).sum(-1)
        lse = torch.where(l > 0, m64[:, 0] + torch.log(l.clamp_min(1e-300)), -math.inf)  # (B,)
        weights = torch.exp(z - lse[:, None])  # (B, k) inf where a row has no keys: not found
        output = None
        if acc is not None:
            output = torch.where(l[:, None] > 0, acc / l.clamp_min(1e-300).float()[:, None], 0.0)
        return Attention(
            indices=top_idx,
            scores=torch.where(found, exact, -math.inf).float(),
            weights=torch.where(found, weights, 0.0).float(),
            logsumexp=lse,  # float64: shards' answers merge by it (models/shard_merge.py)
            matched=self.matched,
            output=output,
        )


def _unshifted(c_max: Tensor) -> bool:
    """Whether a chunk of rows' max x `c_max` (B,) may be exponentiated without subtracting
    the max first (UNSHIFTED); only on the CPU, where reading c_max waits for nothing."""
    if c_max.device.type != "cpu":
        return False
    m = c_max.numpy()
    return bool(np.all((np.abs(m) <= UNSHIFTED) | (m == -np.inf)))


def _check(
    q: Tensor,
    keys: Tensor,
    values: Tensor | None,
    *,
    k: int,
    scale: float | None,
    mask: Tensor | None,
) -> tuple[float, Tensor | None]:
    """Validated arguments: the scale to use and the mask as bool on the keys' device."""
    if q.dim() != 2 or keys.dim() != 2 or q.shape[1] != keys.shape[1]:
        raise ValueError(
            f"need q (B, d) and keys (N, d), got {tuple(q.shape)}, {tuple(keys.shape)}"
        )
    if values is not None and values.shape[0] != keys.shape[0]:
        raise ValueError(f"values have {values.shape[0]} rows, keys {keys.shape[0]}")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    scale = 1.0 / math.sqrt(q.shape[1]) if scale is None else scale
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}")
    if mask is not None:
        B, N = q.shape[0], keys.shape[0]
        mask = mask.to(device=keys.device, dtype=torch.bool)
        if mask.shape not in ((N,), (B, N)):
            raise ValueError(
                f"mask must be (N,) or (B, N), got {tuple(mask.shape)} for N={N}, B={B}"
            )
    return scale, mask
