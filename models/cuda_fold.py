"""A chunk of `attend` (models/attention.py) in one CUDA kernel: the logits and what the running
softmax needs of them, written in the one read of the keys that the product makes.

torch's passes on the GPU wrote a chunk's raw scores, then read and wrote them again four
times (the scale, the block maxima, exp2 after the max, a scatter, the sum), a few dozen
launches a call. `logits_fold` computes, per query row b and block of BLOCK (64) columns j:

    x[b, j]    = scale2 · q_b · k_j       (−inf where masked, and past the chunk's keys)
    bmax[b, g] = max of block g's x
    rest[b, g] = Σ_{x < bmax} 2^(x − bmax) + (#{x = bmax} − 1)   (0 for an all −inf block)

so Σ_j 2^(x_j − m) over the chunk is Σ_g 2^(bmax_g − m) · (1 + rest_g): each block's top term
is an exact 1 outside the float32 sum, as the CPU path keeps a chunk's top term out of it. The
block maxima are those `chunk_candidates` takes the top k by. Triton (models/cuda_kernels.py,
imported at the first launch); on the CPU only under TRITON_INTERPRET=1
(tests/test_cuda_fold.py), and absent without the `triton` package, where `attend` keeps
torch's passes (`available`).
"""

from __future__ import annotations

import importlib.util
import os

import torch
from torch import Tensor

from models.attention_chunks import BLOCK

# the CUDA builds of torch bring triton; the CPU build does not
_HAS_TRITON = importlib.util.find_spec("triton") is not None
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
_state: dict[str, bool] = {"enabled": True}


def available() -> bool:
    """Whether the kernel can run (triton is installed) and is enabled (`set_enabled`)."""
    return _HAS_TRITON and _state["enabled"]


def set_enabled(enabled: bool) -> None:
    """Use the kernel where it applies (True, the default) or torch's passes (benchmarks)."""
    _state["enabled"] = enabled


def on_device(keys: Tensor) -> bool:
    """Whether the kernels here (and models/cuda_finish.py's) run for these keys: on a CUDA
    device, or any under TRITON_INTERPRET=1."""
    return available() and (keys.is_cuda or _INTERPRET)


def applies(keys: Tensor) -> bool:
    """Whether `attend` over these keys takes `logits_fold`: fp16 or bf16 keys `on_device`.
    Not fp32: tl.dot's full-precision fp32 product runs on the CUDA cores, 16 query rows at the
    least, and took 4x cuBLAS's time at B = 1, N = 10M on an H200 (17.2 against 4.1 ms): fp32
    keys take cuBLAS's product, then `block_fold`."""
    return on_device(keys) and keys.dtype in (torch.float16, torch.bfloat16)


def logits_fold(
    s: Tensor,
    q: Tensor,
    kc: Tensor,
    *,
    scale2: float,
    kept: Tensor | None = None,
    mask: Tensor | None = None,
    bn: int | None = None,
    num_warps: int = 8,
    num_stages: int = 3,
) -> tuple[Tensor, Tensor]:
    """s (B, W), W ≥ c a whole number of BLOCKs, receives x = scale2 · q kcᵀ for the chunk's c
    keys kc (c, d) (−inf where `mask`, (c,) or (B, c) bool, is False, and past c); `kept` (B, c)
    fp32 the raw q kcᵀ. Returns the block maxima and rests (B, W / BLOCK) fp32 (module doc).
    `bn` (columns per program, a multiple of BLOCK), `num_warps` and `num_stages` are the
    launch's configuration: benchmarks/gpu.py measures six, and on an H200 at N = 10M fp16,
    B = 1, 128 columns and 8 warps read the keys at 99% of the copy bandwidth ((N, d) keys; 94%
    for the served (d, N)), where 64 / 256 columns and 4 warps gave 87-94%."""
    B, W = s.shape
    c, D = kc.shape
    assert W % BLOCK == 0 and c <= W and s.stride(1) == 1
    q = q.to(kc.dtype).contiguous()
    bmax = torch.empty(B, W // BLOCK, device=s.device)
    rest = torch.empty_like(bmax)
    BQ = 16 if B <= 16 else 32 if B <= 32 else 64  # tl.dot takes 16 rows at the least
    BN = bn or 128  # a last program past W stores nothing there
    n_row_tiles = -(-B // BQ)
    if mask is not None:
        mask = mask.view(torch.uint8)
        stride_mb = mask.stride(0) if mask.dim() == 2 else 0
    if kept is not None:
        assert kept.stride(1) == 1
    grid = (n_row_tiles * -(-W // BN),)
    from models import cuda_kernels  # triton, on a kernel's first launch

    cuda_kernels.logits_fold_kernel[grid](
        q, kc, s, bmax, rest,
        s if kept is None else kept, s if mask is None else mask,
        B, c, W, D, n_row_tiles,
        q.stride(0), kc.stride(0), kc.stride(1), s.stride(0), bmax.stride(0),
        0 if kept is None else kept.stride(0), 0 if mask is None else stride_mb,
        scale2,
        HAS_KEPT=kept is not None, HAS_MASK=mask is not None,
        BQ=BQ, BN=BN, BD=128 if D % 128 == 0 else 64 if D % 64 == 0 else 32, BLOCK=BLOCK,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return bmax, rest


def block_fold(s: Tensor, c: int, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """`logits_fold`'s block maxima and rests for a chunk whose x s (B, W) is written already
    (fp32 keys: cuBLAS's product, −inf past c), masked keys set to −inf in s first (`mask`
    (c,) or (B, c) bool)."""
    B, W = s.shape
    assert W % BLOCK == 0 and c <= W and s.stride(1) == 1
    bmax = torch.empty(B, W // BLOCK, device=s.device)
    rest = torch.empty_like(bmax)
    BQ, BN = (1, 1024) if B == 1 else (16, 128)  # one row: a wide tile, as many programs
    n_row_tiles = -(-B // BQ)
    if mask is not None:
        mask = mask.view(torch.uint8)
    stride_mb = 0 if mask is None or mask.dim() == 1 else mask.stride(0)
    from models import cuda_kernels

    cuda_kernels.block_fold_kernel[(n_row_tiles * -(-W // BN),)](
        s, bmax, rest, s if mask is None else mask,
        B, c, W, n_row_tiles, s.stride(0), bmax.stride(0), stride_mb,
        HAS_MASK=mask is not None, BQ=BQ, BN=BN, BLOCK=BLOCK,
    )  # fmt: skip
    return bmax, rest


def describe() -> str:
    """What the log and benchmarks say of the GPU passes."""
    if not _HAS_TRITON:
        return "torch (no triton)"
    return "triton" if _state["enabled"] else "torch (triton disabled)"
