"""The lexical head: BM25 (bm25s) over each book's title, authors and description.

A sentence embedding blurs exact names ("Tolkien", "PyTorch", "Harry Potter"); BM25 matches them.
Its scores become a head of the attention like any other: logits = scale_lexical · bm25, a
softmax over the catalog. BM25's term weight is a log-odds (the Robertson/Spärck Jones weight),
so exp(bm25) is already a likelihood ratio and a scale near 1 keeps that meaning.

The document of a book is its title twice, its authors twice and its description once: titles
and author names are short and say what the book is, so a name in them counts more than one in a
blurb (a cheap BM25F). English stop words are dropped and words are Snowball-stemmed; Chinese,
Japanese and Korean, written without spaces, are read as overlapping character bigrams.

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

import itertools
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence

import bm25s
import numpy as np
import Stemmer
from bm25s.stopwords import STOPWORDS_EN
from bm25s.tokenization import Tokenizer

from models import spare_arrays
from models.text import cjk_bigrams, normalize_text
from service.engine.bm25_postings import Postings, RowMoves, RowTokens, lucene_bm25
from service.engine.bm25_queries import query_scores

logger = logging.getLogger(__name__)
# Texts are tokenized this many at a time and their words numbered at once: the words of
# every book at once, as str objects, were ~300 MiB at 100,000 books, and the heap they left
# behind stayed in the process's resident memory.
TOKENIZE_CHUNK = 4096


def book_document(title: str, authors: Sequence[str], description: str | None) -> str:
    """The text BM25 indexes for one book."""
    names = " ".join(authors)
    return "\n".join(part for part in (title, title, names, names, description or "") if part)


def like_this_text(title: str, description: str | None) -> str:
    """The text the more-like-this index holds of one book: "<title>. <description>", its title
    alone without one."""
    return f"{title}. {description}" if description else title


def lexical_text(text: str) -> str:
    """`text` as both BM25 indexes read it, a book's and a query's alike: normalized
    (models/text.py), and CJK runs as their bigrams, so a word inside a sentence written without
    spaces is a term."""
    return cjk_bigrams(normalize_text(text))


def _chunks(texts: Iterable[str]) -> Iterator[list[str]]:
    """The texts as `lexical_text`, TOKENIZE_CHUNK at a time."""
    it = iter(texts)
    while chunk := [lexical_text(t) for t in itertools.islice(it, TOKENIZE_CHUNK)]:
        yield chunk


def _search_tokens(documents: Iterable[str]) -> Iterator[list[str]]:
    """The search documents' terms, a document at a time (tokenized a chunk at a time):
    English stop words dropped, Snowball-stemmed."""
    tokenizer = Tokenizer(stopwords="en", stemmer=Stemmer.Stemmer("english"))
    for chunk in _chunks(documents):
        # update_vocab: by default ("if_empty") the chunks after the first would lose every
        # word the first did not have
        tokens: list[list[str]] = tokenizer.tokenize(
            chunk, update_vocab=True, return_as="string", show_progress=False
        )
        yield from tokens


def _like_this_tokens(texts: Iterable[str]) -> Iterator[list[str]]:
    """The more-like-this texts' words, a text at a time: English stop words dropped, not
    stemmed."""
    for chunk in _chunks(texts):
        tokens: list[list[str]] = bm25s.tokenize(
            chunk, stopwords="en", return_ids=False, show_progress=False
        )
        yield from tokens


class LexicalIndex:
    """BM25 scores of a query for every book, rows aligned with the served index's."""

    def __init__(self, documents: Iterable[str], n: int | None = None):
        """BM25 over the `n` `documents` (an iterable of them, read a chunk at a time; n
        None: a list, all of it)."""
        t0 = time.perf_counter()
        if n is None:
            documents = list(documents)
            n = len(documents)
        self._build(Postings.of(_search_tokens(documents), n)[0])
        logger.info(
            "built the BM25 index of %d books in %.2f s", self.size, time.perf_counter() - t0
        )

    @classmethod
    def following(
        cls, previous: LexicalIndex, moves: RowMoves, documents: Iterable[str]
    ) -> LexicalIndex:
        """The index of the next generation: `previous`'s rows moved by `moves`, the changed
        rows' `documents` (in `moves.changed` order) tokenized; the same index as one built
        whole (tests/test_incremental_swap.py)."""
        t0 = time.perf_counter()
        index = cls.__new__(cls)
        index._build(previous.postings.moved(moves, _search_tokens(documents))[0])
        logger.info(
            "built the BM25 index of %d books (%d changed) in %.2f s",
            index.size,
            len(moves.changed),
            time.perf_counter() - t0,
        )
        return index

    def arrays(self) -> dict[str, np.ndarray]:
        """The index as arrays, its postings (service/engine/served_form.py)."""
        return self.postings.arrays()

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> LexicalIndex:
        """The index `arrays()` gave: the same scores, nothing tokenized."""
        index = cls.__new__(cls)
        index._build(Postings.from_arrays(arrays))
        return index

    def _build(self, postings: Postings) -> None:
        self.postings = postings  # what the next generation's index starts from
        self.size = len(postings.lengths)
        self._bm25 = lucene_bm25(postings)
        # Queries are tokenized here, not by bm25s's tokenizer: its `tokenize` rebuilds a
        # reverse vocabulary per call (~4 ms on 5k books) and remembers every word it is
        # shown, which in a service means every word of every query, for ever. Same splitter,
        # stop words and stemmer, so a query's terms are the ones the documents were indexed
        # with.
        tokenizer = Tokenizer(stopwords="en", stemmer=None)
        self._split = tokenizer.splitter
        self._stopwords = frozenset(tokenizer.stopwords)
        self._stemmer = Stemmer.Stemmer("english")
        self._lock = threading.Lock()  # a PyStemmer stemmer is not thread-safe
        # term → id, the bm25s index's own vocabulary (one dict, not copies of it)
        self._ids: dict[str, int] = self._bm25.vocab_dict

    def __len__(self) -> int:
        return self.size

    def terms(self, query: str) -> list[str]:
        """The query's stemmed terms that occur in the catalog (stop words and unknown words
        dropped)."""
        words = [w for w in self._split(lexical_text(query).lower()) if w not in self._stopwords]
        with self._lock:
            stems: list[str] = self._stemmer.stemWords(words)
        return [s for s in stems if s in self._ids]

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
        out = spare_arrays.empty("lexical.scores", (len(queries), self.size), np.float32)
        query_scores(self._bm25, [[self._ids[t] for t in self.terms(q)] for q in queries], out)
        return out


class LikeThisIndex:
    """BM25 of each book's own text against every book's: (R, N) scores for books as queries,
    rows aligned with the served index's."""

    _starts: np.ndarray  # (N + 1,) int64 where each book's tokens start in _tokens
    _tokens: np.ndarray  # (Σ tokens,) uint16 (int32 past 65,536 terms) each book's own words

    def __init__(self, texts: Iterable[str], n: int | None = None):
        """`texts`: each of the `n` books' "<title>. <description>" (its title alone without
        one), an iterable read a chunk at a time (n None: a list, all of it)."""
        t0 = time.perf_counter()
        if n is None:
            texts = list(texts)
            n = len(texts)
        self._build(*Postings.of(_like_this_tokens(texts), n), None)
        logger.info(
            "built the more-like-this BM25 of %d books in %.2f s",
            self.size,
            time.perf_counter() - t0,
        )

    @classmethod
    def following(
        cls, previous: LikeThisIndex, moves: RowMoves, texts: Iterable[str]
    ) -> LikeThisIndex:
        """The index of the next generation, as `LexicalIndex.following` makes it."""
        t0 = time.perf_counter()
        index = cls.__new__(cls)
        index._build(*previous.postings.moved(moves, _like_this_tokens(texts)), (previous, moves))
        logger.info(
            "built the more-like-this BM25 of %d books (%d changed) in %.2f s",
            index.size,
            len(moves.changed),
            time.perf_counter() - t0,
        )
        return index

    def arrays(self) -> dict[str, np.ndarray]:
        """The index as arrays: its postings and each book's own words."""
        return {
            **self.postings.arrays(),
            "scores": self._bm25.scores["data"],
            "own.starts": self._starts,
            "own.tokens": self._tokens,
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> LikeThisIndex:
        """The index `arrays()` gave: the same scores and queries, nothing tokenized."""
        postings = Postings.from_arrays(arrays)
        starts = np.asarray(arrays["own.starts"], np.int64)
        tokens = np.asarray(arrays["own.tokens"])
        scores = np.asarray(arrays["scores"], np.float32)
        n = len(postings.lengths)
        if len(starts) != n + 1 or starts[0] != 0 or starts[-1] != len(tokens):
            raise ValueError("a more-like-this index whose books' words do not hold together")
        if len(tokens) and not 0 <= int(tokens.min()) <= int(tokens.max()) < len(postings.terms):
            raise ValueError("a more-like-this index whose books' words are not its terms")
        if len(scores) != len(postings.rows):
            raise ValueError("a more-like-this index whose scores are not its postings'")
        index = cls.__new__(cls)
        index._build(postings, RowTokens(tokens, np.diff(starts)), None, scores=scores)
        return index

    def _build(
        self,
        postings: Postings,
        own: RowTokens,
        previous: tuple[LikeThisIndex, RowMoves] | None,
        *,
        scores: np.ndarray | None = None,
    ) -> None:
        """`own`: every row's tokens (previous None), or the changed rows' (the rest are the
        previous index's, renumbered to these postings' term ids)."""
        self.postings = postings
        self.size = len(postings.lengths)
        self._bm25 = lucene_bm25(postings, held=True, scores=scores)
        ids = self._bm25.vocab_dict
        # each book's query, its own tokens: (Σ tokens,) int32 and where each book's starts
        if previous is None:
            lengths = own.sizes
            flat = own.ids
        else:
            before, moves = previous
            source = moves.sources  # each row's previous row, −1: changed
            lengths = np.zeros(self.size, np.int64)
            lengths[source >= 0] = np.diff(before._starts)[source[source >= 0]]
            lengths[moves.changed] = own.sizes
            starts = np.concatenate([[0], np.cumsum(lengths)])
            # the previous tokens renumbered to these term ids (the same ids unless a term went)
            renumber = np.array([ids.get(t, -1) for t in before.postings.terms], np.int32)
            old = before._tokens
            if not np.array_equal(renumber, np.arange(len(renumber))):
                old = renumber[old]
            flat = np.empty(
                int(starts[-1]), np.int32 if len(postings.terms) > 1 << 16 else old.dtype
            )
            # runs of rows moved together (consecutive here and before) copied a slice each,
            # the changed rows' own tokens between: O(changed) slices, no pass per token
            kept = source >= 0
            step = np.flatnonzero((np.diff(source) != 1) | ~kept[1:] | ~kept[:-1]) + 1
            for a, b in zip(np.r_[0, step].tolist(), np.r_[step, self.size].tolist(), strict=True):
                if kept[a]:
                    first = before._starts[source[a]]
                    flat[starts[a] : starts[b]] = old[first : first + starts[b] - starts[a]]
            own_starts = np.concatenate([[0], np.cumsum(own.sizes)])
            for i, r in enumerate(moves.changed.tolist()):
                flat[starts[r] : starts[r + 1]] = own.ids[own_starts[i] : own_starts[i + 1]]
        self._starts = np.concatenate([[0], np.cumsum(lengths)])
        # 2 bytes a token while the term ids fit (200 bytes a book before, at 100,000 books)
        wide = len(postings.terms) > 1 << 16
        self._tokens = np.asarray(flat, np.int32 if wide else np.uint16)

    def word_rows(
        self, words: Collection[str], fold: Callable[[str], list[str]]
    ) -> dict[str, np.ndarray | None]:
        """The rows whose text ("<title>. <description>") holds each of `words` (folded
        words: a term is one where `fold` makes it that word, "márquez" → "marquez"), each
        ascending; None for a stop word, which the index does not keep; no entry for a word no
        book holds."""
        p = self.postings
        terms: dict[str, list[int]] = {}
        for t, term in enumerate(p.terms):
            if term in words:  # a lower-case ASCII word is its own fold
                terms.setdefault(term, []).append(t)
            elif not term.isascii() and len(f := fold(term)) == 1 and f[0] in words:
                terms.setdefault(f[0], []).append(t)
        found: dict[str, np.ndarray | None] = {
            word: np.unique(np.concatenate([p.rows[p.indptr[t] : p.indptr[t + 1]] for t in ts]))
            for word, ts in terms.items()
        }
        found.update((word, None) for word in STOPWORDS_EN if word in words)
        return found

    def scores(self, rows: Sequence[int]) -> np.ndarray:
        """(R, N) float32 BM25 scores of each book's text (zeros for a book without a word)."""
        out = spare_arrays.empty("like_this.scores", (len(rows), self.size), np.float32)
        own = [self._tokens[self._starts[r] : self._starts[r + 1]] for r in rows]  # no copies
        query_scores(self._bm25, own, out)
        return out
