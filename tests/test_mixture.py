"""The exact mixture top-k (`mix_topk`, its asks answered by `run_mixture` as the search runs
it: dense heads in this process, scored heads beside them) against a brute-force (B, N)
computation in float64."""

from __future__ import annotations

import math

import pytest
import torch

import models.local_heads
from models.heads import DenseHead, ScoredHead
from models.local_heads import LocalDenseHeads
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
    monkeypatch.setattr(
        models.local_heads, "KEEP_SCORES", models.local_heads.KEEP_SCORES if keep_scores else 0
    )
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
    # each dense head's nearest book over the unmasked ones, its exact score rounded to fp32
    raw = torch.stack([q.double() @ keys.double().T for keys in (title, desc)], dim=1)
    if mask is not None:
        raw = raw.masked_fill(~mask, -math.inf)  # (B, Hd, N)
    assert got.best is not None
    torch.testing.assert_close(got.best, raw.amax(-1), rtol=1e-7, atol=0.0)  # float32 once
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


def test_a_scored_head_for_some_queries_keeps_their_known_finite_books() -> None:
    """`ScoredHead.rows` of a head whose finite books were given: the chosen queries' own,
    renumbered, as a pass over their scores would find them."""
    g = torch.Generator().manual_seed(21)
    B, N = 4, 500
    scores = torch.full((B, N), -math.inf)
    for b in range(B):
        cols = torch.randperm(N, generator=g)[: 10 + 30 * b]
        scores[b, cols] = torch.rand(len(cols), generator=g)
    head = ScoredHead(scores, 1.0, finite=torch.isfinite(scores).nonzero(as_tuple=True))
    for rows in ([1, 3], [0], [0, 1, 2, 3], [2]):
        sub = head.rows(torch.tensor(rows))
        want = torch.isfinite(scores[rows]).nonzero(as_tuple=True)
        assert sub.finite is not None
        assert torch.equal(sub.finite[0], want[0]) and torch.equal(sub.finite[1], want[1])
        assert torch.equal(sub.scores, scores[rows])


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


@pytest.fixture(params=["c", "torch"])
def cpu_passes(request: pytest.FixtureRequest):
    """Both ways the CPU runs the passes: the C kernels (models/_cpu_kernels.c, the entropy
    sweep's among them) and torch's operations."""
    from models import cpu_kernels

    if request.param == "c" and not cpu_kernels.available():
        pytest.skip("models/_cpu_kernels.c is not built")
    cpu_kernels.set_enabled(request.param == "c")
    try:
        yield request.param
    finally:
        cpu_kernels.set_enabled(True)


@pytest.mark.parametrize("mask_shape", [None, "N", "BN"])
def test_the_entropy_is_exact_in_c_and_in_torch(cpu_passes: str, mask_shape: str | None) -> None:
    """The sweep's entropy over kept scores, in one C read of them or in torch's chunks, with a
    dense-scored head (BM25 on most books), a sparse one (a few books) and a fully masked row:
    the brute force's −Σ w ln w to float32's precision."""
    N, d, B = 2500, 16, 4
    g = torch.Generator().manual_seed(11)
    q = _unit(B, d, 1)
    dense_bm25 = torch.rand(B, N, generator=g) * 8  # finite everywhere: no support
    few = torch.full((B, N), -math.inf)
    for b in range(B):
        cols = torch.randperm(N, generator=g)[: 30 + 20 * b]
        few[b, cols] = 1 + torch.rand(len(cols), generator=g) * 11
    heads: list[DenseHead | ScoredHead] = [
        DenseHead(q, _unit(N, d, 2), 20.0),
        DenseHead(q, _unit(N, d, 3), 25.0),
        ScoredHead(dense_bm25, 0.9),
        ScoredHead(few, 1.0),
    ]
    pi = torch.tensor([[0.2, 0.3, 0.1, 0.4], [0.5, 0.5, 0.0, 0.0], [0.1] * 3 + [0.7], [0.25] * 4])
    mask = None
    if mask_shape is not None:
        mask = torch.rand((N,) if mask_shape == "N" else (B, N), generator=g) > 0.4
        if mask_shape == "BN":
            mask[2] = False  # nothing left to this query: its entropy is 0
    got = _mix(heads, pi, k=5, mask=mask, entropy=True)
    want_w, _ = _brute(heads, pi, mask)
    want_w = want_w.nan_to_num(0.0)
    ent = -(want_w * want_w.clamp_min(1e-300).log()).sum(-1)
    assert got.entropy is not None
    torch.testing.assert_close(got.entropy, ent, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("known_support", [False, True])
def test_a_deeper_round_asks_for_the_unsettled_queries_alone(known_support: bool) -> None:
    """A query whose top k the first round cannot prove (a head that spreads its weight evenly
    over 200 books: ties at every cut until the list holds them all) takes further rounds; the
    queries the first round settled are not asked again, and every query's answer is the one
    it gets alone, whether the scored head's finite books were given (as the lexical head
    gives them) or found."""
    N, d, B, k = 3000, 16, 3, 5
    g = torch.Generator().manual_seed(12)
    q = _unit(B, d, 1)
    flat = torch.full((B, N), -math.inf)
    for b in range(B):
        cols = torch.randperm(N, generator=g)[:200]
        flat[b, cols] = 5.0 if b == 1 else torch.rand(200, generator=g) * 10
    finite = torch.isfinite(flat).nonzero(as_tuple=True) if known_support else None
    heads: list[DenseHead | ScoredHead] = [
        DenseHead(q, _unit(N, d, 2), 20.0),
        ScoredHead(flat, 1.0, finite=finite),
    ]
    pi = torch.tensor([[0.8, 0.2], [0.0, 1.0], [0.7, 0.3]])  # the middle query: the flat head
    local = LocalDenseHeads(heads[:1], size=N)  # type: ignore[list-item]
    steps = mix_topk(local.scales, N, heads[1:], pi, k=k)  # type: ignore[arg-type]
    asked: list[list[int] | None] = []
    answer = None
    while True:
        try:
            ask = steps.send(answer)
        except StopIteration as done:
            got: Mixture = done.value
            break
        rows = getattr(ask, "rows", None)
        asked.append(None if rows is None else rows.tolist())
        part = local if rows is None else local.rows(rows)
        answer = part.top(ask.k) if hasattr(ask, "k") else part.scores(ask.cand)
    assert got.rounds > 1
    assert asked[:2] == [None, None]  # the first round's top and scores: every query's
    assert asked[2:] == [[1]] * (2 * (got.rounds - 1)), asked  # then the unsettled one's
    for b in range(B):
        alone = _mix(
            [DenseHead(q[b : b + 1], heads[0].keys, 20.0), ScoredHead(flat[b : b + 1], 1.0)],  # type: ignore[union-attr]
            pi[b : b + 1],
            k=k,
        )
        assert torch.equal(got.indices[b], alone.indices[0])
        torch.testing.assert_close(got.weights[b], alone.weights[0], rtol=1e-6, atol=0.0)
        torch.testing.assert_close(got.shares[b], alone.shares[0], rtol=1e-6, atol=0.0)


@pytest.mark.parametrize("mask_shape", [None, "N", "BN"])
def test_a_further_round_from_kept_scores_lists_what_attend_lists(mask_shape: str | None) -> None:
    """A further round's top k' of some queries, taken from the scores the first round kept,
    is the list `attend` gives those queries over the keys: the same books (masked ones left
    out), weights and exact scores."""
    N, d, B = 4000, 16, 4
    g = torch.Generator().manual_seed(13)
    q = _unit(B, d, 1)
    heads = [DenseHead(q, _unit(N, d, 2), 20.0), DenseHead(q, _unit(N, d, 3), 25.0)]
    mask = None
    if mask_shape is not None:
        mask = torch.rand((N,) if mask_shape == "N" else (B, N), generator=g) > 0.5
    first = LocalDenseHeads(heads, size=N, mask=mask)
    first.top(10)
    rows = torch.tensor([1, 3])
    kept = first.rows(rows)
    fresh = LocalDenseHeads(
        [DenseHead(h.q[rows], h.keys, h.scale) for h in heads],
        size=N,
        mask=mask if mask is None or mask.dim() == 1 else mask[rows],
    )
    (got, got_lse), (want, want_lse) = kept.top(300), fresh.top(300)
    torch.testing.assert_close(got_lse, want_lse, rtol=1e-6, atol=0.0)
    for (gi, gw, gs), (wi, ww, ws) in zip(got, want, strict=True):
        assert torch.equal(gi, wi)
        torch.testing.assert_close(gw, ww, rtol=1e-5, atol=1e-12)
        torch.testing.assert_close(gs, ws, rtol=0.0, atol=0.0)


def test_two_live_heads_keep_their_own_scores() -> None:
    """A second batch's heads, alive beside the first's, do not write over the first's kept
    scores (that a dropped batch's large array is taken again: tests/test_spare_arrays.py)."""
    N, d = 3000, 16
    keys = _unit(N, d, 2)
    a = LocalDenseHeads([DenseHead(_unit(2, d, 1), keys, 20.0)], size=N)
    b = LocalDenseHeads([DenseHead(_unit(2, d, 5), keys, 20.0)], size=N)
    a.top(5)
    b.top(5)
    cand = torch.tensor([[0, 7, 2999], [5, 100, 1234]])
    want = (a.heads[0].q.double() @ keys.double().T).gather(1, cand)
    torch.testing.assert_close(a.scores(cand)[:, :, 0], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mask_shape", [None, "BN"])
def test_a_scored_heads_top_takes_the_lower_columns_among_ties_at_its_cut(
    cpu_passes: str, mask_shape: str | None
) -> None:
    """A head of few books whose scores tie across the k-th place (BM25 gives many books one
    score): its top k are the larger scores, then the lowest columns among the tie, best
    first, as a top-k over the whole row orders them; its weights and log-sum-exp those of
    the row's softmax; in C and in numpy alike."""
    from models.candidates import scored_top

    B, N, k = 3, 400, 6
    g = torch.Generator().manual_seed(31)
    scores = torch.full((B, N), -math.inf)
    for b in range(B):
        cols = torch.randperm(N, generator=g)[: 40 + 5 * b]
        scores[b, cols] = torch.randint(0, 4, (len(cols),), generator=g).float() + 1.0  # ties
    scores[2, :] = -math.inf
    scores[2, [7, 3]] = 2.0  # fewer books than k
    mask = None
    if mask_shape == "BN":
        mask = torch.rand(B, N, generator=g) > 0.2
    head = ScoredHead(scores, 0.5)
    assert head.support is not None
    [(idx, weights, raw)], lse = scored_top([head], k=k, mask=mask)
    kept = scores if mask is None else scores.masked_fill(~mask, -math.inf)
    for b in range(B):
        finite = torch.isfinite(kept[b]).nonzero().flatten().tolist()
        want = sorted(finite, key=lambda c: (-float(kept[b, c]), c))[:k]
        assert idx[b].tolist() == want + [-1] * (k - len(want)), b
        logits = 0.5 * kept[b].double()
        torch.testing.assert_close(lse[b, 0], torch.logsumexp(logits, 0), rtol=1e-12, atol=0)
        want_w = torch.softmax(logits, 0)[want]
        torch.testing.assert_close(weights[b, : len(want)], want_w, rtol=1e-12, atol=0)
        assert raw[b, : len(want)].tolist() == kept[b, want].double().tolist()


def test_a_scored_heads_top_past_the_c_passes_k_is_numpys() -> None:
    """A wide ranking (a sorted or faceted search asks its heads for thousands of books) past
    what the C top k takes goes to numpy's partition, with the same order: larger scores
    first, the lower column among ties."""
    from models.candidates import scored_top

    N, k = 12000, 4097  # past the C pass's 4,096: it refuses such a k (ValueError)
    g = torch.Generator().manual_seed(41)
    scores = torch.full((2, N), -math.inf)
    for b in range(2):
        cols = torch.randperm(N, generator=g)[:5000]
        scores[b, cols] = torch.randint(0, 50, (5000,), generator=g).float()
    head = ScoredHead(scores, 1.0)
    assert head.support is not None
    [(idx, _, _)], _ = scored_top([head], k=k, mask=None)
    for b in range(2):
        finite = torch.isfinite(scores[b]).nonzero().flatten().tolist()
        want = sorted(finite, key=lambda c: (-float(scores[b, c]), c))[:k]
        assert idx[b].tolist() == want
