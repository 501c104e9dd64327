"""The rank fusion of heads (`fuse_ranks`, its asks answered by `run_mixture` as similar books
run it) against brute force over each head's full (B, N) ranking: its order the weighted
reciprocal-rank fusion, its weights the mixture of the heads' exact softmaxes; and what each is
for: one peaked head does not decide the order, and the weights tell a near-duplicate from a
weak match."""

from __future__ import annotations

import math

import pytest
import torch

from models.heads import DenseHead, ScoredHead
from models.local_heads import LocalDenseHeads
from models.mixture import Mixture, mix_topk
from models.rank_fusion import RRF_K, fuse_ranks
from service.engine.ranking import run_mixture


def _unit(n: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=-1)


def _fuse(
    dense: list[DenseHead],
    scored: list[ScoredHead],
    pi: torch.Tensor,
    *,
    k: int,
    depth: int,
    mask: torch.Tensor | None = None,
    log_prior: torch.Tensor | None = None,
) -> Mixture:
    N = dense[0].keys.shape[0]
    local = LocalDenseHeads(dense, size=N, mask=mask)
    steps = fuse_ranks(
        local.scales,
        N,
        scored,
        pi,
        k=k,
        mask=mask,
        depth=depth,
        entropy=True,
        log_prior=log_prior,
    )
    return run_mixture(local, steps)


def _brute(logits: list[torch.Tensor], pi: torch.Tensor, depth: int, mask: torch.Tensor | None):
    """(B, N) weights of the weighted RRF over each head's top `depth` (no ties here)."""
    B, N = logits[0].shape
    w = torch.zeros(B, N, dtype=torch.float64)
    for h, head in enumerate(logits):
        z = head.double() if mask is None else head.double().masked_fill(~mask, -math.inf)
        order = z.argsort(dim=-1, descending=True)[:, :depth]
        for b in range(B):
            for r, i in enumerate(order[b].tolist()):
                if math.isfinite(float(z[b, i])):
                    w[b, i] += pi[b, h] / (RRF_K + r + 1)
    return w / w.sum(-1, keepdim=True)


def _brute_mixture(
    logits: list[torch.Tensor], pi: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """(B, N) Σ_h π_h softmax_h over the unmasked books, logits already scaled."""
    w = torch.zeros(logits[0].shape, dtype=torch.float64)
    for h, head in enumerate(logits):
        z = head.double() if mask is None else head.double().masked_fill(~mask, -math.inf)
        w += pi[:, h : h + 1] * z.softmax(-1)
    return w


@pytest.mark.parametrize("use_mask", [False, True])
def test_the_fused_top_k_is_the_brute_force_rrf(use_mask: bool) -> None:
    B, N, d, k, depth = 3, 400, 16, 12, 50
    K1, K2 = _unit(N, d, 1), _unit(N, d, 2)
    q1, q2 = _unit(B, d, 3), _unit(B, d, 4)
    bm25 = torch.rand(B, N, generator=torch.Generator().manual_seed(5)) * 10
    bm25[:, ::3] = -math.inf  # books without a query term are in no list of the lexical head
    pi = torch.tensor([[0.2, 0.5, 0.3], [0.6, 0.2, 0.2], [0.1, 0.1, 0.8]], dtype=torch.float64)
    mask = torch.rand(N, generator=torch.Generator().manual_seed(6)) > 0.3 if use_mask else None
    dense = [DenseHead(q1, K1, 20.0), DenseHead(q2, K2, 25.0)]
    mix = _fuse(dense, [ScoredHead(bm25, 1.0)], pi, k=k, depth=depth, mask=mask)
    want = _brute([q1 @ K1.T, q2 @ K2.T, bm25], pi, depth, mask)
    top = want.topk(k, dim=-1)
    assert torch.equal(mix.indices, top.indices)
    assert mix.order is not None and mix.top_weight is not None and mix.entropy is not None
    torch.testing.assert_close(mix.order, top.values, rtol=1e-9, atol=1e-12)
    # the weights: each head's exact softmax over the whole catalog, mixed by π
    w = _brute_mixture([20.0 * q1 @ K1.T, 25.0 * q2 @ K2.T, bm25], pi, mask)
    torch.testing.assert_close(mix.weights, w.gather(1, top.indices), rtol=1e-5, atol=1e-12)
    torch.testing.assert_close(mix.shares.sum(-1), mix.weights, rtol=1e-12, atol=1e-15)
    listed = want > 0  # the books some head lists: the heaviest is among them
    torch.testing.assert_close(mix.top_weight, w.where(listed, 0.0).amax(-1), rtol=1e-5, atol=0.0)
    entropy = -(w * w.clamp_min(1e-300).log()).sum(-1)
    torch.testing.assert_close(mix.entropy, entropy, rtol=1e-5, atol=1e-9)


def test_a_prior_weighs_each_books_fused_evidence() -> None:
    """weight ∝ ρ(i) Σ_h π_h c_h(i): the brute force's RRF times the prior, renormalised over
    the books some head lists; a book's shares still sum to its weight, and a prior that is
    one constant everywhere changes nothing."""
    B, N, d, k, depth = 2, 300, 16, 15, 40
    K1, K2 = _unit(N, d, 11), _unit(N, d, 12)
    q1, q2 = _unit(B, d, 13), _unit(B, d, 14)
    pi = torch.tensor([[0.3, 0.7], [0.5, 0.5]], dtype=torch.float64)
    log_prior = torch.rand(N, generator=torch.Generator().manual_seed(15), dtype=torch.float64)
    log_prior = 3.0 * log_prior  # ρ from 1 to e³: enough to reorder the lists
    dense = [DenseHead(q1, K1, 20.0), DenseHead(q2, K2, 25.0)]
    mix = _fuse(dense, [], pi, k=k, depth=depth, log_prior=log_prior)
    rrf = _brute([q1 @ K1.T, q2 @ K2.T], pi, depth, None)
    want = rrf * log_prior.exp()
    want = want / want.sum(-1, keepdim=True)
    top = want.topk(k, dim=-1)
    assert torch.equal(mix.indices, top.indices)
    assert not torch.equal(mix.indices, rrf.topk(k, dim=-1).indices)  # the prior reorders
    assert mix.order is not None
    torch.testing.assert_close(mix.order, top.values, rtol=1e-9, atol=1e-12)
    # the weights are the heads' attention, which the prior does not enter
    w = _brute_mixture([20.0 * q1 @ K1.T, 25.0 * q2 @ K2.T], pi, None)
    torch.testing.assert_close(mix.weights, w.gather(1, top.indices), rtol=1e-5, atol=1e-12)
    flat = _fuse(dense, [], pi, k=k, depth=depth, log_prior=torch.full((N,), 7.0))
    plain = _fuse(dense, [], pi, k=k, depth=depth)
    assert torch.equal(flat.indices, plain.indices)
    assert flat.order is not None and plain.order is not None
    torch.testing.assert_close(flat.order, plain.order, rtol=1e-12, atol=1e-15)


def test_one_peaked_head_does_not_decide() -> None:
    """A title head with one identical title (its softmax ≈ 1 there) and π = 0.05 picks the
    mixture's first book over the description head's clear first (cosine 0.5, in a flatter
    softmax) with π = 0.95; fused by rank, the title's look-alike weighs what its π says."""
    N, d = 200, 16
    desc = _unit(N, d, 7)
    q = desc[:1].clone()
    title_keys = _unit(N, d, 8)
    title_keys[1] = title_keys[0]  # book 1's title is the query's own
    v = _unit(1, d, 9)[0]
    v = torch.nn.functional.normalize(v - (v @ q[0]) * q[0], dim=0)
    desc[2] = 0.5 * q[0] + math.sqrt(0.75) * v  # book 2's description: cosine 0.5
    dense = [DenseHead(title_keys[:1], title_keys, 19.0), DenseHead(q, desc, 4.0)]
    mask = torch.ones(N, dtype=torch.bool)
    mask[0] = False  # the query book itself
    pi = torch.tensor([[0.05, 0.95]], dtype=torch.float64)
    local = LocalDenseHeads(dense, size=N, mask=mask)
    mixed = run_mixture(local, mix_topk(local.scales, N, [], pi, k=1, mask=mask))
    local = LocalDenseHeads(dense, size=N, mask=mask)
    fused = run_mixture(local, fuse_ranks(local.scales, N, [], pi, k=N, mask=mask))
    assert int(mixed.indices[0, 0]) == 1  # the sharper softmax decides, whatever its π
    place = {int(i): n for n, i in enumerate(fused.indices[0].tolist())}
    assert place[2] < place[1]  # the look-alike title is one head's opinion, at its π


def test_the_weights_tell_a_near_duplicate_from_a_weak_match() -> None:
    """Two queries whose first book is first in every head: one has a near-duplicate (cosine
    0.98 in both heads), the other only a weak match (0.35, the rest near 0). By rank they are
    the same (1 / 61 each); by weight the near-duplicate takes most of the attention and the
    weak match little of it, and the entropy says which list is flat."""
    N, d = 500, 64
    g = torch.Generator().manual_seed(21)
    keys = torch.nn.functional.normalize(torch.randn(N, d, generator=g), dim=-1)
    q = torch.nn.functional.normalize(torch.randn(2, d, generator=g), dim=-1)
    for b, cos in enumerate((0.98, 0.35)):
        v = torch.nn.functional.normalize(keys[b] - (keys[b] @ q[b]) * q[b], dim=0)
        keys[b] = cos * q[b] + math.sqrt(1 - cos * cos) * v  # book b: cosine `cos` with query b
    dense = [DenseHead(q, keys, 19.0), DenseHead(q, keys, 25.0)]
    pi = torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=torch.float64)
    mix = _fuse(dense, [], pi, k=5, depth=50)
    assert mix.indices[:, 0].tolist() == [0, 1]
    assert mix.order is not None and mix.entropy is not None
    torch.testing.assert_close(mix.order[0], mix.order[1])  # ranks alone: the same
    near, weak = float(mix.weights[0, 0]), float(mix.weights[1, 0])
    assert near > 0.99 and weak < 0.2
    assert float(mix.entropy[0]) < float(mix.entropy[1])
