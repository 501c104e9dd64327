"""Synthetic catalogs of any size for benchmarks/growth.py: real-looking books drawn from the
shared catalog, and a stand-in encoder fast enough to index a million of them in minutes.

    .venv/bin/python -m benchmarks.growth_catalog 100000 /tmp/books-100k.jsonl

A synthetic book takes the first half of one real title's words and the second half of
another's, two to four sentences of real descriptions joined into one, a real book's authors,
year and language, and a numbered id; the text statistics (lengths, vocabulary, authors per
book) are the shared catalog's. `StandInEncoder` embeds a text as the unit sum of one fixed
random vector per hashed word: texts sharing words are close, as with a sentence model, at a
few microseconds a text (the real model embeds about 60 texts/s on this machine). It records
its vectors under the real model's name, so `attend serve` encodes queries with the real model
over these keys.
"""

from __future__ import annotations

import json
import random
import re
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.defaults import DEFAULT_MODEL

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "books.jsonl"
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Source:
    """What synthetic books are drawn from: the shared catalog's parts."""

    titles: list[list[str]]  # each title's words
    sentences: list[str]
    books: list[dict[str, Any]]  # authors, year, language of each real book

    @classmethod
    def read(cls, path: Path = SHARED) -> Source:
        titles, sentences, books = [], [], []
        with path.open(encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                if words := str(row.get("title") or "").split():
                    titles.append(words)
                sentences += [s for s in _SENTENCE.split(row.get("description") or "") if s]
                books.append(
                    {k: row[k] for k in ("authors", "year", "language") if row.get(k) is not None}
                )
        return cls(titles, sentences, books)


def synthetic_books(source: Source, n: int, *, seed: int = 0) -> Iterator[dict[str, Any]]:
    """`n` books, the same for the same seed."""
    rng = random.Random(seed)
    for i in range(n):
        a, b = rng.choice(source.titles), rng.choice(source.titles)
        title = " ".join(a[: max(1, len(a) // 2)] + b[len(b) // 2 :])
        # the sentences joined into one: real sentences drawn at random for random authors
        # would each recur across hundreds of authors, the catalog's boilerplate
        # (indexer/boilerplate.py), which a real catalog's sentences are not
        parts = rng.choices(source.sentences, k=rng.randint(2, 4))
        description = "; ".join(p.rstrip(".!? ") for p in parts) + "."
        yield {
            "id": f"syn-{i:07d}",
            "title": title,
            "description": description,
            **rng.choice(source.books),
        }


def write_catalog(path: Path, books: Iterator[dict[str, Any]]) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for book in books:
            f.write(json.dumps(book, ensure_ascii=False) + "\n")
            n += 1
    return n


def changed_catalog(source: Path, target: Path, fraction: float, *, seed: int = 1) -> int:
    """`source` with the description of `fraction` of its books edited (a sentence added):
    the next generation of an incremental re-index. The count changed."""
    rng = random.Random(seed)
    changed = 0
    with source.open(encoding="utf-8") as f, target.open("w", encoding="utf-8") as out:
        for line in f:
            if rng.random() < fraction:
                book = json.loads(line)
                edit = f"a new edition of {book['title']}, revised."  # no sentence of many authors'
                book["description"] = f"{book.get('description') or ''}; {edit}"
                out.write(json.dumps(book, ensure_ascii=False) + "\n")
                changed += 1
            else:
                out.write(line)
    return changed


class StandInEncoder:
    """Each text the unit sum of its hashed words' fixed random vectors (d = 384), recorded as
    the real model's: only for building large indexes fast."""

    name = DEFAULT_MODEL
    dim = 384
    BUCKETS = 1 << 16

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        self._table = rng.standard_normal((self.BUCKETS, self.dim), dtype=np.float32)

    def encode(self, texts: list[str]) -> torch.Tensor:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)  # (n, d)
        for i, text in enumerate(texts):
            words = _WORD.findall(text.lower()) or ["_"]
            rows = [zlib.crc32(w.encode()) % self.BUCKETS for w in words]
            out[i] = self._table[rows].sum(axis=0)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return torch.from_numpy(out)


def main() -> None:
    n, path = int(sys.argv[1]), Path(sys.argv[2])
    count = write_catalog(path, synthetic_books(Source.read(), n))
    sys.stdout.write(f"{count} books -> {path}\n")


if __name__ == "__main__":
    main()
