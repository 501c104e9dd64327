"""Exact scaled dot-product attention over a whole catalog, streamed in chunks.

For queries q (B, d), keys K (N, d) and values V (N, d_v):

    logits  = scale · q Kᵀ                      (B, N), masked entries −inf
    weights = softmax(logits)                    over every unmasked key
    output  = weights @ V                        (B, d_v)

plus the top-k keys by weight. Nothing of size (B, N) is ever held: the keys are
visited in chunks of C, and per chunk we keep a running top-k, a running
log-sum-exp and (with values) a running, max-rescaled output, exactly as
flash-attention merges blocks. Memory is O(B·C + B·k + B·d_v) for any N.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from models import cpu_blas

DEFAULT_CHUNK_SIZE = 65_536


@dataclass(frozen=True)
class Attention:
    """The result of `attend` for a batch of B queries.

    Rows with fewer than k unmasked keys are padded: index −1, score −inf, weight 0.
    """

    indices: Tensor  # (B, k') int64 row numbers into keys, best first; k' = min(k, N)
    scores: Tensor  # (B, k') raw q·k (the exact dot product, rounded once to float32)
    weights: Tensor  # (B, k') softmax weight over all unmasked keys
    logsumexp: Tensor  # (B,) float64 log Σ exp(logits); −inf for a fully masked row
    matched: Tensor  # (B,) int64 number of unmasked keys
    output: Tensor | None  # (B, d_v) weights_all @ values, or None without values


def attend(
    q: Tensor,
    keys: Tensor,
    values: Tensor | None = None,
    *,
    k: int,
    scale: float | None = None,
    mask: Tensor | None = None,
    chunk_size: int | None = None,
) -> Attention:
    """Top-k keys of softmax(scale · q Kᵀ) with their exact weights; `output` if values given.

    `scale` defaults to 1/√d as in `torch.nn.functional.scaled_dot_product_attention`.
    `mask` is bool, (B, N) or (N,), True where a key may be attended to.
    """
    scale, mask = _check(q, keys, values, k=k, scale=scale, mask=mask)
    B, N = q.shape[0], keys.shape[0]
    C = chunk_size or DEFAULT_CHUNK_SIZE
    device = keys.device
    q = q.to(device=device, dtype=keys.dtype)
    kk = min(k, N)
    top_scores = torch.full((B, kk), -math.inf, device=device)  # (B, k) running best q·k
    top_idx = torch.full((B, kk), -1, dtype=torch.long, device=device)
    m = torch.full((B,), -math.inf, device=device)  # (B,) running max logit
    # Σ exp(logit − m) across chunks in float64: (B,) only, and the sum stays exact to ~1e-7
    # however many chunks it crosses.
    l = torch.zeros(B, device=device, dtype=torch.float64)  # (B,)
    acc = None if values is None else torch.zeros(B, values.shape[1], device=device)  # (B, d_v)
    matched = torch.zeros(B, dtype=torch.long, device=device)
    # One scores buffer for every full chunk, updated in place: a fresh (B, C) tensor per op
    # costs more in allocation and page faults than the arithmetic on it.
    buf = torch.empty(B, min(C, N), device=device)  # (B, C)

    for start in range(0, N, C):
        kc = keys[start : start + C]  # (C, d)
        out = buf if len(kc) == buf.shape[1] else torch.empty(B, len(kc), device=device)
        s = raw_scores(q, kc, out=out)  # (B, C) raw q·k, fp32
        if mask is not None:
            mc = mask[..., start : start + C]  # (C,) or (B, C)
            s.masked_fill_(~mc, -math.inf)
            matched += mc.sum(-1) if mc.dim() == 2 else mc.sum()
        else:
            matched += kc.shape[0]

        # running top-k by raw score (scale > 0 keeps the order), before the exp below
        # overwrites s: the chunk's best ∪ the best so far
        c_scores, c_pos = s.topk(min(kk, len(kc)), dim=-1)  # (B, ck), descending
        top_scores, best = torch.cat([top_scores, c_scores], dim=-1).topk(kk, dim=-1)  # (B, k)
        top_idx = torch.cat([top_idx, c_pos + start], dim=-1).gather(1, best)

        # running log-sum-exp (and output), rescaled to the new max like flash-attention
        top_logit = c_scores[:, 0] * scale  # (B,) the chunk's max is its top-1
        m_new = torch.maximum(m, top_logit)
        m_safe = torch.where(torch.isinf(m_new), 0.0, m_new)
        alpha = torch.exp(m - m_safe)  # (B,) 0 where m was −inf
        p = s.mul_(scale).sub_(m_safe[:, None]).exp_()  # (B, C) exp(logit − m), in place
        if acc is not None and values is not None:
            acc = acc * alpha[:, None] + p @ values[start : start + C].to(p.dtype)  # (B, d_v)
        # Σ p in float32 but for the chunk's top key, whose term goes in in float64: a float32
        # sum keeps ~1e-7 of its largest terms, and of a peaked softmax that is 1e-7 of the
        # log-sum-exp, which a mixture's entropy (models/mixture.py) would carry as 1e-6 and
        # more, and shards (their own sums) would disagree on. The rest is small when peaked.
        top_p = torch.exp(top_logit.double() - m_safe.double())  # (B,)
        rest = p.scatter_(1, c_pos[:, :1], 0.0).sum(dim=-1).double()  # (B,)
        l = l * torch.exp(m.double() - m_safe.double()) + top_p + rest
        m = m_new

    # The winners' scores again, exactly (float64 over their k gathered keys): how a BLAS sums
    # a chunk's products depends on the chunk's shape (OpenBLAS's edge kernels differ), so the
    # float32 scores of one key can differ in the last bit between a whole index and a shard.
    # Their exact values replace their float32 terms in the sum too: they are its largest, so
    # the weights agree to ~1e-7 however the keys were chunked or sharded.
    found = torch.isfinite(top_scores)  # (B, k) False for masked keys and padding
    top_idx = torch.where(found, top_idx, -1)
    rows = keys[top_idx.clamp_min(0)].double()  # (B, k, d)
    exact = torch.einsum("bd,bkd->bk", q.double(), rows)  # (B, k) float64
    m64 = torch.where(torch.isinf(m), 0.0, m).double()[:, None]  # (B, 1)
    summed = torch.exp((top_scores * scale).double() - m64)  # their terms as summed (≈)
    l = l + torch.where(found, torch.exp(exact * scale - m64) - summed, 0.0).sum(-1)
    lse = torch.where(l > 0, m64[:, 0] + torch.log(l.clamp_min(1e-300)), -math.inf)  # (B,)
    weights = torch.exp(exact * scale - torch.where(found, lse[:, None], 0.0))
    top_scores = torch.where(found, exact, -math.inf).float()
    output = None
    if acc is not None:
        output = torch.where(l[:, None] > 0, acc / l.clamp_min(1e-300).float()[:, None], 0.0)
    return Attention(
        indices=top_idx,
        scores=top_scores,  # −inf where not found already
        weights=torch.where(found, weights, 0.0).float(),
        logsumexp=lse,  # float64: shards' answers merge by it (models/sharded.py)
        matched=matched,
        output=output,
    )


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
