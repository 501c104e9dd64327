"""Books like a book, and books for a reader: attention with books as the queries, through the
same heads as a search.

A book asks each head with what it has: its title key (the title head), its description key
(the description head), and its title and authors as BM25 terms (the lexical head: a book's
series and author are there). For liked books L and disliked books D, liked book l asks head h

    q_{l,h} = k_{l,h} − λ · mean_{d ∈ D} k_{d,h}       a field head (λ = DISLIKE_STRENGTH)
    s_l     = bm25(t_l) − λ · mean_{d ∈ D} bm25(t_d)  the lexical head, over the books with a
                                                      term of t_l (BM25 is linear in the query)
    weight(i) = Σ_l Σ_h (π_h / |L|) · softmax_h(scale_h · …)(i)  over the catalog less L and D

and `similar(b)` is the same with L = {b}. A liked book none of whose terms is in another book
gets no lexical part (its π goes to its other heads). A result's shares π_{l,h} p_{l,h}(i) /
weight(i) sum to 1 over (l, h): which liked book, through which head, gave it its weight.

The exact top-k is `models.mixture.mix_topk`'s, over the keys wherever they are: the index's
`KeyStore` brings the liked books' keys and attends with them, in this process or on the shards
(service/cluster/router.py), as a search does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from models.heads import ScoredHead
from models.mixture import Mixture, mix_topk
from service.engine.exceptions import BookNotFoundError
from service.engine.filters import Filters
from service.engine.head_weights import HEADS, LEXICAL, BookHeads
from service.engine.query_ranking import description_scores
from service.engine.results import (
    Because,
    HeadPart,
    HeadsUsed,
    RankedBook,
    Recommendations,
    Recommended,
    SimilarBooks,
)
from service.engine.served_index import RANK_FIELD, ServedIndex

DISLIKE_STRENGTH = 0.5


def rows_of(index: ServedIndex, ids: list[str]) -> list[int]:
    """Catalog rows of `ids`, in order, duplicates dropped; BookNotFoundError at the first
    unknown id."""
    rows = []
    for book_id in dict.fromkeys(ids):
        row = index.row_of(book_id)
        if row is None:
            raise BookNotFoundError(book_id)
        rows.append(row)
    return rows


def book_terms(index: ServedIndex, row: int) -> str:
    """What a book asks the lexical head: its title and its authors."""
    return " ".join([index.books.titles[row], *index.books.authors[row]])


@dataclass(frozen=True)
class BooksAttention:
    """The top-k of the liked books' heads: component j is liked book `parts[j][0]` asking head
    `parts[j][1]` (field heads first, as mix_topk orders them)."""

    mix: Mixture  # (1, k) hits; shares, probs and scores (1, k, C) per component
    parts: list[tuple[int, str]]
    weights: dict[str, float]  # π_h used, summed over the liked books
    abstained: tuple[str, ...]  # heads asked for that no liked book could use
    filters: Filters


def rank_by_books(
    index: ServedIndex, liked: list[int], disliked: list[int], *, k: int, heads: BookHeads
) -> BooksAttention:
    """The exact top k of the mixture above, for catalog rows `liked` and `disliked`."""
    asked = heads.weights
    names = [h for h in HEADS if asked.get(h, 0) > 0]
    fields = [h for h in names if h != LEXICAL]
    L = len(liked)
    filters = Filters(exclude=frozenset(index.books.ids[r] for r in liked + disliked))
    mask = index.filters.batch_mask([filters])  # (N,) the catalog less L and D
    parts: list[tuple[int, str]] = []
    qs: list[Tensor] = []
    pi: list[float] = []
    if fields:
        keys = index.keys.key_rows(liked + disliked, fields)  # (F, L + D, d)
        q = keys[:, :L]  # (F, L, d)
        if disliked:
            q = q - DISLIKE_STRENGTH * keys[:, L:].mean(1, keepdim=True)
        for b in range(L):
            for f, field in enumerate(fields):
                parts.append((b, field))
                qs.append(q[f, b : b + 1])  # (1, d)
                pi.append(asked[field] / L)
    scored: list[ScoredHead] = []
    if LEXICAL in names:
        terms = [book_terms(index, r) for r in liked + disliked]
        s = torch.from_numpy(index.lexical.scores(terms))  # (L + D, N)
        kept = s[:L] if mask is None else s[:L] * mask.cpu()
        evidence = (kept > 0).any(-1).tolist()  # (L,)
        shifted = s[:L] - DISLIKE_STRENGTH * s[L:].mean(0) if disliked else s[:L]  # (L, N)
        for b in range(L):
            # as in a search: p_lexical = 0 for a book with none of the terms, unless no book
            # has one (then the head is uniform, and weighs only if nothing else is asked)
            no_term = (s[b] <= 0) & evidence[b]
            logits = shifted[b : b + 1].masked_fill(no_term, -math.inf)  # (1, N)
            scored.append(ScoredHead(logits, heads.scales[LEXICAL]))
            parts.append((b, LEXICAL))
            pi.append(asked[LEXICAL] / L if evidence[b] else 0.0)
    if sum(pi) <= 0:  # only an abstaining lexical head was asked for: it stays, uniform
        pi = [asked[h] / L for _, h in parts]
    total = sum(pi)
    p = torch.tensor([pi], dtype=torch.float64) / total  # (1, C)
    dense = index.keys.dense_heads(
        torch.stack(qs) if qs else torch.empty(0, 1, index.dim),  # (Cd, 1, d)
        [(field, heads.scales[field]) for _, field in parts[: len(qs)]],
        filters=[filters],
        mask=mask,
    )
    mix = mix_topk(dense, scored, p, k=k, mask=mask)
    used: dict[str, float] = {}
    for (_, h), w in zip(parts, p[0].tolist(), strict=True):
        if w > 0:
            used[h] = used.get(h, 0.0) + w
    return BooksAttention(mix, parts, used, tuple(h for h in names if h not in used), filters)


def similar(index: ServedIndex, book_id: str, *, k: int, heads: BookHeads) -> SimilarBooks:
    (row,) = rows_of(index, [book_id])
    att = rank_by_books(index, [row], [], k=k, heads=heads)
    mix = att.mix
    if (0, RANK_FIELD) in att.parts:
        desc = mix.scores[0, :, att.parts.index((0, RANK_FIELD))].tolist()
    else:  # the description head was not asked: its scores for the hits, from the keys
        q = index.keys.key_rows([row], [RANK_FIELD])[0]  # (1, d)
        desc = description_scores(index, q, mix.indices, filters=[att.filters])[0].tolist()
    rows, weights = mix.indices[0].tolist(), mix.weights[0].tolist()
    scores, probs, shares = mix.scores[0].tolist(), mix.probs[0].tolist(), mix.shares[0].tolist()
    results = []
    for r, (i, w) in enumerate(zip(rows, weights, strict=True)):
        if i < 0:
            continue
        parts = {  # a lexical −inf: none of the terms, BM25 0
            h: HeadPart(
                score=max(0.0, scores[r][j]) if h == LEXICAL else scores[r][j],
                probability=probs[r][j],
                share=shares[r][j],
            )
            for j, (_, h) in enumerate(att.parts)
            if h in att.weights
        }
        results.append(RankedBook(r + 1, index.books.row(i), desc[r], w, parts))
    return SimilarBooks(
        id=book_id,
        title=index.books.titles[row],
        scale=heads.scales[RANK_FIELD],
        heads=HeadsUsed(att.weights, att.abstained, heads.scales),
        matched=int(mix.matched[0]),
        results=results,
    )


def recommend(
    index: ServedIndex, liked: list[str], disliked: list[str], *, k: int, heads: BookHeads
) -> Recommendations:
    liked_rows, disliked_rows = rows_of(index, liked), rows_of(index, disliked)
    att = rank_by_books(index, liked_rows, disliked_rows, k=k, heads=heads)
    mix = att.mix
    ids, titles = index.books.ids, index.books.titles
    results = []
    for r, (i, w) in enumerate(zip(mix.indices[0].tolist(), mix.weights[0].tolist(), strict=True)):
        if i < 0:
            continue
        shares = (mix.shares[0, r] / w).tolist() if w > 0 else [0.0] * len(att.parts)
        by_book: list[dict[str, float]] = [{} for _ in liked_rows]
        for (b, h), s in zip(att.parts, shares, strict=True):
            if h in att.weights:
                by_book[b][h] = by_book[b].get(h, 0.0) + s
        because = sorted(
            (
                Because(ids[b], titles[b], share=sum(hs.values()), heads=hs)
                for b, hs in zip(liked_rows, by_book, strict=True)
            ),
            key=lambda b: -b.share,
        )
        results.append(Recommended(r + 1, index.books.row(i), w, because))
    return Recommendations(
        liked=[ids[r] for r in liked_rows],
        disliked=[ids[r] for r in disliked_rows],
        scale=heads.scales[RANK_FIELD],
        heads=HeadsUsed(att.weights, att.abstained, heads.scales),
        matched=int(mix.matched[0]),
        results=results,
    )
