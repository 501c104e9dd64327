"""The GPU chunk kernel (models/cuda_fold.py) computes what `reference_attention` lists: run in
Triton's CPU interpreter (TRITON_INTERPRET=1, set before triton is imported, so in a process of
its own), where no GPU is; on a GPU, tests/test_attention.py's CUDA tests take it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from models import cuda_fold

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[1]

CHECK = textwrap.dedent(
    """
    import math
    import torch
    from models import cuda_fold
    from models.attention import attend, reference_attention

    g = torch.Generator().manual_seed(7)

    def unit(n, d):
        x = torch.randn(n, d, generator=g)
        return x / x.norm(dim=1, keepdim=True)

    cases = [
        # B, N, d, layout, mask, dtype, chunk
        (1, 1000, 384, "nd", None, torch.float32, None),  # one chunk, c ≤ 4·k·BLOCK: topk of x
        (3, 5000, 384, "dn", "keys", torch.float32, 1024),  # ragged last chunk, (N,) mask
        (40, 3000, 64, "nd", "rows", torch.float16, 1024),  # 2 row tiles of 32, (B, N) mask
        (70, 2100, 64, "dn", None, torch.float16, None),  # 2 row tiles of 64
        (40, 3000, 64, "dn", "rows", torch.float32, 1024),
        (2, 777, 384, "dn", None, torch.float16, 320),
        (5, 3000, 64, "dn", "rows", torch.float16, 1024),  # several chunks, masked rows
        (2, 4100, 96, "nd", "keys", torch.float16, None),  # d not a multiple of 64
    ]
    # no bf16 case: the interpreter's tl.dot multiplies bf16 tiles as raw bits (Triton 3.9);
    # benchmarks/gpu.py checks bf16 keys on a GPU
    for B, N, d, layout, masked, dtype, chunk in cases:
        keys = unit(N, d)
        keys = (keys.T.contiguous().T if layout == "dn" else keys).to(dtype)
        # half keys: both kernels; fp32 keys: torch's passes, then the finish kernel
        assert cuda_fold.on_device(keys)
        assert cuda_fold.applies(keys) == (dtype != torch.float32)
        q = unit(B, d)
        mask = None
        if masked == "keys":
            mask = torch.rand(N, generator=g) > 0.3
        elif masked == "rows":
            mask = torch.rand(B, N, generator=g) > 0.5
            mask[1] = False  # a row with no key
            mask[2] = False
            mask[2, N - 1] = True  # a row with one key, the last
        kept = torch.full((B, N), math.nan)
        att = attend(q, keys, k=10, scale=20.0, mask=mask, chunk_size=chunk, scores_out=kept)
        ref = reference_attention(q, keys, k=10, scale=20.0, mask=mask)
        case = (B, N, d, layout, masked, dtype)
        if dtype == torch.float32:
            assert torch.equal(att.indices, ref.indices), case
        else:  # near-ties of half keys' scores summed in another order: the same weights
            w = ref.weights.new_zeros(B, N + 1)  # every key's weight, column N for padding
            full = reference_attention(q, keys, k=N, scale=20.0, mask=mask)
            w.scatter_(1, torch.where(full.indices < 0, N, full.indices), full.weights)
            got = w.gather(1, torch.where(att.indices < 0, N, att.indices))
            torch.testing.assert_close(got, ref.weights, rtol=1e-6, atol=1e-9)
        assert torch.equal(att.matched, ref.matched), case
        torch.testing.assert_close(att.weights, ref.weights, rtol=2e-6, atol=1e-9)
        torch.testing.assert_close(att.scores, ref.scores, rtol=0, atol=0)  # rescored exactly
        torch.testing.assert_close(att.logsumexp, ref.logsumexp, rtol=1e-7, atol=1e-7)
        raw = q.to(dtype).double() @ keys.double().T  # (B, N) every raw score, masked too
        torch.testing.assert_close(kept.double(), raw, rtol=0, atol=1e-6)
    print("checked", len(cases))
    """
)

# models/cuda_finish.py's select_blocks against a sort: the top k of two chunks by (x
# descending, row ascending), ties many (x rounded to 1/4), a row with fewer keys than k, and
# the torch passes it hands over to past SELECT_MAX_K
SELECT = textwrap.dedent(
    """
    import math
    import torch
    from models import cuda_finish
    from models.running_softmax import RunningSoftmax

    g = torch.Generator().manual_seed(3)
    B, c, BLOCK = 3, 640, 64
    x = (torch.randn(B, 2 * c, generator=g) * 8).round() / 4  # (B, 2c) ties
    x[2, 5:] = -math.inf  # a row with 5 keys
    checked = 0
    for k in (1, 10, 70):
        state = RunningSoftmax(k, torch.full((B,), 2 * c))
        for start in (0, c):
            s = x[:, start : start + c].clone()
            blocks = s.view(B, c // BLOCK, BLOCK)
            bmax = blocks.amax(-1)
            rest = torch.where(blocks < bmax[..., None], torch.exp2(blocks - bmax[..., None]), 0.0)
            rest = rest.sum(-1) + (blocks == bmax[..., None]).sum(-1) - 1
            rest = torch.where(bmax == -math.inf, 0.0, rest)
            state.fold_blocks(s, bmax, rest, start)
        assert cuda_finish.select_applies(k, c // BLOCK) == (k <= cuda_finish.SELECT_MAX_K)
        order = torch.sort(-x, dim=-1, stable=True)  # ties by row, ascending
        want, want_idx = -order.values[:, :k], order.indices[:, :k]
        found = torch.isfinite(want)
        assert torch.equal(state.top, want), k
        if k <= cuda_finish.SELECT_MAX_K:  # torch's top-k orders ties as it likes
            got_idx = torch.where(found, state.top_idx, -1)
            assert torch.equal(got_idx, torch.where(found, want_idx, -1)), k
        m = x.amax(-1)
        l = torch.exp2(x.double() - m[:, None].double()).sum(-1)
        assert torch.equal(state.m, m)
        torch.testing.assert_close(state.l, l, rtol=1e-6, atol=0)
        checked += 1
    print("checked", checked)
    """
)


def _interpret(script: str) -> str:
    """What `script` prints, run in a process of its own under Triton's interpreter."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return run.stdout.strip()


def test_kernel_matches_float64_in_triton_interpreter() -> None:
    assert _interpret(CHECK) == "checked 8"


def test_select_blocks_takes_the_top_k_by_row_among_ties() -> None:
    assert _interpret(SELECT) == "checked 3"


def test_cpu_keys_keep_the_cpu_passes() -> None:
    """Without the interpreter the kernel takes CUDA keys only: a CPU `attend` runs C or torch."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("this process runs Triton's interpreter")
    assert not cuda_fold.applies(torch.zeros(4, 8))
