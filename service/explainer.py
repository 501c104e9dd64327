"""`GET /books/{id}/explain`: a book's token embeddings (cached) against the query's."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

from models.tokens import TokenEmbeddings, TokenEncoder
from service.errors import ExplanationUnavailableError
from service.explain import explain
from service.schemas_books import (
    Attended,
    BookWord,
    ExplainResponse,
    Highlight,
    QueryWord,
    QueryWordAttention,
)

logger = logging.getLogger(__name__)

_CACHED_BOOKS = 256
# The cache's bound in token-vector bytes too: a long description is ~2,500 pieces (3.8 MB).
_CACHED_BYTES = 128 * 1024 * 1024
# Descriptions are explained up to here (cut at a word boundary): time and memory stay bounded
# whatever the book. ~10 token windows of the model; its search embedding reads only the first.
MAX_EXPLAINED_CHARS = 10_000


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
        self, *, book_id: str, query: str, title: str, description: str | None
    ) -> ExplainResponse:
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
        )
        logger.debug("explained %s for %r in %.3f s", book_id, query, time.perf_counter() - t0)
        book_words = [
            BookWord(field=w.field, text=w.text, start=w.start, end=w.end) for w in exp.book_words
        ]
        top = exp.weights.topk(min(3, exp.weights.shape[1]), dim=-1) if book_words else None
        return ExplainResponse(
            id=book_id,
            query=query,
            title=title,
            description=description,
            explained_chars=None if description is None else len(explained),
            scale=self.scale,
            query_words=[QueryWord(text=w.text, start=w.start, end=w.end) for w in exp.query_words],
            book_words=book_words,
            weights=[[round(v, 5) for v in row] for row in exp.weights.tolist()],
            attends=[
                QueryWordAttention(
                    query_word=i,
                    top=[Attended(word=c, weight=v) for v, c in zip(vals, cols, strict=True)],
                )
                for i, (vals, cols) in enumerate(
                    zip(top.values.tolist(), top.indices.tolist(), strict=True)
                )
            ]
            if top is not None
            else [],
            highlights=[
                Highlight(
                    field=book_words[c].field,
                    start=book_words[c].start,
                    end=book_words[c].end,
                    text=book_words[c].text,
                    weight=w,
                    query_words=qs,
                )
                for c, w, qs in exp.highlights
            ],
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
