"""The exact mixture top-k (`mix_topk`, its asks answered by `run_mixture` as the search runs
it: dense heads in this process, scored heads beside them) against a brute-force (B, N)
computation in float64."""

from __future__ import annotations

import math

import pytest
import torch

import models.heads
from models.heads import DenseHead, LocalDenseHeads, ScoredHead
from models.mixture import Mixture, mix_topk
from service.engine.ranking import run_mixture


def _unit(n: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=-1)


def _brute(heads: list[DenseHead | ScoredHead], pi: torch.Tensor, mask: torch.Tensor | None):
    probs = []
    for head in heads:
        if isinstance(head, DenseHead):
            logits = head.scale * head.q.double() @ head.keys.double().T
        else:
            logits = head.scale * head.scores.double()
        if mask is not None:
            logits = logits.masked_fill(~mask, -math.inf)
        probs.append(torch.softmax(logits, dim=-1))
    p = torch.stack(probs, dim=-1)  # (B, N, H)
    return (p * pi.double()[:, None, :]).sum(-1), p


def _mix(
    heads: list[DenseHead | ScoredHead],
    pi: torch.Tensor,
    *,
    k: int,
    mask: torch.Tensor | None = None,
    chunk_size: int | None = None,
    entropy: bool = False,
) -> Mixture:
    """`heads` (the dense ones first, as a search orders them) mixed by π."""
    dense = [h for h in heads if isinstance(h, DenseHead)]
    scored = [h for h in heads if isinstance(h, ScoredHead)]
    assert heads == [*dense, *scored]
    N = dense[0].keys.shape[0] if dense else scored[0].scores.shape[1]
    local = LocalDenseHeads(dense, size=N, mask=mask, chunk_size=chunk_size)
    steps = mix_topk(local.scales, N, scored, pi, k=k, mask=mask, entropy=entropy)
    return run_mixture(local, steps)


@pytest.mark.parametrize("use_mask", [False, True])
@pytest.mark.parametrize("keep_scores", [True, False])
def test_the_mixture_top_k_is_exact(
    use_mask: bool, keep_scores: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ways the entropy sweep gets its dense scores: kept from the heads' attend calls
    (small B·N) or from a second pass over the keys."""
    monkeypatch.setattr(models.heads, "KEEP_SCORES", models.heads.KEEP_SCORES if keep_scores else 0)
    N, d, B, k = 3000, 16, 3, 7
    q = _unit(B, d, 1)
    title, desc = _unit(N, d, 2), _unit(N, d, 3)
    # a lexical-like head: a few books with large scores, the rest 0
    bm25 = torch.zeros(B, N)
    bm25[:, 100:140] = torch.rand(B, 40, generator=torch.Generator().manual_seed(4)) * 12
    heads: list[DenseHead | ScoredHead] = [
        DenseHead(q, title, 20.0),
        DenseHead(q, desc, 20.0),
        ScoredHead(bm25, 1.0),
    ]
    pi = torch.tensor([[0.3, 0.5, 0.2], [0.0, 1.0, 0.0], [0.1, 0.1, 0.8]])
    mask = torch.rand(N, generator=torch.Generator().manual_seed(5)) > 0.3 if use_mask else None
    got = _mix(heads, pi, k=k, mask=mask, chunk_size=512, entropy=True)
    want_w, want_p = _brute(heads, pi, mask)
    top_w, top_i = want_w.topk(k, dim=-1)
    assert torch.equal(got.indices, top_i)
    torch.testing.assert_close(got.weights, top_w, rtol=1e-5, atol=1e-9)
    # shares are additive: they sum to the weight, and are π_h p_h
    torch.testing.assert_close(got.shares.sum(-1), got.weights, rtol=1e-9, atol=1e-12)
    want_probs = want_p.gather(1, top_i[:, :, None].expand(-1, -1, 3))
    torch.testing.assert_close(got.probs, want_probs, rtol=1e-5, atol=1e-9)
    ent = -(want_w * want_w.clamp_min(1e-300).log()).sum(-1)
    torch.testing.assert_close(got.entropy, ent, rtol=1e-5, atol=1e-6)
    want_matched = int(mask.sum()) if mask is not None else N
    assert got.matched.tolist() == [want_matched] * B


@pytest.mark.parametrize("B", [1, 3])
@pytest.mark.parametrize("chunk_size", [None, 512])
@pytest.mark.parametrize("mask_shape", [None, "N", "BN"])
def test_a_head_holding_few_books_is_exact(
    B: int, chunk_size: int | None, mask_shape: str | None
) -> None:
    """A lexical head as the search builds it, −inf on every book without a query term: its
    top-k, log-sum-exp and share of the entropy come from its few finite scores
    (`ScoredHead.support`), each query its own books, in one chunk or several."""
    N, d, k = 3000, 16, 7
    g = torch.Generator().manual_seed(6)
    q = _unit(B, d, 1)
    bm25 = torch.full((B, N), -math.inf)
    for b in range(B):  # each query's own books, the last chunk's included
        cols = torch.randperm(N, generator=g)[: 60 + 40 * b]
        bm25[b, cols] = 1 + torch.rand(len(cols), generator=g) * 11
    head = ScoredHead(bm25, 1.0)
    assert head.support is not None
    heads: list[DenseHead | ScoredHead] = [DenseHead(q, _unit(N, d, 2), 20.0), head]
    pi = torch.tensor([[0.4, 0.6], [0.9, 0.1], [0.2, 0.8]])[:B]
    mask = None
    if mask_shape is not None:
        shape = (N,) if mask_shape == "N" else (B, N)
        mask = torch.rand(shape, generator=g) > 0.3
    got = _mix(heads, pi, k=k, mask=mask, chunk_size=chunk_size, entropy=True)
    want_w, want_p = _brute(heads, pi, mask)
    top_w, top_i = want_w.topk(k, dim=-1)
    assert torch.equal(got.indices, top_i)
    torch.testing.assert_close(got.weights, top_w, rtol=1e-5, atol=1e-9)
    want_probs = want_p.gather(1, top_i[:, :, None].expand(-1, -1, 2))
    torch.testing.assert_close(got.probs, want_probs, rtol=1e-5, atol=1e-9)
    ent = -(want_w * want_w.clamp_min(1e-300).log()).sum(-1)
    torch.testing.assert_close(got.entropy, ent, rtol=1e-5, atol=1e-6)


def test_support_is_none_for_a_head_holding_most_books() -> None:
    """Past half of (B, N) finite, the dense passes are the cheaper: no support."""
    scores = torch.zeros(2, 100)
    scores[:, :40] = -math.inf
    assert ScoredHead(scores, 1.0).support is None
    scores[:, :60] = -math.inf
    rows, cols = ScoredHead(scores, 1.0).support or (None, None)
    assert rows is not None and cols is not None
    assert rows.tolist() == [0] * 40 + [1] * 40 and cols.tolist() == list(range(60, 100)) * 2


def test_the_mixture_needs_more_rounds_when_heads_disagree() -> None:
    # two heads whose top lists are disjoint and flat: the threshold forces a larger k'
    N, k = 2000, 5
    a = torch.zeros(1, N)
    b = torch.zeros(1, N)
    a[0, :1000] = torch.linspace(1.0, 0.99, 1000)
    b[0, 1000:] = torch.linspace(0.9995, 0.9895, 1000)  # no ties with a
    a[0, 1500] = b[0, 500] = 0.995  # books good in both heads
    heads: list[DenseHead | ScoredHead] = [ScoredHead(a, 20.0), ScoredHead(b, 20.0)]
    pi = torch.tensor([[0.5, 0.5]])
    got = _mix(heads, pi, k=k)
    want, _ = _brute(heads, pi, None)
    assert torch.equal(got.indices, want.topk(k, dim=-1).indices)
    assert set(got.indices[0, :2].tolist()) == {500, 1500}
    assert got.rounds > 1


def test_grouped_dense_heads_match_separate_calls() -> None:
    # recommendation shape: several queries (liked books) against the same keys, one row
    N, d = 500, 8
    keys = _unit(N, d, 7)
    liked = _unit(3, d, 8)
    heads: list[DenseHead | ScoredHead] = [
        DenseHead(liked[i : i + 1], keys, 20.0) for i in range(3)
    ]
    pi = torch.full((1, 3), 1 / 3)
    got = _mix(heads, pi, k=4)
    want, _ = _brute(heads, pi, None)
    assert torch.equal(got.indices, want.topk(4, dim=-1).indices)
    torch.testing.assert_close(got.shares.sum(-1), got.weights)
