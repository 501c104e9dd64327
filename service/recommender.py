"""Books like a book, and books for a reader: attention with books as the queries.

similar(b): the book's own key is the query, over every other book's key (itself masked out).

recommend(liked L, disliked D): each liked book l is a query, shifted away from the disliked:

    q_l = k_l − λ · mean_{d ∈ D} k_d          (λ = DISLIKE_STRENGTH; no shift without D)
    p_l = softmax(scale · q_l Kᵀ)              over the catalog less L and D
    weight(i) = (1/|L|) Σ_l p_l(i)             the attention book i receives from the liked set

A candidate close to the disliked books loses scale·λ·(k̄_D·k_i) of logit in every liked query.
weight is a mixture of the liked books' softmaxes, so (1/|L|) p_l(i) / weight(i) is the share of
book i's weight that came from liked book l: the shares sum to 1. The exact top-k comes from
`models.mixture.mixture_topk`, as for the search heads.
"""

from __future__ import annotations

import torch

from models.heads import DenseHead, Head
from models.mixture import mixture_topk
from service.errors import BookNotFoundError, KeysElsewhereError
from service.ranker import Ranker
from service.schemas_books import (
    Because,
    RecommendHit,
    RecommendResponse,
    SimilarHit,
    SimilarResponse,
)

DISLIKE_STRENGTH = 0.5


def rows_of(ranker: Ranker, ids: list[str]) -> list[int]:
    """Catalog rows of `ids`, in order, duplicates dropped; 404 on the first unknown id."""
    if not ranker.holds_keys:
        raise KeysElsewhereError()
    rows = []
    for book_id in dict.fromkeys(ids):
        row = ranker.row_of(book_id)
        if row is None:
            raise BookNotFoundError(book_id)
        rows.append(row)
    return rows


def similar(ranker: Ranker, book_id: str, *, k: int, scale: float) -> SimilarResponse:
    (row,) = rows_of(ranker, [book_id])
    keys = ranker.keys
    mask = torch.ones(len(ranker), dtype=torch.bool, device=keys.device)
    mask[row] = False
    mix = mixture_topk(
        [DenseHead(keys[row : row + 1].float(), keys, scale)],
        torch.ones(1, 1),
        k=k,
        mask=mask,
        chunk_size=ranker.chunk_size,
    )
    results = [
        SimilarHit(rank=r + 1, score=float(mix.scores[0, r, 0]), **_book(ranker, i, w))
        for r, (i, w) in enumerate(
            zip(mix.indices[0].tolist(), mix.weights[0].tolist(), strict=True)
        )
        if i >= 0
    ]
    return SimilarResponse(
        id=book_id,
        title=ranker.titles[row],
        scale=scale,
        matched=int(mix.matched[0]),
        results=results,
    )


def recommend(
    ranker: Ranker, liked: list[str], disliked: list[str], *, k: int, scale: float
) -> RecommendResponse:
    liked_rows, disliked_rows = rows_of(ranker, liked), rows_of(ranker, disliked)
    keys = ranker.keys
    q = keys[liked_rows].float()  # (L, d)
    if disliked_rows:
        q = q - DISLIKE_STRENGTH * keys[disliked_rows].float().mean(0, keepdim=True)
    mask = torch.ones(len(ranker), dtype=torch.bool, device=keys.device)
    mask[liked_rows + disliked_rows] = False
    heads: list[Head] = [DenseHead(q[j : j + 1], keys, scale) for j in range(len(liked_rows))]
    pi = torch.full((1, len(heads)), 1.0 / len(heads), dtype=torch.float64)
    mix = mixture_topk(heads, pi, k=k, mask=mask, chunk_size=ranker.chunk_size)
    results = []
    for r, (i, w) in enumerate(zip(mix.indices[0].tolist(), mix.weights[0].tolist(), strict=True)):
        if i < 0:
            continue
        shares = (mix.shares[0, r] / w).tolist() if w > 0 else [0.0] * len(heads)
        because = sorted(
            (
                Because(id=ranker.ids[lr], title=ranker.titles[lr], share=s)
                for lr, s in zip(liked_rows, shares, strict=True)
            ),
            key=lambda b: -b.share,
        )
        results.append(RecommendHit(rank=r + 1, because=because, **_book(ranker, i, w)))
    return RecommendResponse(
        liked=[ranker.ids[r] for r in liked_rows],
        disliked=[ranker.ids[r] for r in disliked_rows],
        scale=scale,
        matched=int(mix.matched[0]),
        results=results,
    )


def _book(ranker: Ranker, row: int, weight: float) -> dict[str, object]:
    return {
        "id": ranker.ids[row],
        "title": ranker.titles[row],
        "authors": ranker.authors[row],
        "year": ranker.years[row],
        "language": ranker.languages[row],
        "weight": weight,
    }
