"""Books as the query: the heads' components a liked book asks, and their exact fused top-k
(service/engine/book_ranking.py turns it into similar books and recommendations; its docstring
gives the math)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from indexer.filters import Filters
from models.heads import ScoredHead
from models.mixture import Mixture
from service.config.head_weights import (
    AUTHOR,
    HEADS,
    LEXICAL,
    SCORED_HEADS,
    SERIES,
    SUBJECTS,
    BookHeads,
)
from service.engine.ranking import Component, rank
from service.engine.scored_heads import lexical_head, restricted_head
from service.engine.served_index import RANK_FIELD, ServedIndex

DISLIKE_STRENGTH = 0.5

TASTE = -1  # the liked book of a component that all of them ask together (their mean key)


@dataclass(frozen=True)
class BooksAttention:
    """The top-k of the liked books' heads: component j is liked book `parts[j][0]` asking head
    `parts[j][1]` (field heads first, as mix_topk orders them)."""

    mix: Mixture  # (1, k) hits; shares, probs and scores (1, k, C) per component
    parts: list[tuple[int, str]]
    weights: dict[str, float]  # π_h used, summed over the liked books
    abstained: tuple[str, ...]  # heads asked for that no liked book could use
    answered: bool  # whether any head asked for has evidence (else: no results)
    filters: Filters
    # per TASTE head: (k, L) each liked book's part of the taste's score of each hit
    taste: dict[str, list[list[float]]]


def rank_by_books(
    index: ServedIndex,
    liked: list[int],
    disliked: list[int],
    *,
    k: int,
    heads: BookHeads,
    filters: Filters | None = None,
) -> BooksAttention:
    """The exact top k of the mixture above, for catalog rows `liked` and `disliked`, over the
    books `filters` keeps (None: all)."""
    asked = heads.weights
    names = [h for h in HEADS if asked.get(h, 0) > 0]
    L = len(liked)
    # the catalog less L and D, and less their other editions: the same books
    named = [*liked, *disliked]
    gone = [e for r in named for e in index.names.works.editions(r)]
    base = filters or Filters()
    filters = replace(
        base, exclude=base.exclude | frozenset(index.books.ids[r] for r in named + gone)
    )
    mask = index.filters.batch_mask([filters])  # (N,)
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
            rows = [list(mates(r)) for r in liked]
            head, has = restricted_head(index, query[RANK_FIELD], rows, heads.scales[name], mask)
            if name == SUBJECTS:  # how much a book shares, then how alike its description
                head = with_shared_subjects(head, [index.names.subject_mates(r) for r in liked])
            for b in range(L):
                parts.append((b, name))
                one_book = ScoredHead(head.scores[b : b + 1], head.scale)  # (1, N)
                comps.append(
                    Component(
                        name, head.scale, [asked[name] / L], scored=one_book, evidence=[has[b]]
                    )
                )
    readers = index.readers if heads.readers > 0 and heads.fusion == "rank" else None
    ranked = rank(
        index,
        comps,
        k=k,
        filters=[filters],
        mask=mask,
        entropy=True,
        fusion=heads.fusion,
        log_prior=None if readers is None else heads.readers * readers,
    )
    mixed, mix = ranked.mixed, ranked.mix
    kept_parts = [parts[c] for c in mixed.columns]
    tasted = [h for b, h in kept_parts if b == TASTE]
    taste = taste_parts(index, tasted, mix.indices[0].tolist(), query, lexical)
    return BooksAttention(
        mix, kept_parts, mixed.used[0], mixed.abstained[0], mixed.answered[0], filters, taste
    )


def with_shared_subjects(head: ScoredHead, shared: list[dict[int, float]]) -> ScoredHead:
    """The subjects head with each mate's shared headings (`CatalogNames.subject_mates`: one
    per heading, less for a broad one) added to its description score: sharing only a broad
    heading ("fiction") is little evidence, and a book that shares three is a closer mate than
    one that shares one, whatever their blurbs."""
    scores = head.scores.clone()  # (L, N)
    for b, mates in enumerate(shared):
        if mates and torch.isfinite(scores[b]).any():
            cols = torch.tensor(list(mates))
            scores[b, cols] += torch.tensor(list(mates.values()), dtype=scores.dtype)
    return ScoredHead(scores, head.scale)


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
    texts together score the mean of their scores, and the disliked books' words weigh against
    them. The head, whether it has evidence, and the liked books' scores (L, N)."""
    L = len(liked)
    s = torch.from_numpy(index.like_this.scores(liked + disliked))  # (L + D, N)
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
