"""The attention core against its float64 reference (models/attention.py, reference_attention)
and PyTorch's own scaled_dot_product_attention, which checks the reference in turn."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from models import cpu_blas
from models.attention import (
    CUDA_SCORES_BUDGET,
    SCORES_BUDGET,
    Attention,
    attend,
    chunk_for,
    reference_attention,
)
from models.attention_chunks import BLOCK
from models.device import pick_device


def unit(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(*shape, generator=g), dim=-1)


def values_of(N: int, dv: int, *, seed: int) -> torch.Tensor:
    """(N, dv) values, seeded: an unseeded draw made every run of a test a new test."""
    return torch.randn(N, dv, generator=torch.Generator().manual_seed(seed))


# The output is a float32 sum over every unmasked key of weight × value (|v| ≲ 4 here), and how
# a BLAS blocks that sum changes with the CPU. Near an output of 0 the rtol term covers nothing,
# so atol must bound the absolute error: on CI's machine one output of 0.02 once differed by
# 1.21e-6, past the 1.2e-6 that atol=1e-6 allowed there; on this one the worst of 3,600 draws
# (300 value seeds × the 12 fields of test_attend_equals_the_reference) was 3.5e-6 from
# float64. 1e-5 is 3x that worst.
OUTPUT_ATOL = 1e-5


def assert_same_attention(
    att: Attention, ref: Attention, *, rtol: float = 2e-6, atol: float = 1e-12
) -> None:
    """`att` answers as the reference `ref` does, field by field, within float32 noise."""
    assert torch.equal(att.indices.cpu(), ref.indices.cpu())
    torch.testing.assert_close(att.scores.cpu(), ref.scores.cpu())
    torch.testing.assert_close(att.weights.cpu(), ref.weights.cpu(), rtol=rtol, atol=atol)
    torch.testing.assert_close(att.logsumexp.cpu(), ref.logsumexp.cpu(), rtol=1e-7, atol=1e-7)
    assert torch.equal(att.matched.cpu(), ref.matched.cpu())
    assert (att.output is None) == (ref.output is None)
    if att.output is not None and ref.output is not None:
        torch.testing.assert_close(att.output.cpu(), ref.output.cpu(), rtol=1e-5, atol=OUTPUT_ATOL)


@pytest.mark.parametrize(
    ("B", "N", "d", "k", "chunk"),
    [
        (1, 1, 8, 1, None),
        (1, 1000, 384, 10, 97),  # N not a multiple of the chunk
        (5, 777, 32, 20, 64),
        (3, 50, 16, 80, 7),  # k > N: every key comes back
        (16, 4099, 64, 5, 1024),
    ],
)
def test_weights_and_topk_match_float64(B: int, N: int, d: int, k: int, chunk: int | None) -> None:
    q, keys = unit(B, d, seed=1), unit(N, d, seed=2)
    att = attend(q, keys, k=k, scale=20.0, chunk_size=chunk)
    ref = reference_attention(q, keys, k=k, scale=20.0)
    kk = min(k, N)
    assert att.indices.shape == att.weights.shape == att.scores.shape == (B, kk)
    assert ref.indices.shape == (B, kk)
    torch.testing.assert_close(att.weights, ref.weights, rtol=2e-5, atol=1e-9)
    # indices agree except where two weights tie to within float32 noise
    exact = (q.double() @ keys.double().T).gather(1, att.indices)  # (B, k')
    their_w = torch.exp(20.0 * exact - ref.logsumexp[:, None])  # (B, k') float64
    same = att.indices == ref.indices
    assert torch.all(same | torch.isclose(their_w, ref.weights.double(), rtol=1e-5))
    torch.testing.assert_close(att.logsumexp, ref.logsumexp, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(att.scores, (q @ keys.T).gather(1, att.indices))
    assert torch.all(att.matched == N)
    assert torch.all(att.weights[:, :-1] >= att.weights[:, 1:])


@pytest.mark.parametrize("B", [3, 70])
@pytest.mark.parametrize("backend", ["mkl", "openblas"])
def test_either_cpu_blas_gives_the_float64_answer(backend: cpu_blas.Blas, B: int) -> None:
    """Both products the process may pick (models/cpu_blas.py), for a small batch and a large
    one, on the ranker's (d, N) layout, with a chunk that leaves ragged edges: same top-k,
    weights and log-sum-exp as float64, and the same weights whatever the chunking (its edges
    change how a BLAS sums)."""
    q, keys = unit(B, 384, seed=11), unit(5000, 384, seed=12)
    streamed = keys.T.contiguous().T  # (N, d) view of (d, N) memory, as the ranker holds keys
    cpu_blas.set_blas(backend)
    try:
        att = attend(q, streamed, k=10, scale=20.0, chunk_size=333)
        whole = attend(q, streamed, k=10, scale=20.0)
    finally:
        cpu_blas.set_blas(None)
    assert_same_attention(att, reference_attention(q, keys, k=10, scale=20.0))
    # the other keys' float32 terms, summed in another order, move the sum by a few 1e-7 (MKL on
    # the lent H200 machine's CPU: 2.2e-7 at B = 70, where this machine's stayed under 2e-7)
    torch.testing.assert_close(att.weights, whole.weights, rtol=4e-7, atol=1e-12)


def test_each_batch_size_has_a_blas_of_its_own() -> None:
    """The process measures a BLAS per class of batch size (B < 4, < 64, the rest), not once
    for all: which BLAS is faster changes with B on one CPU."""
    assert [cpu_blas.class_of(B) for B in (1, 3, 4, 63, 64, 4096)] == [1, 1, 16, 16, 256, 256]
    assert set(cpu_blas.choices()) == set(cpu_blas.CLASSES)
    assert set(cpu_blas.choices().values()) <= {"mkl", "openblas"}
    cpu_blas.set_blas("openblas")
    try:
        assert cpu_blas.choices() == dict.fromkeys(cpu_blas.CLASSES, "openblas")
    finally:
        cpu_blas.set_blas(None)


@pytest.mark.parametrize("scale", [20.0, 60.0, 400.0])
def test_sums_with_and_without_the_max_subtracted_give_the_float64_answer(scale: float) -> None:
    """On the CPU a chunk whose max base-2 logits are within ±UNSHIFTED sums 2^x as it is
    (scale 20: |x| ≤ 29); past it it subtracts the max first (scale 60: the peaked row's first
    chunk, x = 87, so both ways in one call; 400: every chunk). Weights and log-sum-exp are
    float64's either way, masked rows and a row of one key included."""
    B, N, d = 6, 3000, 384
    q, keys = unit(B, d, seed=61), unit(N, d, seed=62)
    q[1] = keys[7]  # one near-exact match: a peaked row
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[2] = False  # a row with no key
    mask[3, :] = False
    mask[3, 1234] = True  # a row with one key
    streamed = keys.T.contiguous().T
    att = attend(q, streamed, k=10, scale=scale, mask=mask, chunk_size=640)
    assert_same_attention(att, reference_attention(q, keys, k=10, scale=scale, mask=mask))


@pytest.mark.parametrize("chunk", [1, 13, 256, 10_000])
def test_output_matches_scaled_dot_product_attention(chunk: int) -> None:
    B, N, d, dv = 4, 1000, 48, 24
    q, keys, values = unit(B, d, seed=3), unit(N, d, seed=4), values_of(N, dv, seed=101)
    att = attend(q, keys, values, k=5, scale=20.0, chunk_size=chunk)
    expected = F.scaled_dot_product_attention(q[None], keys[None], values[None], scale=20.0)[0]
    assert att.output is not None
    torch.testing.assert_close(att.output, expected, rtol=1e-5, atol=OUTPUT_ATOL)


@pytest.mark.parametrize("mask_kind", ["none", "shared", "per_row"])
def test_reference_matches_scaled_dot_product_attention(mask_kind: str) -> None:
    """The reference's weights and output are SDPA's, in float64 (its weights read back through
    identity values), masked or not."""
    B, N, d = 3, 400, 32
    q, keys, values = unit(B, d, seed=50), unit(N, d, seed=51), values_of(N, 5, seed=102)
    g = torch.Generator().manual_seed(52)
    mask = {
        "none": None,
        "shared": torch.rand(N, generator=g) < 0.5,
        "per_row": torch.rand(B, N, generator=g) < 0.3,
    }[mask_kind]
    ref = reference_attention(q, keys, values, k=N, scale=20.0, mask=mask)
    sdpa_mask = None if mask is None else mask.expand(B, N)[None]
    q64, k64 = q.double()[None], keys.double()[None]
    w = F.scaled_dot_product_attention(
        q64, k64, torch.eye(N, dtype=torch.float64)[None], attn_mask=sdpa_mask, scale=20.0
    )[0]  # (B, N) every weight
    found = ref.indices >= 0
    torch.testing.assert_close(
        ref.weights.double(), torch.where(found, w.gather(1, ref.indices.clamp_min(0)), 0.0)
    )
    assert torch.all(ref.weights[:, :-1] >= ref.weights[:, 1:])  # best first
    assert ref.output is not None
    expected = F.scaled_dot_product_attention(
        q64, k64, values.double()[None], attn_mask=sdpa_mask, scale=20.0
    )[0]
    torch.testing.assert_close(ref.output, expected.float())


def test_reference_pads_short_rows_as_attention_documents() -> None:
    """A row with no unmasked key: index −1, score −inf, weight 0, log-sum-exp −inf, output 0;
    fewer unmasked keys than k: padded; k > N: N columns."""
    q, keys, values = unit(3, 8, seed=53), unit(6, 8, seed=54), values_of(6, 2, seed=103)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[1] = False
    mask[2, 2:] = False
    ref = reference_attention(q, keys, values, k=10, scale=20.0, mask=mask)
    assert ref.indices.shape == ref.scores.shape == ref.weights.shape == (3, 6)
    assert ref.matched.tolist() == [6, 0, 2]
    assert torch.all(ref.indices[0] >= 0) and torch.all(ref.indices[1] == -1)
    assert sorted(ref.indices[2, :2].tolist()) == [0, 1] and torch.all(ref.indices[2, 2:] == -1)
    assert torch.all(torch.isneginf(ref.scores[1])) and torch.all(torch.isneginf(ref.scores[2, 2:]))
    assert torch.all(ref.weights[1] == 0) and torch.all(ref.weights[2, 2:] == 0)
    torch.testing.assert_close(ref.weights.sum(-1), torch.tensor([1.0, 0.0, 1.0]))
    assert torch.isneginf(ref.logsumexp[1]) and torch.isfinite(ref.logsumexp[[0, 2]]).all()
    assert ref.output is not None and torch.all(ref.output[1] == 0)


@pytest.mark.parametrize("chunk", [None, 1, 37, 256])
@pytest.mark.parametrize("mask_kind", ["none", "shared", "per_row"])
@pytest.mark.parametrize("with_values", [False, True])
def test_attend_equals_the_reference(chunk: int | None, mask_kind: str, with_values: bool) -> None:
    """Every field, chunked or not, masked or not (a row with no key left, one with fewer than
    k), with values or without."""
    B, N, d = 5, 1_000, 48
    q, keys = unit(B, d, seed=55), unit(N, d, seed=56)
    values = values_of(N, 12, seed=104) if with_values else None
    g = torch.Generator().manual_seed(57)
    mask = None
    if mask_kind == "shared":
        mask = torch.rand(N, generator=g) < 0.4
    elif mask_kind == "per_row":
        mask = torch.rand(B, N, generator=g) < 0.4
        mask[1] = False
        mask[3] = False
        mask[3, [5, 500, 999]] = True  # 3 keys for k = 8
    att = attend(q, keys, values, k=8, scale=20.0, mask=mask, chunk_size=chunk)
    assert_same_attention(att, reference_attention(q, keys, values, k=8, scale=20.0, mask=mask))


def test_default_scale_is_one_over_sqrt_d_like_pytorch() -> None:
    q, keys, values = unit(2, 64, seed=5), unit(300, 64, seed=6), values_of(300, 8, seed=105)
    att = attend(q, keys, values, k=3)
    expected = F.scaled_dot_product_attention(q[None], keys[None], values[None])[0]
    assert att.output is not None
    torch.testing.assert_close(att.output, expected, rtol=1e-5, atol=OUTPUT_ATOL)


def test_mask_matches_sdpa_and_renormalises_over_matched_keys() -> None:
    B, N, d = 3, 500, 32
    q, keys, values = unit(B, d, seed=7), unit(N, d, seed=8), values_of(N, 6, seed=106)
    g = torch.Generator().manual_seed(9)
    mask = torch.rand(B, N, generator=g) < 0.3  # (B, N)
    att = attend(q, keys, values, k=N, scale=20.0, mask=mask, chunk_size=64)
    expected = F.scaled_dot_product_attention(
        q[None], keys[None], values[None], attn_mask=mask[None], scale=20.0
    )[0]
    assert att.output is not None
    torch.testing.assert_close(att.output, expected, rtol=1e-5, atol=OUTPUT_ATOL)
    assert torch.equal(att.matched, mask.sum(-1))
    for b in range(B):
        found = att.indices[b][att.indices[b] >= 0]
        assert len(found) == int(mask[b].sum())
        assert bool(mask[b, found].all())
        assert math.isclose(float(att.weights[b].sum()), 1.0, rel_tol=1e-5)
    ref = reference_attention(q, keys, values, k=N, scale=20.0, mask=mask)
    torch.testing.assert_close(att.weights, ref.weights, rtol=2e-5, atol=1e-9)
    assert torch.equal(att.matched, ref.matched)


def test_shared_mask_equals_per_row_mask() -> None:
    q, keys = unit(4, 16, seed=10), unit(200, 16, seed=11)
    mask = torch.arange(200) % 3 == 0  # (N,)
    a = attend(q, keys, k=7, scale=20.0, mask=mask, chunk_size=33)
    b = attend(q, keys, k=7, scale=20.0, mask=mask.expand(4, 200), chunk_size=33)
    assert torch.equal(a.indices, b.indices)
    torch.testing.assert_close(a.weights, b.weights)


def test_mask_removing_everything_returns_no_results_not_nan() -> None:
    q, keys, values = unit(2, 16, seed=12), unit(100, 16, seed=13), values_of(100, 4, seed=107)
    att = attend(
        q, keys, values, k=5, scale=20.0, mask=torch.zeros(100, dtype=torch.bool), chunk_size=30
    )
    assert torch.all(att.indices == -1)
    assert torch.all(att.weights == 0)
    assert torch.all(torch.isneginf(att.logsumexp))
    assert torch.all(att.matched == 0)
    assert att.output is not None and torch.all(att.output == 0)


def test_mask_leaving_one_key_gives_it_all_the_weight() -> None:
    q, keys, values = unit(2, 16, seed=14), unit(100, 16, seed=15), values_of(100, 4, seed=108)
    mask = torch.zeros(100, dtype=torch.bool)
    mask[42] = True
    att = attend(q, keys, values, k=5, scale=20.0, mask=mask, chunk_size=30)
    assert att.indices[:, 0].tolist() == [42, 42]
    assert torch.all(att.indices[:, 1:] == -1)
    torch.testing.assert_close(att.weights[:, 0], torch.ones(2))
    assert att.output is not None
    torch.testing.assert_close(att.output, values[42].expand(2, 4))


def test_chunked_equals_unchunked() -> None:
    q, keys, values = unit(8, 64, seed=16), unit(5000, 64, seed=17), values_of(5000, 64, seed=109)
    whole = attend(q, keys, values, k=10, scale=20.0, chunk_size=5000)
    for chunk in (1, 99, 1000):
        part = attend(q, keys, values, k=10, scale=20.0, chunk_size=chunk)
        assert torch.equal(part.indices, whole.indices)
        torch.testing.assert_close(part.weights, whole.weights, rtol=1e-5, atol=1e-9)
        torch.testing.assert_close(part.logsumexp, whole.logsumexp)
        assert part.output is not None and whole.output is not None
        torch.testing.assert_close(part.output, whole.output, rtol=1e-5, atol=OUTPUT_ATOL)


def keys_along(q: torch.Tensor, cosines: torch.Tensor, *, seed: int) -> torch.Tensor:
    """(N, d) unit keys whose cosine with the unit query q (d,) is `cosines` (N,)."""
    noise = torch.randn(cosines.shape[0], q.shape[0], generator=torch.Generator().manual_seed(seed))
    ortho = F.normalize(noise - (noise @ q)[:, None] * q, dim=-1)  # (N, d) orthogonal to q
    return cosines[:, None] * q + (1 - cosines[:, None] ** 2).sqrt() * ortho


@pytest.mark.parametrize("chunk", [1, 64, 250])
def test_logits_far_apart_across_chunks_match_float64(chunk: int) -> None:
    """At the largest scale ATTEND_SCALE allows (1000), the first chunks hold finite logits far
    below a later chunk's (cosines -0.9..-0.5 first, then up to 0.9: base-2 logits 1400+ apart,
    past float32's 2^128), so the running max must move up when the later chunk comes in. The
    second query, -q, sees the same keys in the other order (the best chunk first)."""
    g = torch.Generator().manual_seed(60)
    N, d = 500, 32
    q = unit(1, d, seed=61)[0]  # (d,)
    low = -0.9 + 0.4 * torch.rand(250, generator=g)  # first 250 keys: far below
    high = -0.2 + 1.1 * torch.rand(N - 250, generator=g)  # the rest: up to 0.9
    keys = keys_along(q, torch.cat([low, high]), seed=62)  # (N, d)
    queries = torch.stack([q, -q])  # (2, d)
    values = values_of(N, 6, seed=110)
    att = attend(queries, keys, values, k=5, scale=1000.0, chunk_size=chunk)
    ref = reference_attention(queries, keys, k=5, scale=1000.0)
    # The winners' weights are exact (rescored in float64); the log-sum-exp's other terms carry
    # float32 logits of ~1400 (an ulp of 1e-4): 60 draws here were at most 1.8e-6 off relative.
    assert_same_attention(replace(att, output=None), ref, rtol=1e-5)
    # The output sums float32 2^(x − m) with x ≈ 1400 rounded to ~1e-4: 60 draws were at most
    # 1.9e-4 off absolute (|v| ≲ 4). A max that stops moving gives inf or NaN here.
    expected = F.scaled_dot_product_attention(
        queries[None].double(), keys[None].double(), values[None].double(), scale=1000.0
    )[0]
    assert att.output is not None
    torch.testing.assert_close(att.output.double(), expected, rtol=1e-4, atol=1e-3)


def test_batched_equals_one_query_at_a_time() -> None:
    q, keys = unit(6, 32, seed=18), unit(999, 32, seed=19)
    batch = attend(q, keys, k=4, scale=20.0, chunk_size=100)
    for b in range(6):
        one = attend(q[b : b + 1], keys, k=4, scale=20.0, chunk_size=100)
        assert torch.equal(one.indices[0], batch.indices[b])
        torch.testing.assert_close(one.weights[0], batch.weights[b])


def test_planted_match_ranks_first_and_scale_sharpens_it() -> None:
    N, d, j = 10_000, 384, 1234
    keys = unit(N, d, seed=20)
    q = F.normalize(keys[j] + 0.5 * unit(d, seed=21), dim=-1)[None]  # (1, d) near key j
    sharp = attend(q, keys, k=3, scale=20.0)
    flat = attend(q, keys, k=3)  # 1/√d
    assert sharp.indices[0, 0] == j and flat.indices[0, 0] == j
    assert sharp.weights[0, 0] > 0.5
    assert flat.weights[0, 0] < 5.0 / N  # near-uniform: the reason the service uses 20


def test_weight_ratios_follow_scores_and_scale() -> None:
    q, keys = unit(1, 32, seed=22), unit(300, 32, seed=23)
    att = attend(q, keys, k=10, scale=7.5)
    w, s = att.weights[0].double(), att.scores[0].double()
    torch.testing.assert_close(w[1:] / w[0], torch.exp(7.5 * (s[1:] - s[0])), rtol=1e-5, atol=0)


def test_empty_keys() -> None:
    att = attend(unit(2, 8, seed=24), torch.empty(0, 8), torch.empty(0, 4), k=3, scale=20.0)
    assert att.indices.shape == att.weights.shape == (2, 0)
    assert torch.all(att.matched == 0)
    assert torch.all(torch.isneginf(att.logsumexp))
    assert att.output is not None and torch.equal(att.output, torch.zeros(2, 4))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0, "scale": 1.0}, "k must be"),
        ({"k": 1, "scale": 0.0}, "scale must be positive"),
        ({"k": 1, "scale": 1.0, "mask": torch.ones(3, dtype=torch.bool)}, "mask must be"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        attend(unit(2, 8, seed=25), unit(10, 8, seed=26), **kwargs)  # type: ignore[arg-type]


def test_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="need q"):
        attend(unit(2, 8, seed=27), unit(10, 9, seed=28), k=1)


def test_pick_device_takes_cuda_only_when_available() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert pick_device("auto").type == expected
    assert pick_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            pick_device("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_matches_cpu() -> None:
    q, keys, values = unit(4, 64, seed=29), unit(3000, 64, seed=30), values_of(3000, 16, seed=110)
    cpu = attend(q, keys, values, k=10, scale=20.0, chunk_size=512)
    gpu = attend(q.cuda(), keys.cuda(), values.cuda(), k=10, scale=20.0, chunk_size=512)
    half = attend(q.cuda(), keys.cuda().half(), k=10, scale=20.0, chunk_size=512)
    assert torch.equal(half.indices[:, 0].cpu(), cpu.indices[:, 0])
    torch.testing.assert_close(half.weights.cpu(), cpu.weights, rtol=2e-2, atol=1e-4)
    assert torch.equal(gpu.indices.cpu(), cpu.indices)
    torch.testing.assert_close(gpu.weights.cpu(), cpu.weights, rtol=1e-4, atol=1e-7)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cuda_block_maxima_and_masks_match_float64(dtype: torch.dtype) -> None:
    """On the GPU, in the ranker's (d, N) key layout: chunks wide enough for the block-max top-k,
    a ragged last chunk, and a mask that leaves one row a single key and another none."""
    B, N = 6, 50_001
    q, keys = unit(B, 64, seed=47), unit(N, 64, seed=48)
    keys = keys.to(dtype)  # the keys as stored; the reference reads the same rounded values
    mask = torch.rand(B, N, generator=torch.Generator().manual_seed(49)) < 0.7
    mask[1] = False
    mask[2] = False
    mask[2, 12_345] = True
    device_keys = keys.cuda().T.contiguous().T  # (N, d) view of (d, N) memory
    att = attend(q.cuda(), device_keys, k=7, scale=20.0, mask=mask.cuda(), chunk_size=20_032)
    ref = reference_attention(q, keys, k=7, scale=20.0, mask=mask)  # q rounded as attend does
    ok = [0, 3, 4, 5]
    rtol = 2e-6 if dtype == torch.float32 else 1e-5  # fp16 q and keys, products summed in fp32
    torch.testing.assert_close(att.weights[ok].cpu(), ref.weights[ok], rtol=rtol, atol=1e-9)
    torch.testing.assert_close(att.logsumexp[ok].cpu(), ref.logsumexp[ok], rtol=1e-6, atol=1e-6)
    assert torch.all(att.indices[1].cpu() == -1) and torch.all(att.weights[1].cpu() == 0)
    assert att.indices[2, 0].item() == 12_345 and torch.all(att.indices[2, 1:].cpu() == -1)
    torch.testing.assert_close(att.weights[2, 0].cpu(), torch.tensor(1.0))
    assert torch.equal(att.matched.cpu(), mask.sum(-1))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_keys_rank_like_float32(dtype: torch.dtype) -> None:
    q, keys = unit(3, 64, seed=31), unit(2000, 64, seed=32)
    full = attend(q, keys, k=5, scale=20.0, chunk_size=300)
    half = attend(q, keys.to(dtype), k=5, scale=20.0, chunk_size=300)
    assert half.weights.dtype == half.scores.dtype == torch.float32
    assert torch.equal(half.indices[:, 0], full.indices[:, 0])
    # scores carry the keys' rounding (~1e-3 in fp16, ~1e-2 in bf16), weights exp(20×) that
    tolerance = 2e-2 if dtype == torch.float16 else 2e-1
    torch.testing.assert_close(half.weights, full.weights, rtol=tolerance, atol=1e-4)


def test_keys_stored_transposed_give_the_same_answer() -> None:
    # the service keeps keys as (d, N) memory seen through an (N, d) view
    q, keys, values = unit(4, 32, seed=33), unit(1000, 32, seed=34), values_of(1000, 8, seed=111)
    view = keys.T.contiguous().T
    assert view.stride() == (1, 1000)
    a = attend(q, keys, values, k=5, scale=20.0, chunk_size=300)
    b = attend(q, view, view, k=5, scale=20.0, chunk_size=300)
    c = attend(q, keys, keys, k=5, scale=20.0, chunk_size=300)
    assert torch.equal(a.indices, b.indices)
    torch.testing.assert_close(a.weights, b.weights)
    assert b.output is not None and c.output is not None
    torch.testing.assert_close(b.output, c.output)


@pytest.mark.parametrize(
    ("B", "N", "chunk"), [(4, 20_000, None), (2, 9_001, 3_000), (64, 3_000, None)]
)
def test_block_maxima_find_the_same_top_k(B: int, N: int, chunk: int | None) -> None:
    """Chunks wide enough for the block-max top-k (models/attention_chunks.py, chunk_candidates),
    ragged last blocks included, and duplicated keys, so that blocks tie on their maxima: the
    same top-k weights and scores as float64."""
    q = unit(B, 32, seed=41)
    keys = unit(N, 32, seed=42)
    keys[N // 2 : N // 2 + 500] = keys[:500]  # 500 keys twice: tied maxima in different blocks
    att = attend(q, keys, k=7, scale=20.0, chunk_size=chunk)
    ref = reference_attention(q, keys, k=7, scale=20.0)
    torch.testing.assert_close(att.weights, ref.weights, rtol=2e-6, atol=1e-12)
    torch.testing.assert_close(
        att.scores.double(), (q.double() @ keys.double().T).gather(1, att.indices)
    )
    torch.testing.assert_close(att.logsumexp, ref.logsumexp, rtol=1e-7, atol=1e-7)
    assert all(len(set(row.tolist())) == 7 for row in att.indices)  # no key twice


def test_a_reused_logits_buffer_leaks_nothing_into_the_next_call() -> None:
    """The thread keeps its logits buffer between calls: a large call (big logits everywhere)
    then smaller ones whose last block is ragged and whose keys are all masked but one."""
    big_q, big_keys = unit(64, 16, seed=43), unit(40_000, 16, seed=44)
    attend(big_q * 50, big_keys, k=5, scale=20.0)  # fills the buffer with large logits
    q, keys = unit(3, 16, seed=45), unit(1_001, 16, seed=46)
    mask = torch.zeros(3, 1_001, dtype=torch.bool)
    mask[:, 1_000] = True
    one = attend(q, keys, k=5, scale=20.0, mask=mask)
    assert torch.equal(one.indices[:, 0], torch.full((3,), 1_000))
    assert torch.all(one.indices[:, 1:] == -1)
    torch.testing.assert_close(one.weights[:, 0], torch.ones(3))
    assert torch.all(one.matched == 1)
    assert_same_attention(one, reference_attention(q, keys, k=5, scale=20.0, mask=mask))
    att = attend(q, keys, k=5, scale=20.0)
    assert_same_attention(att, reference_attention(q, keys, k=5, scale=20.0))


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize(
    ("B", "N"), [(1, 10), (1, 5_000_000), (16, 1_000_000), (256, 10**7), (4096, 10**8)]
)
def test_chunks_hold_the_logits_budget(B: int, N: int, device: str) -> None:
    """Whole blocks, no wider than the keys need, and (B, C) logits within the device's budget
    (a GPU's is wider) unless one block alone exceeds it."""
    C = chunk_for(B, N, torch.device(device))
    budget = SCORES_BUDGET if device == "cpu" else CUDA_SCORES_BUDGET
    assert C % BLOCK == 0
    assert min(N, BLOCK) <= C < max(N, BLOCK) + BLOCK
    assert budget >= B * C or C == BLOCK
    assert chunk_for(B, N) == C or device == "cuda"  # no device: the CPU's
    assert budget // 2 < B * C or C >= N  # and not needlessly narrow
