"""The ranking's settings of the service: the heads a search and a book as the query use, their
scales, how a book's heads are fused and ordered (ATTEND_HEADS … ATTEND_SIMILAR_DIVERSITY,
ATTEND_RECOMMEND_HEADS).
`ServiceSettings` (service/config/settings.py) inherits them, one class per runnable as before."""

from __future__ import annotations

from functools import cached_property

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings

from indexer.settings import ATTEND_CONFIG
from service.config.head_weights import BookHeads, Fusion, HeadScales, parse_heads, parse_scales


class RankingSettings(BaseSettings):
    model_config = ATTEND_CONFIG

    heads: str = Field(
        "title:0.2,description:0.5,lexical:0.3,author:3",
        description="Default head weights of a search (name:weight, normalised to sum 1): the "
        "title and description keys' heads, the BM25 lexical head and the author head (the "
        "books of an author the query names; it abstains for the many queries that name none, "
        "and the others keep their ratios). Chosen on the relevance suite (python -m "
        "benchmarks.relevance), every kind of query at once.",
    )
    head_scales: str = Field(
        "title:19,description:25,lexical:1.1,author:10,series:25,subjects:5",
        description="Each head's softmax scale (inverse temperature) in a search: logits = "
        "scale · q·k for a field head (the author and series heads: with the description "
        "keys), scale · BM25 for the lexical head. The title, description and lexical scales "
        "are calibrated so that each softmax has the same mean entropy (4 nats) over the "
        "suite's queries; the author head's, flatter, so that an author's books all count.",
    )
    similar_heads: str = Field(
        "title:0.05,description:0.2,lexical:0.2,author:0.6,series:2,subjects:0.2",
        description="Default head weights of similar books and recommendations (a book as the "
        "query: its title and description keys, BM25 of its whole text, its principal authors' "
        "other books, its series' other books and the books sharing its subject headings, "
        "where the catalog has them), fused by rank (ATTEND_SIMILAR_FUSION). A head without "
        "evidence for the book abstains, so a series book gets its series mates first, then its "
        "author's books, and a standalone book its topical neighbours. Chosen on the suite's "
        "series, topical and recommend queries.",
    )
    recommend_heads: str = Field(
        "title:0.05,description:0.2,lexical:0.05,author:0.6,series:2,subjects:0.2",
        description="Default head weights of a recommendation for two or more liked books, "
        "which ask as one taste (one liked book asks with ATTEND_SIMILAR_HEADS). As "
        "ATTEND_SIMILAR_HEADS but for the lexical head: the liked books' texts in one BM25 "
        "query find the books that share many words with any one of them, where a reader of "
        "both wants what they have in common (on the suite's 100 pairs BM25 alone scores 0.044 "
        "against a dense mean's 0.064, while for one book as the query it is level with the "
        "description head).",
    )
    similar_head_scales: str = Field(
        "title:19,description:25,lexical:0.55,author:5,series:2,subjects:10",
        description="Each head's softmax scale with a book as the query: its p_h, and so the "
        "weights a response shows, and the order too under ATTEND_SIMILAR_FUSION=mixture (rank "
        "fusion orders by each head's ranks). The lexical head's gives it about the "
        "description head's mean entropy over the catalog's books as queries "
        "(`python -m benchmarks.similar_weights`): a book's whole text as a BM25 query is "
        "sharper than a typed query's few words.",
    )
    similar_fusion: Fusion = Field(
        "rank",
        description="How similar books and recommendations fuse their heads: rank (each head's "
        "weighted reciprocal rank, so that no one head's peak decides: a title head that finds "
        "one look-alike title outweighed every other head in a mixture) or mixture "
        "(Σ π_h softmax_h, as a search).",
    )
    similar_readers: float = Field(
        0.0,
        ge=0,
        le=2,
        description="γ of the readers' prior on similar books and recommendations: each book's "
        "fused weight times (1 + how many readers rated it)^γ (the catalog's `ratings_count`; "
        "a book without one counts as the median), so that of two equally close books the one "
        "more people read comes first. Off by default: on the shared catalog it lifts the suite's "
        "topical figures only because its labelled books are the more-read ones, and it brings "
        "best-sellers into lists they do not belong in. It needs ATTEND_SIMILAR_FUSION=rank; a "
        "catalog without counts has no prior.",
    )
    similar_diversity: float = Field(
        0.8,
        ge=0,
        le=1,
        description="λ of the maximal marginal relevance that orders similar books and "
        "recommendations: each next result by λ · its weight (over the top one's) − (1 − λ) · "
        "its description key's largest cosine with a result above it, so that ten books about "
        "one thing are not the whole answer. 1 keeps the fused order; each result's weight is "
        "still its own.",
    )

    @field_validator("heads", "similar_heads", "recommend_heads")
    @classmethod
    def _valid_heads(cls, value: str) -> str:
        parse_heads(value)
        return value

    @field_validator("head_scales", "similar_head_scales")
    @classmethod
    def _valid_scales(cls, value: str) -> str:
        parse_scales(value)
        return value

    # Parsed at their first read, once per settings object: the app's start reads them all, and
    # the recommend budget reads `similar` on every request (tests/test_admission.py).
    @cached_property
    def default_heads(self) -> dict[str, float]:
        return parse_heads(self.heads)

    @cached_property
    def scales(self) -> HeadScales:
        """A search's heads' scales."""
        return parse_scales(self.head_scales)

    @cached_property
    def similar(self) -> BookHeads:
        """Similar books' (and one liked book's recommendations') default head weights and
        scales."""
        return self._book_heads(self.similar_heads)

    @cached_property
    def recommend(self) -> BookHeads:
        """The default heads of a recommendation for two or more liked books."""
        return self._book_heads(self.recommend_heads)

    def _book_heads(self, weights: str) -> BookHeads:
        return BookHeads(
            parse_heads(weights),
            parse_scales(self.similar_head_scales),
            self.similar_fusion,
            self.similar_readers if self.similar_fusion == "rank" else 0.0,
            self.similar_diversity,
        )
