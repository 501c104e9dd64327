"""The catalog's names: who wrote each book, which series it belongs to and the subject headings
(genres, tags) it is filed under, as whole names.

A bag of words blurs names: "William" is a token of *Neuromancer*'s author and of *The Rise and
Fall of the Third Reich*'s, and "Philosopher" is a word of a Harry Potter title and of Plato's
readers. Here an author is the whole name (its tokens folded: case, accents, punctuation, so
"J.R.R. Tolkien" and "J. R. R. Tolkien" are one), and a series is the key of the title's
"(Series, #n)" marker. Two uses:

- a book's **mates**: the other books by one of its authors, the other books of its series,
  the other books under one of its subject headings when the catalog has them (the author,
  series and subjects heads of similar books and recommendations);
- a typed query that **names an author** ("stephen king", "books by toni morrison", "le guin",
  "tolkein"): `recognise` finds it against the catalog's own author index. A surname alone
  counts only where the catalog uses the word more as that name than as a word ("Guin",
  "Vonnegut", but not "London" or "French"); a misspelt word that is no word of the catalog is
  read as the author token one edit away, if only one is. "about X", "a biography of X" and
  the like name X as the subject: the intent is then "about", not "by".
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass

import numpy as np

from indexer.text_column import text_arrays, text_of_arrays
from models.text import fold
from service.engine.book_works import Works, principal_authors
from service.engine.lexical import LikeThisIndex, like_this_text
from service.engine.name_rows import (
    ARTICLES,
    MAX_NAME_TOKENS,
    AuthorKey,
    NameRows,
    name_key,
)
from service.engine.row_lists import rows_by_key
from service.engine.spelling import deletions, one_edit
from service.engine.subject_headings import SubjectHeadings

# the particles that belong to a surname: "Ursula K. Le Guin" → "le guin"
_PARTICLES = frozenset(
    [
        "le",
        "la",
        "de",
        "du",
        "da",
        "di",
        "del",
        "della",
        "van",
        "von",
        "der",
        "den",
        "ten",
        "ter",
        "st",
    ]
)
# words that make the named author the subject of the query, not its writer: anywhere in it,
# "on" right before the name ("essays on Tolkien"), and "of" after a word of a life ("the life
# of", "a portrait of"; "the novels of Jane Austen" stays "by")
_ABOUT = frozenset(
    ["about", "biography", "biographies", "criticism", "critique", "companion", "guide"]
)
_OF_A_LIFE = frozenset(["life", "lives", "portrait", "story", "death", "study", "studies", "times"])
_JOINING = frozenset({"and", "or"})  # "weis and hickman", "king or koontz": both named
FUZZY_MIN_LENGTH = 5  # shorter words are one edit away from too many others
# the rows whose titles and descriptions hold each of some folded words (None: a word the
# index does not keep, a stop word): service/engine/lexical.py LikeThisIndex.word_rows
WordRows = Callable[[Collection[str], Callable[[str], list[str]]], Mapping[str, np.ndarray | None]]


def surname(tokens: Sequence[str]) -> tuple[str, ...]:
    """The last name with its particles: ("le", "guin") of "ursula k le guin"."""
    i = len(tokens) - 1
    while i > 0 and tokens[i - 1] in _PARTICLES:
        i -= 1
    return tuple(tokens[i:])


# A book of more principal authors than this is a collection, no contributor's own but its
# first credited's (an editor's): anthologies that share their contributors make each of them
# principal ("The Dark Descent": Hartwell, Barker, Jackson, King, Oates)
MAX_OWN_PRINCIPALS = 3


@dataclass(frozen=True)
class NamedAuthor:
    """An author a query names: the name as the catalog writes it, its books' rows, and
    whether the query asks for the author's books ("by") or for books about the author."""

    name: str
    rows: tuple[int, ...]
    intent: str  # "by" or "about"
    # the books the author head attends over, one part per name the query joins ("king or
    # koontz": two), each that name's own books, else every book crediting it; the parts share
    # the head equally (service/engine/scored_heads.py `restricted_head`). A name's own books
    # are the rows of which it is the first credited or one of at most MAX_OWN_PRINCIPALS
    # principal authors (service/engine/book_works.py; an editor's anthologies too): an author
    # query ranks them before anthologies that only include the author
    parts: tuple[tuple[int, ...], ...] = ()

    def attended(self) -> list[int]:
        """Every book of the parts, ascending."""
        return sorted({r for part in self.parts for r in part})


class CatalogNames:
    """Authors, series and subject headings of one generation's books, row-aligned with the
    served index: the indexes over each row's names (`NameRows`), made again whole from them at
    each load and swap (O(N) passes over lists and arrays, nothing folded)."""

    def __init__(
        self,
        rows: NameRows,
        word_rows: WordRows,
        written: Sequence[Sequence[str]],
        *,
        made: tuple[np.ndarray, frozenset[str]] | None = None,
    ):
        """`word_rows`: where the catalog's titles and descriptions use a word (the served
        index's more-like-this index), for the surnames that are words (`_words_of`);
        `written`: each row's authors as the catalog writes them (`written`); `made`: the
        works and the surnames that are words as `arrays()` kept them, not made again."""
        self.rows = rows
        self._written_by_row = written
        self._index_authors(rows.authors)
        self.works = Works.of_keys(rows.work_keys) if made is None else Works.from_work(made[0])
        self._index_series(rows.series)
        self.subjects = SubjectHeadings(rows.subjects)
        surnames = self._index_names()
        words = self._words_of(surnames, word_rows) if made is None else made[1]
        self._keep_surnames(surnames, words)
        self._index_tokens()

    @classmethod
    def of(
        cls,
        titles: Sequence[str],
        authors: Sequence[Sequence[str]],
        descriptions: Sequence[str | None] | None = None,
        *,
        subjects: Sequence[Sequence[str]] | None = None,
        series: Sequence[Sequence[str]] | None = None,
    ) -> CatalogNames:
        """The names of books given column by column, their words found by a more-like-this
        index of their own (the served index passes its own)."""
        texts = [
            like_this_text(title, descriptions[i] if descriptions else None)
            for i, title in enumerate(titles)
        ]
        rows = NameRows.of(titles, authors, descriptions, subjects=subjects, series=series)
        return cls(rows, LikeThisIndex(texts).word_rows, authors)

    # ---- as arrays (service/engine/served_form.py): each row's names, the works and the
    # surnames that are words; the other indexes are made again from these

    def arrays(self) -> dict[str, np.ndarray]:
        """The names as arrays: each row's (`NameRows.arrays`), each row's work id, and the
        surnames that are words (what needs the whole catalog and is not a list of rows)."""
        return {
            **self.rows.arrays(),
            "works": np.frombuffer(self.works.work, np.int32),
            **text_arrays("words", sorted(self._words)),
        }

    @classmethod
    def from_arrays(
        cls, arrays: Mapping[str, np.ndarray], word_rows: WordRows, written: Sequence[Sequence[str]]
    ) -> CatalogNames:
        """The names `arrays()` gave, nothing folded again. ValueError where the work ids are
        not rows."""
        rows = NameRows.from_arrays(arrays)
        if len(arrays["works"]) != len(rows):
            raise ValueError("works of another number of books than the names'")
        made = (arrays["works"], frozenset(text_of_arrays(arrays, "words")))
        return cls(rows, word_rows, written, made=made)

    def _index_authors(self, row_authors: list[tuple[AuthorKey, ...]]) -> None:
        """Each author's rows and principal rows, from each row's authors."""
        self._row_authors = row_authors
        self._author_rows = rows_by_key(row_authors)
        self.principal = principal_authors(self._row_authors, self._author_rows)
        self._principal_rows = rows_by_key(self.principal)

    def _index_series(self, row_series: list[tuple[str, ...]]) -> None:
        self._row_series = row_series
        self._series_rows: dict[str, list[int]] = {}
        for row, series in enumerate(self._row_series):
            for one in series:
                self._series_rows.setdefault(one, []).append(row)

    def _index_names(self) -> dict[tuple[str, ...], set[AuthorKey]]:
        """What a query's words can name (`_phrases`, `_endings`), and each surname's authors
        (returned: `_keep_surnames` keeps those a query may name alone)."""
        # a full name, the name without its initials, any ending of two or more words of that
        # ("garcia marquez", "le guin"), and a surname
        self._phrases: dict[tuple[str, ...], set[AuthorKey]] = {}
        # a name's last word by the words before it: "jane" → {"austen", …}
        self._endings: dict[tuple[str, ...], set[str]] = {}
        surnames: dict[tuple[str, ...], set[AuthorKey]] = {}
        for key in self._author_rows:
            core = tuple(t for t in key if len(t) > 1) or key
            for form in {key, core, *(core[i:] for i in range(len(core) - 1))}:
                if len(form) >= 2:
                    self._phrases.setdefault(form, set()).add(key)
                    self._endings.setdefault(form[:-1], set()).add(form[-1])
            surnames.setdefault(surname(core), set()).add(key)
        return surnames

    def _index_tokens(self) -> None:
        """The author words a misspelt query word may be (`_corrected`)."""
        self._tokens = {t for key in self._author_rows for t in key if len(t) >= FUZZY_MIN_LENGTH}
        deleted: dict[str, set[str]] = {}
        for t in self._tokens:
            for d in deletions(t):
                deleted.setdefault(d, set()).add(t)
        # tuples, not sets (48 bytes for one word, not 216): only ever iterated
        self._deletions = {d: tuple(sorted(ts)) for d, ts in deleted.items()}
        del deleted

    def _keep_surnames(
        self, surnames: dict[tuple[str, ...], set[AuthorKey]], words: frozenset[str]
    ) -> None:
        """The surnames a query may name alone: all but the one-word surnames that are `words`
        of the catalog more than names (`_words_of`)."""
        self._words = words
        self._surnames = {s: k for s, k in surnames.items() if not (len(s) == 1 and s[0] in words)}

    def _words_of(
        self, surnames: dict[tuple[str, ...], set[AuthorKey]], word_rows: WordRows
    ) -> frozenset[str]:
        """The one-word surnames that are words more than names: those the catalog's titles and
        descriptions use in as many books by others as the name's own books number or more
        ("London" is in many descriptions and Jack London wrote few of the books: a word), and
        the stop words ("Will")."""
        single = {s[0]: keys for s, keys in surnames.items() if len(s) == 1}
        used = word_rows(single.keys(), fold)
        # the authors whose names hold each of those words: a book by one of them that uses
        # the word uses its author's name, not the word
        bearers: dict[str, list[AuthorKey]] = {}
        for key in self._author_rows:
            for t in set(key):
                if t in single:
                    bearers.setdefault(t, []).append(key)
        words = set()
        for word, keys in single.items():
            if word not in used:
                continue
            if (rows := used[word]) is None:  # a stop word
                words.add(word)
                continue
            own = len({r for key in keys for r in self._author_rows[key]})
            if len(rows) < own:  # too few books use it, whoever wrote them
                continue
            mine = np.fromiter(
                {r for key in bearers[word] for r in self._author_rows[key]}, np.int64
            )
            if len(rows) - int(np.isin(rows, mine).sum()) >= own:
                words.add(word)
        return frozenset(words)

    # ---- the filters by name (indexer/filters.py `Filters.subject`, `Filters.series`)

    def rows_named(self, field: str, value: str) -> np.ndarray:
        """(R,) int64 sorted: the rows filed under the subject heading `value` ("subject"), in
        the series `value` ("series") or of the publisher `value` ("publisher"), whole names
        folded as the catalog's are. A heading or a publisher is found by a pass over the rows
        (the filter columns cache the masks it makes)."""
        key = " ".join(fold(value))
        if field == "series":
            return np.asarray(self._series_rows.get(key, []), np.int64)
        if field in ("subject", "publisher"):
            column = self.rows.subjects if field == "subject" else self.rows.publishers
            return np.fromiter((r for r, names in enumerate(column) if key in names), np.int64)
        raise ValueError(f"no names of {field!r}")

    # ---- a book's mates

    def author_mates(self, row: int) -> list[int]:
        """The other books of which one of the book's principal authors is a principal author
        (whole names: service/engine/book_works.py), in catalog order."""
        mates = {r for key in self.principal[row] for r in self._principal_rows[key]}
        mates.discard(row)
        return sorted(mates)

    def series_mates(self, row: int) -> list[int]:
        """The other books of the book's series (any of them), in catalog order."""
        mates = {r for key in self._row_series[row] for r in self._series_rows[key]}
        mates.discard(row)
        return sorted(mates)

    def subject_mates(self, row: int) -> dict[int, float]:
        """The books sharing the book's subject headings (service/engine/subject_headings.py)."""
        return self.subjects.mates(row)

    # ---- a typed query

    def recognise(
        self,
        query: str,
        known: Callable[[str], bool],
        holding: Callable[[str], Sized] | None = None,
    ) -> NamedAuthor | None:
        """The author `query` names, if any: the longest run of its words that is a name of
        the index (after fixing a misspelt word: one that `known` says is no word of the
        catalog and that is one edit from exactly one author word). A query that is a name and
        nothing else names no author where `holding` (the books whose text holds every word of
        a text) says over twice as many books by others hold the name as the author wrote:
        "abraham lincoln" over a catalog of one book by Lincoln and four about him is a
        subject; "jane austen", 11 books by her and 12 that name her, is her."""
        words = [self._corrected(w, known) for w in fold(query)]
        for n in range(min(MAX_NAME_TOKENS, len(words)), 0, -1):
            for i in range(len(words) - n + 1):
                if not (keys := self._named(words, i, n)):
                    continue
                rows = self._rows_of(keys)
                named, parts = set(keys), [keys]
                name = self.written(max(sorted(keys), key=lambda k: len(self._author_rows[k])))
                if n == len(words) and holding is not None:  # the name alone
                    others = len(holding(" ".join(words))) - len(rows)
                    if others > 2 * len(rows):  # clearly more a subject than an author
                        return None
                start, stop = i, i + n
                # "margaret weis and tracy hickman", "king or koontz": a second name joined by
                # "and" (or "&", which folds away) or "or" is evidence for both
                if other := self._joined(words, start, stop, joined="&" in query):
                    (start, stop), more, word = other
                    rows |= self._rows_of(more)
                    named |= set(more)
                    parts.append(more)
                    second = self.written(
                        max(sorted(more), key=lambda k: len(self._author_rows[k]))
                    )
                    name = f"{second} {word} {name}" if start < i else f"{name} {word} {second}"
                intent = "about" if _asks_about(words[:start], words[stop:]) else "by"
                own = [self._own_rows(p, named) or self._rows_of(p) for p in parts]
                return NamedAuthor(
                    name, tuple(sorted(rows)), intent, tuple(tuple(sorted(o)) for o in own)
                )
        return None

    def _rows_of(self, keys: Iterable[AuthorKey]) -> set[int]:
        """The rows crediting any of the author keys."""
        return {r for key in keys for r in self._author_rows[key]}

    def _own_rows(self, keys: Iterable[AuthorKey], named: set[AuthorKey]) -> set[int]:
        """The rows of which one of `keys` is a principal author, among at most
        MAX_OWN_PRINCIPALS or after one of the query's `named` authors."""
        return {
            r
            for key in keys
            for r in self._principal_rows.get(key, ())
            if len(self.principal[r]) <= MAX_OWN_PRINCIPALS or self.principal[r][0] in named
        }

    def written(self, key: AuthorKey) -> str:
        """The author's name as the first book crediting it writes it (folded again for the
        few names a query names: a swap keeps no table of written names to move)."""
        first = self._author_rows[key][0]
        return next(n for n in self._written_by_row[first] if name_key(n) == key)

    def _named(self, words: Sequence[str], i: int, n: int) -> set[tuple[str, ...]] | None:
        """The author keys words[i : i + n] names, if any."""
        form = tuple(words[i : i + n])
        keys = self._phrases.get(form) or self._misspelt(form) if n >= 2 else None
        if not keys and not (i and words[i - 1] in ARTICLES):  # "the ripper": a word, not a surname
            keys = self._surnames.get(form)
        return keys

    def _joined(
        self, words: Sequence[str], i: int, j: int, *, joined: bool
    ) -> tuple[tuple[int, int], set[tuple[str, ...]], str] | None:
        """A second name right after words[i:j] and "and" or "or", or right before them
        (`joined`: the query had a "&", which folds away, so the names stand side by side): the
        span of both, the second's keys, and the word that joins them."""
        gap = 0 if joined else 1
        next_word = "and" if joined else (words[j] if j < len(words) else "")
        last_word = "and" if joined else (words[i - 1] if i else "")
        for n in range(min(MAX_NAME_TOKENS, len(words)), 0, -1):
            after = j + gap + n <= len(words) and next_word in _JOINING
            if after and (keys := self._named(words, j + gap, n)):
                return (i, j + gap + n), keys, next_word
            before = i >= n + gap and last_word in _JOINING
            if before and (keys := self._named(words, i - gap - n, n)):
                return (i - gap - n, j), keys, last_word
        return None

    def _misspelt(self, form: tuple[str, ...]) -> set[tuple[str, ...]] | None:
        """The names `form` is, but for its last word one edit off ("jane austin": "austin" is
        a word of the catalog, so it is not corrected alone), when exactly one name's is."""
        last = form[-1]
        if len(last) < FUZZY_MIN_LENGTH:  # "william tell" is no William Bell
            return None
        near = [e for e in self._endings.get(form[:-1], ()) if one_edit(last, e)]
        return self._phrases[(*form[:-1], near[0])] if len(near) == 1 else None

    def _corrected(self, word: str, known: Callable[[str], bool]) -> str:
        if len(word) < FUZZY_MIN_LENGTH or word in self._tokens or known(word):
            return word
        near = {t for d in (word, *deletions(word)) for t in self._deletions.get(d, ())}
        near |= deletions(word) & self._tokens
        near = {t for t in near if one_edit(word, t)}
        return near.pop() if len(near) == 1 else word


def _asks_about(before: Sequence[str], after: Sequence[str]) -> bool:
    """Whether the words around a name make its bearer the query's subject."""
    if _ABOUT.intersection(before) or _ABOUT.intersection(after):
        return True
    if before and before[-1] == "on":
        return True
    return len(before) >= 2 and before[-1] == "of" and before[-2] in _OF_A_LIFE
