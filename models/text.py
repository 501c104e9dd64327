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

import unicodedata

_MARKS = frozenset({"Mn", "Mc", "Me"})


def normalize_text(text: str) -> str:
    """`text` as searched: NFKC, without format characters or combining marks that follow no
    letter or digit."""
    if text.isascii():  # the common case: nothing to remove or fold
        return text
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


def normalize_id(book_id: str) -> str:
    """A book id as stored and looked up: NFC, without format characters."""
    return unicodedata.normalize("NFC", _without_format(book_id))


def _without_format(text: str) -> str:
    if text.isascii():  # the common case: no format characters, nothing to fold
        return text
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
