"""q Kᵀ on the CPU through whichever BLAS multiplies faster on this machine.

torch's CPU wheels multiply float32 matrices with MKL, numpy's with OpenBLAS. On the AMD EPYC
this project is measured on, OpenBLAS ran the attention's product (384-dim keys in (d, N)
layout, N = 1M) 1.4x faster than MKL at B = 1 and 1.5-1.7x at B = 16 and 256; FAISS, the
baseline, multiplies with OpenBLAS too. On an Intel Xeon (AVX-512) MKL was the faster one at
B = 16 and 256 (attend at N = 100k: 1.6x and 1.2-1.3x OpenBLAS's q/s) and level at B = 1, and
which one wins can change with B on one CPU. So each size of batch (`CLASSES`: B = 1, 16, 256
stand for B < 4, < 64 and the rest) times both on a chunk of the attention's work, once per
process, and keeps the faster (logged); OpenBLAS only when torch's OpenMP threads do not spin
(OMP_WAIT_POLICY=PASSIVE, as the `attend` command sets). Both give the same scores up to float32
rounding (their summation orders differ).
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
CLASSES = (1, 16, 256)  # the batch sizes measured, each standing for the B nearest it (class_of)
_forced: list[Blas] = []  # set_blas's choice, when one was forced


def matmul(q: Tensor, kt: Tensor, *, out: Tensor | None = None) -> Tensor:
    """q (B, d) @ kt (d, C), float32 on the CPU, into `out` (B, C) when given."""
    if blas(q.shape[0]) == "openblas":
        return openblas_matmul(q, kt, out=out)
    return torch.mm(q, kt, out=out) if out is not None else torch.mm(q, kt)


def openblas_matmul(q: Tensor, kt: Tensor, *, out: Tensor | None = None) -> Tensor:
    """numpy's matmul on the tensors' memory (no copy: `kt` may be a strided view)."""
    if out is None:
        out = torch.empty(q.shape[0], kt.shape[1])
    np.matmul(q.numpy(), kt.numpy(), out=out.numpy())
    return out


def set_blas(name: Blas | None) -> None:
    """Force a BLAS for this process, every B (benchmarks, tests); None: measure again."""
    _forced[:] = [] if name is None else [name]
    _measured.cache_clear()


def class_of(B: int) -> int:  # noqa: N803
    """The measured batch size (CLASSES) standing for B: 1 below 4, 16 below 64, else 256."""
    return 1 if B < 4 else 16 if B < 64 else 256


def blas(B: int = 16) -> Blas:  # noqa: N803
    """The BLAS that multiplies a batch of B queries here (the faster for B's class)."""
    return _forced[0] if _forced else _measured(class_of(B))


def choices() -> dict[int, Blas]:
    """Each class's BLAS (measuring those not measured yet): what a start-up measures once."""
    return {b: blas(b) for b in CLASSES}


@functools.cache
def _measured(B: int) -> Blas:  # noqa: N803
    """The faster of MKL (torch) and OpenBLAS (numpy) for B queries, measured once per process
    on what `attend` does with a chunk: the product, then torch's top-k and exp over it. The
    product alone is not enough: torch's OpenMP threads spin-wait after each torch operation
    (unless OMP_WAIT_POLICY=PASSIVE, which the `attend` command sets), and then hold the cores
    that OpenBLAS's threads need; spinning, OpenBLAS lost on the EPYC (5 q/s at N=1M, B=1,
    against MKL's 16), not spinning, it won (35). Five rounds, both BLAS in each, and the median
    of the rounds' ratios decides: a noisy neighbour slows both of a round alike."""
    if os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
        # torch's threads spin after each operation and starve OpenBLAS's: measured 4-5 q/s
        # against MKL's 16 at N = 1M, B = 1, though a short calibration can come out either way
        logger.info("CPU matmul at B ~ %d: mkl (OMP_WAIT_POLICY is not PASSIVE)", B)
        return "mkl"
    C = 16_384 if B <= 16 else 4_096  # noqa: N806  columns per chunk: ~13-50 MB of keys or ~0.8 GFLOP
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(B, 384, generator=gen)  # (B, d)
    keys_t = torch.rand(384, 2 * C, generator=gen) - 0.5  # (d, 2C)
    out = torch.empty(B, C)
    names: tuple[Blas, Blas] = ("mkl", "openblas")
    seconds: dict[Blas, list[float]] = {name: [] for name in names}
    for _ in range(5):  # taking turns, so a noisy neighbour slows both alike
        for name in names:
            t0 = time.perf_counter()
            for start in (0, C):
                kt = keys_t[:, start : start + C]  # (d, C), a strided view
                s = torch.mm(q, kt, out=out) if name == "mkl" else openblas_matmul(q, kt, out=out)
                s.topk(10, dim=-1)
                s.exp_().sum(-1)
            seconds[name].append(time.perf_counter() - t0)
    ratio = float(np.median(np.divide(seconds["openblas"], seconds["mkl"])))  # > 1: MKL faster
    choice: Blas = "openblas" if ratio < 1 else "mkl"
    logger.info(
        "CPU matmul at B ~ %d: %s (attention on 2 chunks of (%d, 384) x (384, %d): "
        "MKL %.2f ms, OpenBLAS %.2f ms at the median, OpenBLAS/MKL %.2f)",
        B,
        choice,
        B,
        C,
        np.median(seconds["mkl"]) * 1000,
        np.median(seconds["openblas"]) * 1000,
        ratio,
    )
    return choice
