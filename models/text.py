"""The one normalisation of text that is compared: queries, BM25 terms, and book ids.

What a reader cannot see must not decide a match. Format characters (Unicode category Cf: the
zero-width space and joiners, the byte-order mark, the soft hyphen) are removed, so `Tol\u200bkien`
is Tolkien; NFKC folds compatibility forms (ligatures, full-width letters) into the letters they
show. A combining mark with no letter before it (a query of U+0301 alone) is removed too, so a
query of invisible characters is blank, and is refused as blank. Ids are NFC only, not NFKC:
`ﬁ` and `fi` may be different ids of a real catalog, `café` in its composed and decomposed
spellings never are.
"""

from __future__ import annotations

import functools
import re
import unicodedata

_MARKS = frozenset({"Mn", "Mc", "Me"})
_WORD = re.compile(r"[^\W_]+")
# Where a character can be a mark or a format character: planes 0-3 and 14 (4-13 have never
# been assigned, 15 and 16 are private use)
_PLANES = (range(0, 0x40000), range(0xE0000, 0xF0000))
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
# Letters and symbols that render as blank space though no Unicode property says so: the Hangul
# fillers (which NFKC maps to U+1160) and the blank braille pattern
BLANK_RENDERING = "\u115f\u1160\u3164\uffa0\u2800"
_WITHOUT_BLANK = str.maketrans("", "", BLANK_RENDERING)


@functools.cache
def _marks_or_format() -> re.Pattern[str]:
    """One character class of every combining mark and format character: a text without one
    is NFKC alone, with no per-character loop. Built at the first text that is not ASCII, once
    a process (0.1 s: the category of each code point that can hold one)."""
    ranges: list[tuple[int, int]] = []
    for plane in _PLANES:
        for cp in plane:
            category = unicodedata.category(chr(cp))
            if category in _MARKS or category == "Cf":
                if ranges and ranges[-1][1] == cp - 1:
                    ranges[-1] = (ranges[-1][0], cp)
                else:
                    ranges.append((cp, cp))
    return re.compile("[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges) + "]")


def normalize_text(text: str) -> str:
    """`text` as searched: NFKC, without format characters or combining marks that follow no
    letter or digit."""
    if text.isascii():  # the common case: nothing to remove or fold
        return text
    marks_or_format = _marks_or_format()
    # the class searched in the text's non-ASCII characters only: a search of the class in a
    # whole description took 52 µs (its thousands of ranges), of the few it holds 4.5
    if not marks_or_format.search("".join(_NON_ASCII.findall(text))):
        # nothing to remove, unless NFKC's folding leaves a mark: a catalog's text almost
        # always (the loop below took half of building the BM25 index of 10,000 books)
        folded = unicodedata.normalize("NFKC", text)
        if folded.isascii() or not marks_or_format.search("".join(_NON_ASCII.findall(folded))):
            return folded
    text = unicodedata.normalize("NFKC", _without_format(text))
    out: list[str] = []
    base = False  # whether the last kept character can carry a mark
    for ch in text:
        category = unicodedata.category(ch)
        if category in _MARKS:
            if base:
                out.append(ch)
            continue
        out.append(ch)
        base = category[0] in "LN"
    return unicodedata.normalize("NFKC", "".join(out))


def is_blank(text: str) -> bool:
    """Whether `text` shows nothing: whitespace and blank-rendering characters only."""
    return not text.translate(_WITHOUT_BLANK).strip()


def without_combining(text: str) -> str:
    """`text` without its characters of a nonzero canonical combining class (the accents an
    NFKD decomposition splits off): the per-character test only in its runs of non-ASCII
    characters, which are few and short in a catalog's text."""
    if text.isascii():
        return text
    return _NON_ASCII.sub(_bare_run, text)


def _bare_run(run: re.Match[str]) -> str:
    return "".join(ch for ch in run.group() if not unicodedata.combining(ch))


def fold(text: str) -> list[str]:
    """Words of `text` case-folded with accents, punctuation and invisible characters gone, as
    names are compared: "García Márquez" → ["garcia", "marquez"], "J.R.R." → ["j", "r", "r"]."""
    decomposed = unicodedata.normalize("NFKD", normalize_text(text))
    return _WORD.findall(without_combining(decomposed).casefold())


def normalize_id(book_id: str) -> str:
    """A book id as stored and looked up: NFC, without format characters."""
    return unicodedata.normalize("NFC", _without_format(book_id))


def _without_format(text: str) -> str:
    if text.isascii():  # the common case: no format characters, nothing to fold
        return text
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf")


# Scripts written without spaces between words: Han (with its extensions and compatibility
# ideographs), Hiragana, Katakana (and its half-width forms, which NFKC folds), Hangul syllables
_CJK_RUN = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
    "\U00020000-\U0002ebef\U00030000-\U0003134f]{2,}"
)


def cjk_bigrams(text: str) -> str:
    """`text` with each run of CJK characters written as its overlapping bigrams, spaced:
    "三体问题" → " 三体 体问 问题 ". A tokenizer that splits at spaces and punctuation made a
    whole sentence of Chinese one term, which no query matches; bigrams are what Lucene's
    CJKAnalyzer indexes, and need no dictionary. A single character between others stays as
    it is (the tokenizer drops one-character terms, as it does "a")."""
    if text.isascii():
        return text
    return _CJK_RUN.sub(_bigrams, text)


def _bigrams(run: re.Match[str]) -> str:
    s = run.group()
    return " " + " ".join(s[i : i + 2] for i in range(len(s) - 1)) + " "
