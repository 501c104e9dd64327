"""The lexical head: BM25 (bm25s) over each book's title, authors and description.

A sentence embedding blurs exact names ("Tolkien", "PyTorch", "Harry Potter"); BM25 matches them.
Its scores become a head of the attention like any other: logits = scale_lexical · bm25, a
softmax over the catalog. BM25's term weight is a log-odds (the Robertson/Spärck Jones weight),
so exp(bm25) is already a likelihood ratio and a scale near 1 keeps that meaning.

The document of a book is its title twice, its authors twice and its description once: titles
and author names are short and say what the book is, so a name in them counts more than one in a
blurb (a cheap BM25F). English stop words are dropped and words are Snowball-stemmed.

A book as the query asks another index (`LikeThisIndex`): BM25 over each book's
"<title>. <description>", as a reader's own "more like this" would build it (k1 1.5, b 0.75,
English stop words, no stemming), with the book's whole text as the query. Not the search
document: its title twice and its authors twice made title look-alikes ("The Glass Castle" →
"Glass House") and a shared first name ("William") evidence of likeness; the author and series
heads (service/engine/catalog_names.py) carry a book's names as whole names instead. On the
standalone books of ../shared/data/similar_topical_dev.jsonl, this BM25 alone scored nDCG@10
0.045 where the search document's (stemmed, names twice) scored 0.039, and 0.030 with the
description's 25 terms of highest tf · idf that were the query before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

import bm25s
import numpy as np
import Stemmer
from bm25s.tokenization import Tokenizer

from models.text import normalize_text

logger = logging.getLogger(__name__)


def book_document(title: str, authors: Sequence[str], description: str | None) -> str:
    """The text BM25 indexes for one book."""
    names = " ".join(authors)
    return "\n".join(part for part in (title, title, names, names, description or "") if part)


class LexicalIndex:
    """BM25 scores of a query for every book, rows aligned with the served index's."""

    def __init__(self, documents: Sequence[str]):
        """BM25 over `documents`."""
        t0 = time.perf_counter()
        tokenizer = Tokenizer(stopwords="en", stemmer=Stemmer.Stemmer("english"))
        tokens = tokenizer.tokenize(
            [normalize_text(d) for d in documents], return_as="string", show_progress=False
        )
        self._bm25 = bm25s.BM25()
        self.size = len(documents)
        if self.size:
            self._bm25.index(tokens, show_progress=False)
        # Queries are tokenized here, not by the tokenizer: its `tokenize` rebuilds a reverse
        # vocabulary per call (~4 ms on 5k books) and remembers every word it is shown, which
        # in a service means every word of every query, for ever. Same splitter, stop words and
        # stemmer, so a query's terms are the ones the documents were indexed with.
        self._split = tokenizer.splitter
        self._stopwords = frozenset(tokenizer.stopwords)
        self._stemmer = Stemmer.Stemmer("english")
        self._vocab = frozenset(self._bm25.vocab_dict) if self.size else frozenset()
        self._lock = threading.Lock()  # a PyStemmer stemmer is not thread-safe
        self._ids: dict[str, int] = dict(self._bm25.vocab_dict) if self.size else {}
        # bm25s numbers the terms in its vocabulary set's order, which the hash seed sets: so a
        # term id must never order anything that two processes have to agree on
        self._words = {i: t for t, i in self._ids.items()}
        logger.info(
            "built the BM25 index of %d books in %.2f s", self.size, time.perf_counter() - t0
        )

    def __len__(self) -> int:
        return self.size

    def terms(self, query: str) -> list[str]:
        """The query's stemmed terms that occur in the catalog (stop words and unknown words
        dropped)."""
        words = [w for w in self._split(normalize_text(query).lower()) if w not in self._stopwords]
        with self._lock:
            stems: list[str] = self._stemmer.stemWords(words)
        return [s for s in stems if s in self._vocab]

    def knows(self, word: str) -> bool:
        """Whether `word` is a word of the catalog (after stemming; stop words are not)."""
        return bool(self.terms(word))

    def holding(self, text: str) -> np.ndarray:
        """The rows of the books whose document holds every term of `text` (none for a text
        without a known term): each term's posting list is its column of the score matrix."""
        ids = sorted({self._ids[t] for t in self.terms(text)})
        if not ids or not self.size:
            return np.zeros(0, dtype=np.int64)
        indptr, indices = self._bm25.scores["indptr"], self._bm25.scores["indices"]
        rows = indices[indptr[ids[0]] : indptr[ids[0] + 1]]
        for i in ids[1:]:
            rows = np.intersect1d(rows, indices[indptr[i] : indptr[i + 1]], assume_unique=True)
        return np.asarray(rows, dtype=np.int64)

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """(B, N) float32 BM25 scores; a row of zeros for a query with no known term."""
        out = np.zeros((len(queries), self.size), dtype=np.float32)
        if not self.size:
            return out
        for b, query in enumerate(queries):
            terms = self.terms(query)
            if terms:
                out[b] = self._bm25.get_scores(terms)
        return out


class LikeThisIndex:
    """BM25 of each book's own text against every book's: (R, N) scores for books as queries,
    rows aligned with the served index's."""

    def __init__(self, texts: Sequence[str]):
        """`texts`: each book's "<title>. <description>" (its title alone without one)."""
        t0 = time.perf_counter()
        self.size = len(texts)
        tokens = bm25s.tokenize(
            [normalize_text(t) for t in texts], stopwords="en", show_progress=False
        )
        self._bm25 = bm25s.BM25(k1=1.5, b=0.75)
        # each book's query, its own tokens: (Σ tokens,) int32 and where each book's start
        ids = [np.asarray(t, dtype=np.int32) for t in tokens.ids]
        self._starts = np.cumsum([0, *(len(t) for t in ids)])
        self._tokens = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int32)
        if self._tokens.size:  # no word at all (every text stop words): bm25s divides by 0
            self._bm25.index(tokens, show_progress=False)
        logger.info(
            "built the more-like-this BM25 of %d books in %.2f s",
            self.size,
            time.perf_counter() - t0,
        )

    def scores(self, rows: Sequence[int]) -> np.ndarray:
        """(R, N) float32 BM25 scores of each book's text (zeros for a book without a word)."""
        out = np.zeros((len(rows), self.size), dtype=np.float32)
        for b, row in enumerate(rows):
            query = self._tokens[self._starts[row] : self._starts[row + 1]].tolist()
            if query:
                out[b] = self._bm25.get_scores(query)
        return out
