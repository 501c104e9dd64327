"""A search, from query texts to responses: one encoder call and one attention call per batch."""

from __future__ import annotations

import logging

from models.encoder import Encoder
from service.errors import IndexEmptyError
from service.ranker import Filters, Ranker
from service.schemas import SearchHit, SearchOptions, SearchResponse

logger = logging.getLogger(__name__)


def search(
    queries: list[str],
    options: SearchOptions,
    *,
    encoder: Encoder,
    ranker: Ranker,
    scale: float,
) -> list[SearchResponse]:
    if len(ranker) == 0:
        raise IndexEmptyError()
    logger.debug("search %r %s", queries, options)
    q = encoder.encode(queries)  # (B, d)
    filters = Filters(options.author, options.year_min, options.year_max, options.language)
    rankings = ranker.rank(q, k=options.k, offset=options.offset, scale=scale, filters=filters)
    return [
        SearchResponse(
            query=text,
            model=ranker.model,
            scale=scale,
            catalog_size=len(ranker),
            matched=ranking.matched,
            k=options.k,
            offset=options.offset,
            results=[
                SearchHit(
                    rank=options.offset + i + 1,
                    id=ranker.ids[hit.row],
                    title=ranker.titles[hit.row],
                    authors=ranker.authors[hit.row],
                    year=ranker.years[hit.row],
                    language=ranker.languages[hit.row],
                    score=hit.score,
                    weight=hit.weight,
                )
                for i, hit in enumerate(ranking.hits)
            ],
        )
        for text, ranking in zip(queries, rankings, strict=True)
    ]
