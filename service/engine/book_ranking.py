"""Books like a book, and books for a reader: attention with books as the queries, through the
same heads as a search (service/engine/book_attention.py builds them).

A book asks each head with what it has: its title key (the title head), its description key
(the description head), its whole text "<title>. <description>" as a BM25 query (the lexical
head: service/engine/lexical.py `LikeThisIndex`), and its names as whole names
(service/engine/catalog_names.py): the author head attends over the other books of one of its
principal authors (service/engine/book_works.py: not a foreword writer's), the series head over
the other books of its series, the subjects head over the books sharing its subject headings
(where the catalog has them), by how many and how specific the shared headings are, then by
description key. For liked books L and disliked books D, liked book l asks head h

    q_{l,h} = k_{l,h} − λ · mean_{d ∈ D} k_{d,h}       a field head (λ = DISLIKE_STRENGTH); the
                                                      author and series heads with q_{l,desc}
    s_l     = bm25(t_l) − λ · mean_{d ∈ D} bm25(t_d)  the lexical head, over the books with a
                                                      word of t_l (BM25 is linear in the query)
    p_{l,h} = softmax(scale_h · …)                    over the catalog less L, D and their
                                                      other editions
    weight(i) = Σ_l Σ_h (π_h / |L|) · c_{l,h}(i) / Z,  c = 1 / (60 + rank of i in p_{l,h})

the rank fusion of models/rank_fusion.py (by default, ATTEND_SIMILAR_FUSION; `mixture` gives
Σ π p instead), times a readers' prior (1 + ratings)^γ where ATTEND_SIMILAR_READERS asks for
one, and `similar(b)` is the same with L = {b}; with several liked books the field and lexical
heads ask once, with their taste (the mean of their queries, normalised). Fused by
rank, no head's peak decides: a title head that finds one look-alike title ("The Glass Castle"
→ "Glass House") is one opinion at its π, not the answer. The heads follow the evidence a book
has: a book of no series gets no series part, a book with no other book by its principal
authors no author part; their π goes to its other heads (service/engine/mixing.py), and the
response lists them as abstained. So a series book's mates come first, then its author's, and a
standalone book is carried by its title and description keys and its text. A result's shares
π_{l,h} c_{l,h}(i) / (Z · weight(i)) sum to 1 over (l, h): which liked book, through which
head, gave it its weight.

A work takes one slot (its best-ranked edition; the others are listed under it), the slots
are ordered for variety by maximal marginal relevance over the description keys
(models/diversity.py, λ = `BookHeads.diversity`; each result keeps its own weight), and a
recommendation gives the liked books' principal authors at most `own_authors` slots (3 by
default: the reader knows them), saying how many it held back. The exact top-k is over the keys
wherever they are: the index's `KeyStore` brings the liked books' keys and attends with them,
in this process or on the shards (service/cluster/shards/router.py), as a search does.
"""

from __future__ import annotations

import torch

from indexer.filters import Filters
from models.diversity import mmr_order
from models.mixture import Mixture
from service.config.head_weights import (
    BookHeads,
)
from service.engine.book_attention import TASTE, rank_by_books
from service.engine.book_works import AuthorKey, own_authors_of, pick_slots
from service.engine.exceptions import BookNotFoundError
from service.engine.mixing import NO_STRONG_MATCH_BELOW, hit_parts, match_strength
from service.engine.query_ranking import description_scores
from service.engine.results import (
    Because,
    HeadsUsed,
    NamedBook,
    RankedBook,
    Recommendations,
    Recommended,
    SimilarBooks,
)
from service.engine.served_index import RANK_FIELD, ServedIndex

# A recommendation's default room for the liked books' principal authors: 3 of 10 slots; the
# reader knows those authors already, and asks for more with `own_authors`.
OWN_AUTHORS = 3


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


def diverse_slots(
    index: ServedIndex,
    ranked: list[int],
    weights: list[float],
    k: int,
    *,
    lam: float,
    own: set[AuthorKey] | None = None,
    own_limit: int | None = None,
) -> tuple[list[tuple[int, list[int]]], int]:
    """`pick_slots` over the ranked rows in MMR order (models/diversity.py, over their
    description keys, λ = `lam`): positions into `ranked`, as there."""
    order = list(range(len(ranked)))
    if lam < 1.0 and len(ranked) > 1:
        keys = index.keys.key_rows(ranked, [RANK_FIELD])[0]  # (C, d)
        order = mmr_order(keys, torch.tensor(weights[: len(ranked)]), lam)
    names = index.names
    slots, held = pick_slots(
        names.works,
        names.principal,
        [ranked[p] for p in order],
        k,
        own=own,
        own_limit=own_limit,
    )
    return [(order[r], [order[e] for e in below]) for r, below in slots], held


def ordered_by(mix: Mixture) -> list[float]:
    """The value that ordered the hits (the rank fusion's, else the weights): the relevance the
    diversity step trades against likeness."""
    return (mix.order if mix.order is not None else mix.weights)[0].tolist()


def asked_for(index: ServedIndex, k: int, liked: list[int]) -> int:
    """How many hits to rank for k works: room for the works' other editions below them, and
    for every book by the liked books' principal authors, which a recommendation may hold
    back."""
    own = {m for r in liked for m in index.names.author_mates(r)}
    return min(len(index), 2 * k + 10 + len(own))


def strength(mix: Mixture, answered: bool) -> tuple[float | None, float, bool]:
    """The weights' entropy over the matched books, the match strength of the heaviest book
    (the rank fusion's `top_weight`, which need not be its first), and whether that is no
    strong match; a ranking no head answered has none."""
    if not answered:
        return None, 0.0, True
    top = mix.top_weight if mix.top_weight is not None else mix.weights[:, 0]
    s = match_strength(float(top[0]), int(mix.matched[0]))
    entropy = None if mix.entropy is None else float(mix.entropy[0])
    return entropy, s, s < NO_STRONG_MATCH_BELOW


def relevance_ranks(weights: list[float]) -> list[int]:
    """Each result's place by its weight alone among the results (1: the heaviest; equal
    weights share a place)."""
    return [1 + sum(v > w for v in weights) for w in weights]


def similar(
    index: ServedIndex,
    book_id: str,
    *,
    k: int,
    heads: BookHeads,
    filters: Filters | None = None,
) -> SimilarBooks:
    """The k works most like the book, one slot each (its best edition; the others listed
    under it), the book's own editions left out, and the books `filters` leaves out."""
    (row,) = rows_of(index, [book_id])
    att = rank_by_books(index, [row], [], k=asked_for(index, k, []), heads=heads, filters=filters)
    mix = att.mix
    if (0, RANK_FIELD) in att.parts:
        desc = mix.scores[0, :, att.parts.index((0, RANK_FIELD))].tolist()
    else:  # the description head was not asked: its scores for the hits, from the keys
        q = index.keys.key_rows([row], [RANK_FIELD])[0]  # (1, d)
        desc = description_scores(index, q, mix.indices, filters=[att.filters])[0].tolist()
    (hits,) = hit_parts(mix, [h for _, h in att.parts], [att.weights])
    weights = mix.weights[0].tolist()
    ranked = [i for i, _ in hits] if att.answered else []  # else: every asked head abstained
    slots, _ = diverse_slots(index, ranked, ordered_by(mix), k, lam=heads.diversity)
    places = relevance_ranks([weights[r] for r, _ in slots])
    results = [
        RankedBook(
            n + 1,
            index.books.row(hits[r][0]),
            desc[r],
            weights[r],
            hits[r][1],
            index.named_books([hits[e][0] for e in below]),
            relevance_rank=places[n],
        )
        for n, (r, below) in enumerate(slots)
    ]
    entropy, s, weak = strength(mix, att.answered)
    return SimilarBooks(
        id=book_id,
        title=index.books.titles[row],
        scale=heads.scales[RANK_FIELD],
        heads=HeadsUsed(att.weights, att.abstained, heads.scales),
        entropy=entropy,
        match_strength=s,
        no_strong_match=weak,
        matched=int(mix.matched[0]),
        results=results,
    )


def recommend(
    index: ServedIndex,
    liked: list[str],
    disliked: list[str],
    *,
    k: int,
    heads: BookHeads,
    own_authors: int = OWN_AUTHORS,
) -> Recommendations:
    """The k works a reader of `liked` would read next, one slot each, at most `own_authors`
    of them by a liked book's principal author (the rest are held back, and counted)."""
    liked_rows, disliked_rows = rows_of(index, liked), rows_of(index, disliked)
    att = rank_by_books(
        index, liked_rows, disliked_rows, k=asked_for(index, k, liked_rows), heads=heads
    )
    mix = att.mix
    ids, titles, names = index.books.ids, index.books.titles, index.names
    ranked = [i for i in mix.indices[0].tolist() if i >= 0] if att.answered else []
    own = own_authors_of(names.principal, liked_rows)
    slots, held = diverse_slots(
        index,
        ranked,
        ordered_by(mix),
        k,
        lam=heads.diversity,
        own=own,
        own_limit=own_authors,
    )
    places = relevance_ranks([float(mix.weights[0, r]) for r, _ in slots])
    results = []
    for n, (r, below) in enumerate(slots):
        w = float(mix.weights[0, r])
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
        book = index.books.row(ranked[r])
        editions = index.named_books([ranked[e] for e in below])
        results.append(Recommended(n + 1, book, w, because, editions, places[n]))
    entropy, s, weak = strength(mix, att.answered)
    return Recommendations(
        liked=[NamedBook(ids[r], titles[r]) for r in liked_rows],
        disliked=[NamedBook(ids[r], titles[r]) for r in disliked_rows],
        scale=heads.scales[RANK_FIELD],
        heads=HeadsUsed(att.weights, att.abstained, heads.scales),
        entropy=entropy,
        match_strength=s,
        no_strong_match=weak,
        matched=int(mix.matched[0]),
        results=results,
        own_authors=own_authors,
        held_back=held,
    )
