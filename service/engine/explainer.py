"""Explanations: a book's token embeddings (cached) against the query's, word by word."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from indexer.boilerplate import Boilerplate
from models.tokens import TokenEmbeddings, TokenEncoder
from service.engine.exceptions import ExplanationUnavailableError
from service.engine.word_attention import TOP_WORDS, Explanation, explain

logger = logging.getLogger(__name__)

_CACHED_BOOKS = 256
# The cache's bound in token-vector bytes too: a long description is ~2,500 pieces (3.8 MB).
_CACHED_BYTES = 128 * 1024 * 1024
# Descriptions are explained up to here (cut at a word boundary): time and memory stay bounded
# whatever the book. ~10 token windows of the model; its search embedding reads only the first.
MAX_EXPLAINED_CHARS = 10_000


@dataclass(frozen=True)
class BookExplanation:
    """A query against one book, word by word (service/engine/word_attention.py)."""

    id: str
    query: str
    title: str
    description: str | None
    explained_chars: int | None  # of the description; None without one
    scale: float
    words: Explanation
    # per query word, the book words it attends to most: (book word, weight), best first
    attends: list[list[tuple[int, float]]]


def explained_part(text: str, limit: int = MAX_EXPLAINED_CHARS) -> str:
    """`text`, or its first `limit` characters cut before a word that would straddle them."""
    if len(text) <= limit:
        return text
    cut = limit
    while cut > limit // 2 and not text[cut].isspace() and not text[cut - 1].isspace():
        cut -= 1
    return text[: cut if cut > limit // 2 else limit]


class Explainer:
    """Explanations from `encoder`'s token embeddings; the books' are kept in an LRU."""

    def __init__(self, encoder: object, *, scale: float):
        self.encoder = encoder if isinstance(encoder, TokenEncoder) else None
        self.scale = scale
        self._books: OrderedDict[tuple[str, str, str], tuple[TokenEmbeddings, TokenEmbeddings]]
        self._books = OrderedDict()
        self._bytes = 0  # of the cached token vectors
        self._lock = threading.Lock()

    def explain(
        self,
        *,
        book_id: str,
        query: str,
        title: str,
        description: str | None,
        boilerplate: Boilerplate | None = None,
    ) -> BookExplanation:
        """The query's words' attention over the book's, the description's `boilerplate`
        sentences left out."""
        if self.encoder is None:
            raise ExplanationUnavailableError()
        t0 = time.perf_counter()
        (q_tokens,) = self.encoder.token_embeddings([query])
        explained = explained_part(description or "")
        short_title = explained_part(title)  # a pathological title is bounded too
        t_tokens, d_tokens = self._book_tokens(book_id, short_title, explained)
        exp = explain(
            (query, q_tokens),
            [("title", short_title, t_tokens), ("description", explained, d_tokens)],
            scale=self.scale,
            left_out={"description": boilerplate.spans(explained) if boilerplate else []},
        )
        logger.debug("explained %s for %r in %.3f s", book_id, query, time.perf_counter() - t0)
        top = exp.weights.topk(min(TOP_WORDS, exp.weights.shape[1]), dim=-1)
        attends = [
            list(zip(cols, vals, strict=True))
            for vals, cols in zip(top.values.tolist(), top.indices.tolist(), strict=True)
        ]
        return BookExplanation(
            id=book_id,
            query=query,
            title=title,
            description=description,
            explained_chars=None if description is None else len(explained),
            scale=self.scale,
            words=exp,
            attends=attends if exp.book_words else [],
        )

    def _book_tokens(
        self, book_id: str, title: str, description: str
    ) -> tuple[TokenEmbeddings, TokenEmbeddings]:
        key = (book_id, title, description)
        with self._lock:
            if key in self._books:
                self._books.move_to_end(key)
                return self._books[key]
        assert self.encoder is not None
        title_tokens, description_tokens = self.encoder.token_embeddings([title, description])
        with self._lock:
            if key not in self._books:
                self._books[key] = (title_tokens, description_tokens)
                self._bytes += _size(title_tokens) + _size(description_tokens)
            while len(self._books) > _CACHED_BOOKS or self._bytes > _CACHED_BYTES:
                _, (t, d) = self._books.popitem(last=False)
                self._bytes -= _size(t) + _size(d)
        return title_tokens, description_tokens


def _size(tokens: TokenEmbeddings) -> int:
    return tokens.vectors.numel() * tokens.vectors.element_size()
