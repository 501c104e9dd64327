"""Boilerplate: the sentences a catalog repeats across the descriptions of many authors'
books (publisher and marketing text: "Reprint.", "Reader's Guide available.", "100,000 first
printing.", a publisher's standard blurb), found from the catalog itself, with no list written
by hand. The lexical heads and the explanations leave them out (issue 51): shared boilerplate
is no evidence that two books are alike.

A description is cut into sentences after `.`, `!` or `?` and their closing quotes where a
space, a capital or the end follows, and at line breaks. A sentence's key is its words,
lower-cased, one space apart, every number one `#` ("50,000 first printing." and "100,000 first
printing." are one sentence). A sentence is boilerplate when the descriptions of at least
`MIN_AUTHORS` different first authors hold it: the editions of one work, or one author's
books, repeat their own text, and that text is what they are about. A key of fewer than
`MIN_LETTERS` letters never is ("Dr.", the "U." of "U.S."): a split, not a sentence.

Finding it is one pass over the descriptions that keeps no sentence's text: each sentence's
distinct authors counted by hashes (numpy, 24 bytes a sentence), then the text of each
sentence that passed read again from the first row holding it. Python's string hash is salted
per process, so the hashes never leave it: a served form keeps the sentences' keys.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

MIN_AUTHORS = 3  # different first authors whose descriptions share a sentence
MIN_LETTERS = 4  # a key with fewer letters is an abbreviation's split, never boilerplate
SHOWN = 10  # sentences a report names, the most widespread first

# a sentence's end: its stops and closing quotes or brackets, where a space, a capital, an
# opening quote or the text's end follows ("Suicides.Reader's Guide" is two sentences, "1.5"
# and "U.S." one); or line breaks. Never inside a number, so a text's sentences are the same
# before and after its numbers become `#`.
_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|[A-Z\"“‘(]|$)|\n+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def sentence_spans(text: str) -> Iterator[tuple[int, int]]:
    """[start, end) of each sentence of `text`, its stop included."""
    start = 0
    for m in _END.finditer(text):
        if m.end() > start:
            yield start, m.end()
        start = m.end()
    if start < len(text):
        yield start, len(text)


def sentence_key(sentence: str) -> str | None:
    """The sentence as compared: lower case, numbers as `#`, its words one space apart, without
    its stop; None for one too short to count."""
    return _key(_END.sub("", _NUMBER.sub("#", sentence)))


def _key(sentence: str) -> str | None:
    key = " ".join(sentence.lower().split())
    return key if len(key) - key.count(" ") - key.count("#") >= MIN_LETTERS else None


def text_keys(text: str) -> list[str]:
    """The keys of a text's sentences that can count, in order: one substitution of the
    numbers and one split for the whole text, then string methods (a regex a sentence took
    three times as long)."""
    return [k for s in _END.split(_NUMBER.sub("#", text)) if (k := _key(s)) is not None]


def author_key(authors: Sequence[str], row: int) -> str:
    """Whose text a description is: its first author, or the book itself when it has none."""
    return " ".join(authors[0].lower().split()) if authors else f"\0{row}"


@dataclass(frozen=True)
class Boilerplate:
    """The catalog's boilerplate sentences (their keys) and, for a report, how many authors'
    descriptions hold each."""

    keys: frozenset[str] = frozenset()
    authors: dict[str, int] = field(default_factory=dict, compare=False)

    @classmethod
    def found(
        cls,
        descriptions: Sequence[str | None],
        authors: Sequence[Sequence[str]],
        *,
        min_authors: int = MIN_AUTHORS,
    ) -> Boilerplate:
        """The sentences of `descriptions` (row-aligned with the books' `authors`) that at
        least `min_authors` first authors' descriptions hold."""
        sentences, by, rows = array("q"), array("q"), array("q")  # one entry a sentence
        for row, (text, names) in enumerate(zip(descriptions, authors, strict=True)):
            if text:
                keys = set(text_keys(text))
                sentences.extend(hash(k) for k in keys)
                by.extend([hash(author_key(names, row))] * len(keys))
                rows.extend([row] * len(keys))
        if not sentences:
            return cls()
        h = np.frombuffer(sentences, np.int64)
        pairs = np.unique(np.stack([h, np.frombuffer(by, np.int64)], 1), axis=0)
        hashes, counts = np.unique(pairs[:, 0], return_counts=True)
        common = counts >= min_authors
        if not common.any():
            return cls()
        # each common sentence's text from the first row holding it: a few rows read again,
        # not every row holding boilerplate (nearly all of a catalog's, at worst); `hashes` is
        # every distinct sentence, sorted, as np.unique(h) would give it
        first = np.unique(h, return_index=True)[1][common]
        count = dict(zip(hashes[common].tolist(), counts[common].tolist(), strict=True))
        held: dict[str, int] = {}
        for row in np.unique(np.frombuffer(rows, np.int64)[first]).tolist():
            for key in text_keys(descriptions[row] or ""):
                n = count.get(hash(key))
                if n is not None:
                    held[key] = n
        return cls(frozenset(held), held)

    @classmethod
    def of(cls, keys: Iterable[str]) -> Boilerplate:
        """The boilerplate of these sentence keys (a served form's)."""
        return cls(frozenset(keys))

    def __len__(self) -> int:
        return len(self.keys)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """[start, end) of each boilerplate sentence of `text`."""
        if not self.keys:
            return []
        return [(a, b) for a, b in sentence_spans(text) if sentence_key(text[a:b]) in self.keys]

    def strip(self, text: str | None) -> str | None:
        """`text` without its boilerplate sentences (None kept; a text of nothing else is
        empty)."""
        if not text or not self.keys or self.keys.isdisjoint(text_keys(text)):
            return text
        kept, at = [], 0
        for a, b in self.spans(text):
            kept.append(text[at:a])
            at = b
        kept.append(text[at:])
        return " ".join(" ".join(kept).split())

    def widest(self, n: int = SHOWN) -> list[tuple[str, int]]:
        """The `n` sentences the most authors' descriptions hold, with how many."""
        return sorted(self.authors.items(), key=lambda kv: (-kv[1], kv[0]))[:n]

    def summary(self, n: int = SHOWN) -> str:
        """One line for `attend index` and `attend stats`: how many sentences, the `n` widest
        with their authors."""
        if not self.keys:
            return f"no sentence recurs across {MIN_AUTHORS} authors' descriptions"
        widest = "; ".join(f"{key!r} ({count})" for key, count in self.widest(n))
        return (
            f"{len(self)} sentences recur across {MIN_AUTHORS} or more authors' descriptions, "
            f"left out of the lexical heads: {widest}"
        )
