"""Token embeddings with their character offsets: what explanations are made of.

sentence-transformers' `encode(..., output_value="token_embeddings")` gives the transformer's
last hidden state per token (before pooling); the model's tokenizer gives each token's character
span. A text longer than the model's window (256 word pieces for all-MiniLM-L6-v2) is cut at
word starts into windows that are embedded separately, so every word of a long description gets
an embedding (each in the context of its own window).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor


@dataclass(frozen=True)
class TokenEmbeddings:
    """The word pieces of one text (special tokens left out), aligned by position."""

    pieces: list[str]  # e.g. ["harry", "potter", "and", "the", "half", "-", "blood", "prince"]
    spans: list[tuple[int, int]]  # each piece's [start, end) in the text
    words: list[int]  # the word each piece belongs to, 0, 1, 2, … in order
    vectors: Tensor  # (T, d) float32, unit length

    def __len__(self) -> int:
        return len(self.pieces)


@runtime_checkable
class TokenEncoder(Protocol):
    """An encoder that also gives token embeddings (for explanations)."""

    def token_embeddings(self, texts: list[str]) -> list[TokenEmbeddings]: ...


def embed_tokens(model: Any, texts: list[str]) -> list[TokenEmbeddings]:
    """Token embeddings of `texts` from a loaded `SentenceTransformer`."""
    tokenizer = model.tokenizer
    window = max(8, int(model.max_seq_length or 256) - 2)  # room for [CLS] and [SEP]
    out = []
    for text in texts:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        spans = [(int(a), int(b)) for a, b in enc["offset_mapping"]]
        word_ids = enc.word_ids()
        cuts = _windows(word_ids, window)
        pieces = tokenizer.convert_ids_to_tokens(enc["input_ids"])
        parts = [text[spans[a][0] : spans[b - 1][1]] for a, b in cuts if b > a]
        vectors = []
        if parts:
            with torch.inference_mode():
                embedded = model.encode(
                    parts, output_value="token_embeddings", show_progress_bar=False
                )
            for (a, b), part in zip(cuts, embedded, strict=True):
                emb = torch.as_tensor(part).float().cpu()[1:-1]  # drop [CLS] and [SEP]
                if emb.shape[0] != b - a:
                    raise RuntimeError(
                        f"token windows misaligned: {emb.shape[0]} embeddings for {b - a} pieces"
                    )
                vectors.append(emb)
        get_dim = (  # sentence-transformers 6 renamed get_sentence_embedding_dimension
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        matrix = torch.cat(vectors) if vectors else torch.empty(0, int(get_dim() or 0))
        out.append(
            TokenEmbeddings(
                pieces=list(pieces),
                spans=spans,
                words=_renumber([w if w is not None else -1 for w in word_ids]),
                vectors=torch.nn.functional.normalize(matrix, dim=-1),
            )
        )
    return out


def _windows(word_ids: list[int | None], window: int) -> list[tuple[int, int]]:
    """[a, b) piece ranges of at most `window` pieces, each starting at a word's first piece."""
    cuts, start, n = [], 0, len(word_ids)
    while start < n:
        end = min(n, start + window)
        if end < n:
            # back off to the first piece of the word that `end` falls in
            back = end
            while back > start + 1 and word_ids[back] == word_ids[back - 1]:
                back -= 1
            end = back if back > start + 1 else end
        cuts.append((start, end))
        start = end
    return cuts


def _renumber(word_ids: list[int]) -> list[int]:
    out, last, n = [], None, -1
    for w in word_ids:
        if w != last or w < 0:
            n += 1
            last = w
        out.append(n)
    return out
