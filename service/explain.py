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
    """The text's words and the (W, T) 0/1 matrix saying which pieces make each word."""
    groups: dict[int, list[int]] = {}
    for piece, word in enumerate(tokens.words):
        groups.setdefault(word, []).append(piece)
    words, member = [], torch.zeros(len(groups), len(tokens), dtype=torch.float64)
    for w, pieces in enumerate(groups.values()):
        start, end = tokens.spans[pieces[0]][0], tokens.spans[pieces[-1]][1]
        words.append(Word(field, text[start:end], start, end))
        member[w, pieces] = 1.0
    return words, member


def is_content(word: Word) -> bool:
    return any(c.isalnum() for c in word.text) and word.text.casefold() not in _STOPWORDS


def explain(
    query: tuple[str, TokenEmbeddings],
    fields: list[tuple[str, str, TokenEmbeddings]],
    *,
    scale: float,
) -> Explanation:
    """Cross-attention of the query's words over the words of the book's `fields`
    ((name, text, tokens) each)."""
    q_words, q_member = words_of(query[1], query[0], "query")
    keep_q = [i for i, w in enumerate(q_words) if is_content(w)] or list(range(len(q_words)))
    b_words: list[Word] = []
    b_vectors, b_members = [], []
    for name, text, tokens in fields:
        words, member = words_of(tokens, text, name)
        keep = [i for i, w in enumerate(words) if is_content(w)]
        b_words += [words[i] for i in keep]
        b_members.append(member[keep])
        b_vectors.append(tokens.vectors)
    q_words = [q_words[i] for i in keep_q]
    if not q_words or not b_words:
        return Explanation(q_words, b_words, torch.zeros(len(q_words), len(b_words)), [])
    B = torch.cat(b_vectors).double()  # (Tb, d)
    M: torch.Tensor = torch.block_diag(*b_members)  # type: ignore[no-untyped-call]  # (Wb, Tb)
    in_word = M.sum(0) > 0  # (Tb,) pieces of content words
    logits = scale * (query[1].vectors.double() @ B.T)  # (Tq, Tb)
    logits = logits.masked_fill(~in_word, float("-inf"))
    piece_w = torch.softmax(logits, dim=-1) @ M.T  # (Tq, Wb): sum over a word's pieces
    Qm = q_member[keep_q]  # (Wq, Tq)
    weights = (Qm @ piece_w) / Qm.sum(1, keepdim=True)  # (Wq, Wb): mean over a word's pieces
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
