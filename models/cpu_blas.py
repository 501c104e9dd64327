"""q Kᵀ on the CPU through whichever BLAS multiplies faster on this machine.

torch's CPU wheels multiply float32 matrices with MKL, numpy's with OpenBLAS. On the AMD EPYC
this project is measured on, OpenBLAS ran the attention's product (384-dim keys in (d, N)
layout, N = 1M) 1.4x faster than MKL at B = 1 and 1.5-1.7x at B = 16 and 256; FAISS, the
baseline, multiplies with OpenBLAS too. On Intel CPUs MKL is often the faster one. So the first
CPU product of a process times both on a chunk of the attention's work and keeps the faster
(logged); OpenBLAS only when torch's OpenMP threads do not spin (OMP_WAIT_POLICY=PASSIVE, as the
`attend` command sets). Both give the same scores up to float32 rounding (their summation
orders differ).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from typing import Literal

import numpy as np
import torch
from torch import Tensor

logger = logging.getLogger(__name__)

Blas = Literal["mkl", "openblas"]
_forced: list[Blas] = []  # set_blas's choice, when one was forced


def matmul(q: Tensor, kt: Tensor, *, out: Tensor | None = None) -> Tensor:
    """q (B, d) @ kt (d, C), float32 on the CPU, into `out` (B, C) when given."""
    if blas() == "openblas":
        return openblas_matmul(q, kt, out=out)
    return torch.mm(q, kt, out=out) if out is not None else torch.mm(q, kt)


def openblas_matmul(q: Tensor, kt: Tensor, *, out: Tensor | None = None) -> Tensor:
    """numpy's matmul on the tensors' memory (no copy: `kt` may be a strided view)."""
    if out is None:
        out = torch.empty(q.shape[0], kt.shape[1])
    np.matmul(q.numpy(), kt.numpy(), out=out.numpy())
    return out


def set_blas(name: Blas | None) -> None:
    """Force a BLAS for this process (benchmarks, tests); None: measure again."""
    _forced[:] = [] if name is None else [name]
    blas.cache_clear()


@functools.cache
def blas() -> Blas:
    """The faster of MKL (torch) and OpenBLAS (numpy) here, measured once per process on what
    `attend` does with a chunk: the product, then torch's top-k and exp over it. The product
    alone is not enough: torch's OpenMP threads spin-wait after each torch operation (unless
    OMP_WAIT_POLICY=PASSIVE, which the `attend` command sets), and then hold the cores that
    OpenBLAS's threads need; spinning, OpenBLAS lost here (5 q/s at N=1M, B=1, against MKL's
    16), not spinning, it won (35)."""
    if _forced:
        return _forced[0]
    if os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
        # torch's threads spin after each operation and starve OpenBLAS's: measured 4-5 q/s
        # against MKL's 16 at N = 1M, B = 1, though a short calibration can come out either way
        logger.info("CPU matmul: mkl (OMP_WAIT_POLICY is not PASSIVE)")
        return "mkl"
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(16, 384, generator=gen)  # (B, d)
    keys_t = torch.randn(384, 2 * 16_384, generator=gen)  # (d, 2C)
    out = torch.empty(16, 16_384)
    names: tuple[Blas, Blas] = ("mkl", "openblas")
    best = dict.fromkeys(names, float("inf"))
    for _ in range(3):  # taking turns, so a noisy neighbour slows both alike
        for name in names:
            t0 = time.perf_counter()
            for start in (0, 16_384):
                kt = keys_t[:, start : start + 16_384]  # (d, C), a strided view
                s = torch.mm(q, kt, out=out) if name == "mkl" else openblas_matmul(q, kt, out=out)
                s.topk(10, dim=-1)
                s.exp_().sum(-1)
            best[name] = min(best[name], time.perf_counter() - t0)
    choice: Blas = "openblas" if best["openblas"] < best["mkl"] else "mkl"
    logger.info(
        "CPU matmul: %s (attention on 2 chunks of (16, 384) x (384, 16384): MKL %.2f ms, "
        "OpenBLAS %.2f ms)",
        choice,
        best["mkl"] * 1000,
        best["openblas"] * 1000,
    )
    return choice
