"""Books like a book, and books for a reader: attention with books as the queries, through the
same heads as a search.

A book asks each head with what it has: its title key (the title head), its description key
(the description head), its topic terms, the description's words of highest tf · idf, as BM25
terms (the lexical head: service/engine/lexical.py), and its names as whole names
(service/engine/catalog_names.py): the author head attends over the other books by one of its
authors, the series head over the other books of its series, the subjects head over the other
books under one of its subject headings (where the catalog has them), all by description key.
A shared first name or a common title word is no evidence: it is in no head. For liked books L
and disliked books D, liked book l asks head h

    q_{l,h} = k_{l,h} − λ · mean_{d ∈ D} k_{d,h}       a field head (λ = DISLIKE_STRENGTH); the
                                                      author and series heads with q_{l,desc}
    s_l     = bm25(t_l) − λ · mean_{d ∈ D} bm25(t_d)  the lexical head, over the books with a
                                                      term of t_l (BM25 is linear in the query)
    weight(i) = Σ_l Σ_h (π_h / |L|) · softmax_h(scale_h · …)(i)  over the catalog less L and D

and `similar(b)` is the same with L = {b}; with several liked books the field and lexical heads
ask once, with their taste (the mean of their queries, normalised). The mixture follows the
evidence a book has: a book of no series gets no series part, a book with no other book by its
authors no author part, a book none of whose topic terms is in another book no lexical part;
their π goes to its other heads (service/engine/mixing.py), and the response lists them as
abstained. So a series book's mates come first, then its author's, and a standalone book is
carried by its title and description keys and its topic terms. A result's shares π_{l,h}
p_{l,h}(i) / weight(i) sum to 1 over (l, h): which liked book, through which head, gave it its
weight.

The exact top-k is `models.mixture.mix_topk`'s, over the keys wherever they are: the index's
`KeyStore` brings the liked books' keys and attends with them, in this process or on the shards
(service/cluster/shards/router.py), as a search does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from indexer.filters import Filters
from models.heads import ScoredHead
from models.mixture import Mixture
from service.engine.exceptions import BookNotFoundError
from service.engine.head_weights import (
    AUTHOR,
    HEADS,
    LEXICAL,
    SCORED_HEADS,
    SERIES,
    SUBJECTS,
    BookHeads,
)
from service.engine.mixing import hit_parts
from service.engine.query_ranking import description_scores
from service.engine.ranking import Component, rank
from service.engine.results import (
    Because,
    HeadsUsed,
    NamedBook,
    RankedBook,
    Recommendations,
    Recommended,
    SimilarBooks,
)
from service.engine.scored_heads import lexical_head, restricted_head
from service.engine.served_index import RANK_FIELD, ServedIndex

DISLIKE_STRENGTH = 0.5
TASTE = -1  # the liked book of a component that all of them ask together (their mean key)


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


@dataclass(frozen=True)
class BooksAttention:
    """The top-k of the liked books' heads: component j is liked book `parts[j][0]` asking head
    `parts[j][1]` (field heads first, as mix_topk orders them)."""

    mix: Mixture  # (1, k) hits; shares, probs and scores (1, k, C) per component
    parts: list[tuple[int, str]]
    weights: dict[str, float]  # π_h used, summed over the liked books
    abstained: tuple[str, ...]  # heads asked for that no liked book could use
    filters: Filters
    # per TASTE head: (k, L) each liked book's part of the taste's score of each hit
    taste: dict[str, list[list[float]]]


def rank_by_books(
    index: ServedIndex, liked: list[int], disliked: list[int], *, k: int, heads: BookHeads
) -> BooksAttention:
    """The exact top k of the mixture above, for catalog rows `liked` and `disliked`."""
    asked = heads.weights
    names = [h for h in HEADS if asked.get(h, 0) > 0]
    L = len(liked)
    filters = Filters(exclude=frozenset(index.books.ids[r] for r in liked + disliked))
    mask = index.filters.batch_mask([filters])  # (N,) the catalog less L and D
    fields = [h for h in names if h not in SCORED_HEADS]
    restricted = {AUTHOR, SERIES, SUBJECTS} & set(names)  # they attend by description key
    query = field_queries(index, liked, disliked, [*fields, *([RANK_FIELD] if restricted else [])])
    one = 0 if L == 1 else TASTE  # one book, or the liked books' taste: their mean key
    parts: list[tuple[int, str]] = []  # (liked book, head) of each component
    comps: list[Component] = []
    for f in fields:  # asked once, with the whole π_f: one book's key, or the taste (normalised)
        parts.append((one, f))
        q = F.normalize(query[f].mean(0, keepdim=True), dim=-1)  # (1, d)
        comps.append(Component(f, heads.scales[f], [asked[f]], query=q))
    lexical = None
    if LEXICAL in names:
        head, evidence, lexical = lexical_part(index, liked, disliked, heads.scales[LEXICAL], mask)
        parts.append((one, LEXICAL))
        comps.append(
            Component(LEXICAL, head.scale, [asked[LEXICAL]], scored=head, evidence=[evidence])
        )
    mates_of = {
        AUTHOR: index.names.author_mates,
        SERIES: index.names.series_mates,
        SUBJECTS: index.names.subject_mates,
    }
    for name, mates in mates_of.items():
        if name in names:  # one component per liked book, each with π_h / L
            rows = [mates(r) for r in liked]
            head, has = restricted_head(index, query[RANK_FIELD], rows, heads.scales[name], mask)
            for b in range(L):
                parts.append((b, name))
                one_book = ScoredHead(head.scores[b : b + 1], head.scale)  # (1, N)
                comps.append(
                    Component(
                        name, head.scale, [asked[name] / L], scored=one_book, evidence=[has[b]]
                    )
                )
    ranked = rank(index, comps, k=k, filters=[filters], mask=mask)
    mixed, mix = ranked.mixed, ranked.mix
    kept_parts = [parts[c] for c in mixed.columns]
    tasted = [h for b, h in kept_parts if b == TASTE]
    taste = taste_parts(index, tasted, mix.indices[0].tolist(), query, lexical)
    return BooksAttention(mix, kept_parts, mixed.used[0], mixed.abstained[0], filters, taste)


def field_queries(
    index: ServedIndex, liked: list[int], disliked: list[int], fields: list[str]
) -> dict[str, Tensor]:
    """Each field's query per liked book, (L, d): its key, moved away from the disliked books'."""
    fields = list(dict.fromkeys(fields))
    if not fields:
        return {}
    L = len(liked)
    keys = index.keys.key_rows(liked + disliked, fields)  # (F, L + D, d)
    q = keys[:, :L]  # (F, L, d)
    if disliked:
        q = q - DISLIKE_STRENGTH * keys[:, L:].mean(1, keepdim=True)
    return dict(zip(fields, q, strict=True))


def lexical_part(
    index: ServedIndex, liked: list[int], disliked: list[int], scale: float, mask: Tensor | None
) -> tuple[ScoredHead, bool, Tensor]:
    """The lexical head of the liked books together: BM25 is linear in its query, so their
    topic terms together score the mean of their scores, and the disliked books' terms weigh
    against them. The head, whether it has evidence, and the liked books' scores (L, N)."""
    L = len(liked)
    s = torch.from_numpy(index.lexical.topic_scores(liked + disliked))  # (L + D, N)
    together = s[:L].mean(0, keepdim=True)  # (1, N)
    head, (evidence,) = lexical_head(together, scale, mask)
    if disliked and evidence:  # only over the books with a liked term, as without dislikes
        shifted = together - DISLIKE_STRENGTH * s[L:].mean(0, keepdim=True)
        head = ScoredHead(torch.where(torch.isfinite(head.scores), shifted, head.scores), scale)
    return head, evidence, s[:L]


def taste_parts(
    index: ServedIndex,
    tasted: list[str],
    hits: list[int],
    query: dict[str, Tensor],
    lexical: Tensor | None,
) -> dict[str, list[list[float]]]:
    """Per head the liked books asked together: (k, L) each liked book's part of each hit's
    score, from its own score of the hit (`split`)."""
    rows = [max(i, 0) for i in hits]  # padding's parts are never read
    if not tasted or not rows:
        return {}
    own: dict[str, Tensor] = {}  # head → (k, L)
    if fields := [h for h in tasted if h != LEXICAL]:
        hit_keys = index.keys.key_rows(rows, fields)  # (F, k, d)
        own |= {f: hit_keys[j] @ query[f].T for j, f in enumerate(fields)}
    if LEXICAL in tasted and lexical is not None:
        own[LEXICAL] = lexical[:, rows].T
    return {h: split(t).tolist() for h, t in own.items()}


def split(scores: Tensor) -> Tensor:
    """(k, L) liked books' scores of each hit → their parts of the taste's, summing to 1: the
    taste's score is the mean of theirs (a field head's, before the mean key is normalised), so
    each part is its score's share of the sum; scores ≤ 0 count 0, and where none is > 0 the
    parts are equal."""
    pos = scores.double().clamp_min(0)
    total = pos.sum(-1, keepdim=True)
    return torch.where(total > 0, pos / total.clamp_min(1e-300), 1.0 / scores.shape[-1])


def similar(index: ServedIndex, book_id: str, *, k: int, heads: BookHeads) -> SimilarBooks:
    (row,) = rows_of(index, [book_id])
    att = rank_by_books(index, [row], [], k=k, heads=heads)
    mix = att.mix
    if (0, RANK_FIELD) in att.parts:
        desc = mix.scores[0, :, att.parts.index((0, RANK_FIELD))].tolist()
    else:  # the description head was not asked: its scores for the hits, from the keys
        q = index.keys.key_rows([row], [RANK_FIELD])[0]  # (1, d)
        desc = description_scores(index, q, mix.indices, filters=[att.filters])[0].tolist()
    (hits,) = hit_parts(mix, [h for _, h in att.parts], [att.weights])
    weights = mix.weights[0].tolist()
    results = [
        RankedBook(r + 1, index.books.row(i), desc[r], weights[r], parts)
        for r, (i, parts) in enumerate(hits)
    ]
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
            if h not in att.weights:
                continue
            for j, part in ((b, 1.0),) if b != TASTE else enumerate(att.taste[h][r]):
                by_book[j][h] = by_book[j].get(h, 0.0) + s * part
        because = sorted(
            (
                Because(ids[b], share=sum(hs.values()), heads=hs)
                for b, hs in zip(liked_rows, by_book, strict=True)
            ),
            key=lambda b: -b.share,
        )
        results.append(Recommended(r + 1, index.books.row(i), w, because))
    return Recommendations(
        liked=[NamedBook(ids[r], titles[r]) for r in liked_rows],
        disliked=[NamedBook(ids[r], titles[r]) for r in disliked_rows],
        scale=heads.scales[RANK_FIELD],
        heads=HeadsUsed(att.weights, att.abstained, heads.scales),
        matched=int(mix.matched[0]),
        results=results,
    )
