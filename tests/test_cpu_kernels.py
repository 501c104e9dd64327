"""The C passes of `attend` on the CPU (models/_cpu_kernels.c via models/cpu_kernels.py): built
by the install, the same answers as torch's passes and the float64 reference, the same bits
whatever the layout or the batch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from models import cpu_kernels
from models.attention import attend, reference_attention


@pytest.fixture
def torch_passes() -> Iterator[None]:
    cpu_kernels.set_enabled(False)
    try:
        yield
    finally:
        cpu_kernels.set_enabled(True)


def unit(n: int, d: int, seed: int) -> torch.Tensor:
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(seed))
    return x / x.norm(dim=1, keepdim=True)


def test_the_install_built_the_kernels() -> None:
    """`pip install` (setup.py) compiles them wherever gcc is, as here: without them `attend`
    would quietly take the slower torch passes."""
    assert cpu_kernels.available(), cpu_kernels.describe()


@pytest.mark.parametrize(
    ("B", "N", "scale"),
    [
        (3, 1_000, 20.0),  # one thread
        (256, 2_000, 20.0),  # rows split between threads
        (1, 600_000, 20.0),  # one row split between threads by its blocks
        (4, 5_000, 150.0),  # max x past ±64: each row summed again relative to its max
    ],
)
def test_c_passes_give_what_torch_passes_and_the_reference_give(
    B: int, N: int, scale: float
) -> None:
    d = 16
    keys, q = unit(N, d, 0), unit(B, d, 1)
    mask = torch.rand(N, generator=torch.Generator().manual_seed(2)) > 0.1
    ref = reference_attention(q, keys, k=10, scale=scale, mask=mask)
    in_c = attend(q, keys, k=10, scale=scale, mask=mask)
    cpu_kernels.set_enabled(False)
    try:
        in_torch = attend(q, keys, k=10, scale=scale, mask=mask)
    finally:
        cpu_kernels.set_enabled(True)
    for att in (in_c, in_torch):
        assert torch.equal(att.indices, ref.indices)
        torch.testing.assert_close(att.weights, ref.weights, rtol=2e-6, atol=1e-12)
        torch.testing.assert_close(att.logsumexp, ref.logsumexp, rtol=1e-7, atol=1e-7)
        assert torch.equal(att.matched, ref.matched)


def test_a_k_past_max_k_takes_torch_passes_and_the_same_answer() -> None:
    """The mixture's deeper rounds ask for up to the whole catalog: torch's top-k then."""
    keys, q = unit(3_000, 24, 11), unit(4, 24, 12)
    k = cpu_kernels.MAX_K + 72
    att = attend(q, keys, k=k, scale=20.0)
    ref = reference_attention(q, keys, k=k, scale=20.0)
    assert torch.equal(att.indices, ref.indices)
    torch.testing.assert_close(att.weights, ref.weights, rtol=2e-6, atol=1e-12)
    with pytest.raises(ValueError, match="fold_chunk"):
        cpu_kernels.fold_chunk(torch.zeros(1, 64 * 100), 5_000)


def test_torch_passes_still_answer(torch_passes: None) -> None:
    """Where the extension is missing (no compiler at install) `attend` keeps torch's passes."""
    assert not cpu_kernels.available()
    keys, q = unit(3_000, 24, 3), unit(5, 24, 4)
    att = attend(q, keys, k=7, scale=20.0)
    ref = reference_attention(q, keys, k=7, scale=20.0)
    assert torch.equal(att.indices, ref.indices)
    torch.testing.assert_close(att.weights, ref.weights, rtol=2e-6, atol=1e-12)


def test_exact_scores_are_the_same_bits_for_any_layout_or_batch() -> None:
    keys = unit(4_000, 384, 5)
    served = keys.T.contiguous().T  # (d, N) memory, as the service holds keys
    q = unit(64, 384, 6)
    idx = torch.randint(0, 4_000, (64, 10), generator=torch.Generator().manual_seed(7))
    whole = cpu_kernels.exact_scores(q, served, idx)
    assert torch.equal(whole, cpu_kernels.exact_scores(q, keys, idx))  # (N, d) memory
    assert torch.equal(whole[:5], cpu_kernels.exact_scores(q[:5], served, idx[:5]))  # 1 thread
    expected = (q.double()[:, None, :] * keys.double()[idx]).sum(-1)
    torch.testing.assert_close(whole, expected, rtol=0, atol=1e-12)


def test_equal_logits_rank_the_lower_row_first() -> None:
    """Copies of one key (a book's editions) tie exactly: the top k takes the lower rows first,
    the same on every call."""
    base = unit(500, 32, 8)
    keys = torch.cat([base, base[:20].repeat(3, 1)])  # rows 500-559 copy rows 0-19
    q = base[:4] + 0.01 * unit(4, 32, 9)
    att = attend(q, keys, k=10, scale=20.0)
    for b in range(4):
        scores = att.scores[b]
        for i in range(9):
            if scores[i] == scores[i + 1]:
                assert att.indices[b, i] < att.indices[b, i + 1]
    assert torch.equal(att.indices, attend(q, keys, k=10, scale=20.0).indices)


def test_fold_chunk_finds_the_top_k_and_the_sum() -> None:
    s = torch.randn(7, 64 * 40, generator=torch.Generator().manual_seed(10)) * 6
    s[2] = -torch.inf  # a row masked whole
    s[3, 5:] = -torch.inf  # a row of fewer keys than k
    top, cols, rest, shift = cpu_kernels.fold_chunk(s, 10)
    values, expected_cols = s.topk(10, dim=-1)
    assert torch.equal(top, values)
    finite = torch.isfinite(values)
    assert torch.equal(cols[finite], expected_cols[finite])
    x = s.double()
    total = torch.exp2(x - shift[:, None]).sum(-1)
    without_max = total - torch.where(
        torch.isfinite(values[:, 0]), torch.exp2(values[:, 0].double() - shift), 0.0
    )
    torch.testing.assert_close(rest, without_max, rtol=1e-6, atol=0)
    assert rest[2] == 0 and torch.all(shift == 0)


@pytest.mark.parametrize(("B", "N"), [(3, 1_000), (8, 40_000), (1, 300_000)])
def test_positive_support_is_numpys_nonzero_and_fill(B: int, N: int) -> None:
    """A scored head's support in one read: each row's columns of a positive score in order,
    −inf over the rest of a row that has one, a row with none left as it was."""
    import numpy as np

    g = np.random.default_rng(B)
    s = np.where(g.random((B, N)) < 0.2, g.random((B, N)) * 9 + 1e-3, 0.0).astype(np.float32)
    s[0, N - 1] = 0.5  # the last column counts
    if B > 1:
        s[-1, :] = 0.0  # a query with no term
    before = s.copy()
    cols, counts = cpu_kernels.positive_support(s)
    rows_want, cols_want = np.nonzero(before > 0)
    assert np.array_equal(cols, cols_want)
    assert np.array_equal(np.repeat(np.arange(B), counts), rows_want)
    want = np.where(before > 0, before, np.float32(-np.inf))
    if B > 1:
        want[-1] = 0.0
    assert np.array_equal(s, want)
