"""Why a book matched a query, word by word: cross-attention between their token embeddings.

For the query's word pieces Q (Tq, d) and the book's title-and-description pieces B (Tb, d), all
unit-length token embeddings from the encoder's last layer:

    weights = softmax(scale · Q Bᵀ)   (Tq, Tb), each query piece's attention over the book's pieces

Pieces are merged into words: a book word's weight is the sum of its pieces' (rows stay
distributions), a query word's row is the mean of its pieces' rows. Stop words and punctuation
are left out on both sides (the attention runs over the book's content words only; a query made
only of stop words keeps them), so the weight goes to words that carry meaning. A book word is
highlighted when a query word gives it at least `HIGHLIGHT_MIN_WEIGHT` of its attention and it
is among that query word's `TOP_WORDS` best.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from bm25s.stopwords import STOPWORDS_EN_PLUS

from models.tokens import TokenEmbeddings

TOP_WORDS = 3  # book words listed per query word
HIGHLIGHT_MIN_WEIGHT = 0.1
_STOPWORDS = frozenset(STOPWORDS_EN_PLUS)  # NLTK's English list: pronouns too


@dataclass(frozen=True)
class Word:
    field: str  # "query", "title" or "description"
    text: str
    start: int  # character offsets into that field's text
    end: int


@dataclass(frozen=True)
class Explanation:
    query_words: list[Word]
    book_words: list[Word]
    weights: torch.Tensor  # (Wq, Wb) float64, each row sums to 1
    highlights: list[tuple[int, float, list[int]]]  # (book word, best weight, query words)


def words_of(tokens: TokenEmbeddings, text: str, field: str) -> tuple[list[Word], torch.Tensor]:
    """The text's words and, per piece, the index of the word it belongs to (T,) int64."""
    words: list[Word] = []
    piece_word = torch.empty(len(tokens), dtype=torch.int64)
    last: int | None = None
    for piece, word in enumerate(tokens.words):  # a word's pieces are adjacent, in order
        if word != last:
            start = tokens.spans[piece][0]
            words.append(Word(field, "", start, start))
            last = word
        w = words[-1]
        words[-1] = Word(field, w.text, w.start, tokens.spans[piece][1])
        piece_word[piece] = len(words) - 1
    words = [Word(field, text[w.start : w.end], w.start, w.end) for w in words]
    return words, piece_word


def is_content(word: Word) -> bool:
    return any(c.isalnum() for c in word.text) and word.text.casefold() not in _STOPWORDS


def explain(
    query: tuple[str, TokenEmbeddings],
    fields: list[tuple[str, str, TokenEmbeddings]],
    *,
    scale: float,
    left_out: Mapping[str, Sequence[tuple[int, int]]] | None = None,
) -> Explanation:
    """Cross-attention of the query's words over the words of the book's `fields`
    ((name, text, tokens) each), less the words inside `left_out`'s [start, end) spans of a
    field's text (its boilerplate sentences: indexer/boilerplate.py), as stop words are.

    Pieces are mapped to words by index (`index_add_`), never by a dense words × pieces matrix:
    memory is O(Tq·Tb + Wq·Wb), linear in the book's length (the dense float64 matrix grew with
    its square: 3 GB at 12,000 words)."""
    q_words, q_piece_word = words_of(query[1], query[0], "query")
    keep_q = [i for i, w in enumerate(q_words) if is_content(w)] or list(range(len(q_words)))
    b_words: list[Word] = []
    b_vectors, b_piece_word = [], []  # per field: (T, d), and each piece's book word or -1
    for name, text, tokens in fields:
        words, piece_word = words_of(tokens, text, name)
        spans = (left_out or {}).get(name, ())
        renumber = torch.full((len(words) + 1,), -1, dtype=torch.int64)  # last: no word
        for i, w in enumerate(words):
            if is_content(w) and not any(a <= w.start and w.end <= b for a, b in spans):
                renumber[i] = len(b_words)
                b_words.append(w)
        b_piece_word.append(renumber[piece_word])
        b_vectors.append(tokens.vectors)
    q_words = [q_words[i] for i in keep_q]
    if not q_words or not b_words:
        return Explanation(q_words, b_words, torch.zeros(len(q_words), len(b_words)), [])
    B = torch.cat(b_vectors).double()  # (Tb, d)
    piece_bw = torch.cat(b_piece_word)  # (Tb,) the content word of each piece, or -1
    in_word = piece_bw >= 0  # (Tb,) pieces of content words
    logits = scale * (query[1].vectors.double() @ B[in_word].T)  # (Tq, Tb') content pieces only
    attn = torch.softmax(logits, dim=-1)  # (Tq, Tb')
    piece_w = torch.zeros(len(attn), len(b_words), dtype=torch.float64)  # (Tq, Wb)
    piece_w.index_add_(1, piece_bw[in_word], attn)  # sum over a word's pieces
    q_renumber = torch.full((len(q_piece_word) and int(q_piece_word.max()) + 1,), -1)
    q_renumber[keep_q] = torch.arange(len(keep_q))
    q_of_piece = q_renumber[q_piece_word]  # (Tq,) the kept query word of each piece, or -1
    kept = q_of_piece >= 0
    weights = torch.zeros(len(q_words), len(b_words), dtype=torch.float64)  # (Wq, Wb)
    weights.index_add_(0, q_of_piece[kept], piece_w[kept])
    pieces_per_word = torch.bincount(q_of_piece[kept], minlength=len(q_words))  # (Wq,)
    weights /= pieces_per_word.unsqueeze(1)  # mean over a query word's pieces
    return Explanation(q_words, b_words, weights, _highlights(weights))


def _highlights(weights: torch.Tensor) -> list[tuple[int, float, list[int]]]:
    best: dict[int, tuple[float, list[int]]] = {}
    top = weights.topk(min(TOP_WORDS, weights.shape[1]), dim=-1)
    for qi, (vals, cols) in enumerate(zip(top.values.tolist(), top.indices.tolist(), strict=True)):
        for v, c in zip(vals, cols, strict=True):
            if v >= HIGHLIGHT_MIN_WEIGHT:
                w, qs = best.get(c, (0.0, []))
                best[c] = (max(w, v), [*qs, qi])
    return sorted((c, w, qs) for c, (w, qs) in best.items())
