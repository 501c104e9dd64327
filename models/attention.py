"""Exact scaled dot-product attention over a whole catalog, streamed in chunks.

For queries q (B, d), keys K (N, d) and values V (N, d_v):

    logits  = scale · q Kᵀ                      (B, N), masked entries −inf
    weights = softmax(logits)                    over every unmasked key
    output  = weights @ V                        (B, d_v)

plus the top-k keys by weight: `reference_attention`, the listing above, is what `attend`
computes and what the tests hold it to. `attend` never holds anything of size (B, N): it scores
the keys in chunks of C and folds each into a `RunningSoftmax` (running top-k, max, sum and,
with values, output; models/running_softmax.py), as flash-attention merges blocks. Memory is
O(B·C + B·k + B·d_v). What it does to each chunk (its logits into a reused buffer, a block-max
top-k, the winners' exact rescoring) is in models/attention_chunks.py, on the CPU in C
(models/cpu_kernels.py), and on a GPU in Triton kernels (models/cuda_fold.py,
models/cuda_finish.py), a call of a shape seen before replayed from a CUDA graph
(models/cuda_graphs.py).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from models import cuda_finish, cuda_fold, cuda_graphs
from models.attention_chunks import BLOCK, chunk_logits, logits_buffer, whole_blocks
from models.running_softmax import LOG2_E, Attention, RunningSoftmax

__all__ = ["Attention", "attend", "chunk_for", "reference_attention"]

# Logits per chunk (B·C) when `attend` sizes the chunk: 64 MiB of fp32. Up to it, bigger chunks
# measured faster at N = 1M (B = 1: 19.1 q/s in one chunk against 16.1 in chunks of 65,536;
# B = 256: 157 q/s at 65,536 against 151 at 16,384): each chunk's top-k and bookkeeping cost
# more than reading its logits back from DRAM.
SCORES_BUDGET = 1 << 24
# On a GPU, 1 GiB: on an H200 each chunk cost ~0.4 ms beyond its bytes (its few dozen kernel
# launches), so wider chunks paid there (N = 10M fp16 keys, B = 256: 38 ms a call in chunks of
# 2^20 against 96 ms in chunks of 65,536; B = 16: 4.8 ms in chunks of 2^22 against 8.1 in 2^20).
CUDA_SCORES_BUDGET = 1 << 28


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
    C = chunk_size or chunk_for(B, N, keys.device)
    if scores_out is None and cuda_graphs.applies(keys, B, C):

        def run(q: Tensor, mask: Tensor | None) -> list[Tensor | None]:
            a = _attend_chunks(q, keys, values, k=k, scale=scale, mask=mask, C=C, scores_out=None)
            return [a.indices, a.scores, a.weights, a.logsumexp, a.matched, a.output]

        # a graph holds the passes it was captured with: those switched on are part of its key
        passes = (cuda_fold.available(), cuda_finish.select_enabled())
        outs = cuda_graphs.replay(
            run, q, keys, values=values, mask=mask, shape_key=(k, scale, C, passes)
        )
        if outs is not None:
            indices, scores, weights, lse, matched, output = outs
            assert indices is not None and scores is not None and weights is not None
            assert lse is not None and matched is not None
            return Attention(indices, scores, weights, lse, matched, output)
    return _attend_chunks(q, keys, values, k=k, scale=scale, mask=mask, C=C, scores_out=scores_out)


def _attend_chunks(
    q: Tensor,
    keys: Tensor,
    values: Tensor | None,
    *,
    k: int,
    scale: float,
    mask: Tensor | None,
    C: int,  # noqa: N803
    scores_out: Tensor | None,
) -> Attention:
    """`attend`'s loop over the chunks, its arguments checked."""
    B, N = q.shape[0], keys.shape[0]
    device = keys.device
    q = q.to(device=device, dtype=keys.dtype)
    # The loop works in base-2 logits x = log2(e) · scale · q·k, Σ 2^x being Σ e^logit: exp2
    # ran 2.2x faster than exp here, and the exp is most of what the loop adds to the product.
    # fp32 keys: x straight from the product (scale > 0 keeps the order, and the winners'
    # scores are recomputed exactly at the end); half keys, or raw scores asked for: scaled
    # after (not rounded to half; the raw scores not rounded twice).
    scale2 = scale * LOG2_E
    qs = q  # (B, d)
    if keys.dtype == torch.float32 and scores_out is None:
        # numpy on the CPU: torch's multiply of (256, 384) woke a second OpenMP thread (~50 µs)
        cpu = q.device.type == "cpu"
        qs = torch.from_numpy(q.numpy() * np.float32(scale2)) if cpu else q * scale2
    # (B,) unmasked keys: counted chunk by chunk with a mask, else all N
    matched = torch.full((B,), N if mask is None else 0, dtype=torch.long, device=device)
    state = RunningSoftmax(min(k, N), matched)
    buf = logits_buffer(B, whole_blocks(min(C, N)), device)  # (B, W) W ≥ C
    # on a GPU, without values: each chunk's block maxima and sums in a kernel, half keys'
    # logits in it too (fp32 keys: cuBLAS's product first)
    blocks = values is None and cuda_fold.on_device(keys)
    fused = blocks and cuda_fold.applies(keys)
    for start in range(0, N, C):
        kc = keys[start : start + C]  # (c, d)
        s = buf[:, : whole_blocks(kc.shape[0])]  # (B, c rounded up to whole blocks)
        kept = None if scores_out is None else scores_out[:, start : start + C]
        mc = None if mask is None else mask[..., start : start + C]  # (c,) or (B, c)
        if fused:
            block_max, rest = cuda_fold.logits_fold(s, q, kc, scale2=scale2, kept=kept, mask=mc)
        else:
            chunk_logits(s, qs, kc, scale=scale2 if qs is q else None, kept=kept)  # s = x
            if not blocks:
                vc = None if values is None else values[start : start + C]  # (c, d_v)
                state.fold(s, start, vc, mc)
                continue
            block_max, rest = cuda_fold.block_fold(s, kc.shape[0], mc)
        if mc is not None:
            state.count(mc)
        state.fold_blocks(s, block_max, rest, start)
    return state.finish(q, keys, scale=scale)


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
