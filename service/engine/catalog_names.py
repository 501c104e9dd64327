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

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence, Sized
from dataclasses import dataclass

import numpy as np

from indexer.text_column import text_arrays, text_of_arrays
from models.text import normalize_text, without_combining
from service.engine.book_works import Works, principal_authors
from service.engine.row_lists import lists_arrays, lists_of, nested, part_of
from service.engine.spelling import deletions, one_edit
from service.engine.subject_headings import SubjectHeadings

# a title's closing marker: "(Discworld, #30)", "(The Lord of the Rings  #1)", "(Harry Potter
# #6-7)", "(Discworld  #14; Witches #4)": each ";"-part a series and the book's number in it
_MARKER = re.compile(r"\(([^()]*#[^()]*)\)\s*$")
_PART = re.compile(r"^(.*?)[,]?\s*#\s*[\d.]+(?:\s*-+\s*[\d.]+)?$")
_WORD = re.compile(r"[^\W_]+")
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
_ARTICLES = frozenset({"the", "a", "an"})  # "the french", "the ripper": a word, not a surname
_NOT_AUTHORS = frozenset({("anonymous",), ("unknown",), ("various",), ("various", "authors")})
FUZZY_MIN_LENGTH = 5  # shorter words are one edit away from too many others
MAX_NAME_TOKENS = 6


def fold(text: str) -> list[str]:
    """Words of `text` case-folded with accents, punctuation and invisible characters gone:
    "García Márquez" → ["garcia", "marquez"], "J.R.R." → ["j", "r", "r"]."""
    decomposed = unicodedata.normalize("NFKD", normalize_text(text))
    return _WORD.findall(without_combining(decomposed).casefold())


def series_keys(title: str) -> tuple[str, ...]:
    """The series a title names: ("discworld",) for "Mort (Discworld  #4)", ("discworld",
    "witches") for "Lords and Ladies (Discworld  #14; Witches #4)", () without a marker."""
    m = _MARKER.search(title)
    if not m:
        return ()
    keys = []
    for part in m.group(1).split(";"):
        named = _PART.match(part.strip())
        key = " ".join(fold(named.group(1))) if named else ""
        if key and key not in keys:
            keys.append(key)
    return tuple(keys)


def surname(tokens: Sequence[str]) -> tuple[str, ...]:
    """The last name with its particles: ("le", "guin") of "ursula k le guin"."""
    i = len(tokens) - 1
    while i > 0 and tokens[i - 1] in _PARTICLES:
        i -= 1
    return tuple(tokens[i:])


@dataclass(frozen=True)
class NamedAuthor:
    """An author a query names: the name as the catalog writes it, its books' rows, and
    whether the query asks for the author's books ("by") or for books about the author."""

    name: str
    rows: tuple[int, ...]
    intent: str  # "by" or "about"


class CatalogNames:
    """Authors, series and subject headings of one generation's books, row-aligned with the
    served index."""

    def __init__(
        self,
        titles: Sequence[str],
        authors: Sequence[Sequence[str]],
        descriptions: Sequence[str | None] | None = None,
        *,
        subjects: Sequence[Sequence[str]] | None = None,
    ):
        row_authors: list[tuple[tuple[str, ...], ...]] = []
        display: dict[tuple[str, ...], str] = {}
        # one tuple object per distinct name and per distinct tuple of a row's names: each
        # row's own folded copies cost ~340 bytes a book (32 MiB at 100,000 books)
        one_key: dict[tuple[str, ...], tuple[str, ...]] = {}
        row_keys: dict[tuple[tuple[str, ...], ...], tuple[tuple[str, ...], ...]] = {}
        for names in authors:
            keys: list[tuple[str, ...]] = []
            for name in names:
                key = tuple(fold(name))[:MAX_NAME_TOKENS]
                if key and key not in keys and key not in _NOT_AUTHORS:
                    key = one_key.setdefault(key, key)
                    keys.append(key)
                    display.setdefault(key, name)
            row_authors.append(row_keys.setdefault(tuple(keys), tuple(keys)))
        del one_key, row_keys
        self._index_authors(row_authors, display)
        self.works = Works(titles, self.principal, descriptions, fold)
        self._index_series(list(map(series_keys, titles)))
        self.subjects = SubjectHeadings(subjects, len(titles), fold)
        surnames = self._index_names()
        self._keep_surnames(surnames, self._words_of(surnames, titles, descriptions))
        self._index_tokens()

    # ---- as arrays (service/engine/served_form.py): what took reading every title,
    # description and name; the indexes over them are made again from these

    def arrays(self) -> dict[str, np.ndarray]:
        """The names as arrays: the authors (their folded words and the name as written), each
        row's authors, each row's work, each row's series, the subject headings, and the
        surnames that are words more than names (`_name_like`)."""
        authors = list(self._author_rows)
        number = {key: i for i, key in enumerate(authors)}
        series = list(self._series_rows)
        in_series = {key: i for i, key in enumerate(series)}
        return {
            **text_arrays("authors", [" ".join(key) for key in authors]),
            **text_arrays("display", [self._display[key] for key in authors]),
            **lists_arrays(
                "row_authors", [[number[k] for k in keys] for keys in self._row_authors]
            ),
            "works": np.frombuffer(self.works.work, np.int32),
            **text_arrays("series", series),
            **lists_arrays(
                "row_series", [[in_series[k] for k in keys] for keys in self._row_series]
            ),
            **nested("subjects", self.subjects.arrays()),
            **text_arrays("words", sorted(self._words)),
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> CatalogNames:
        """The names `arrays()` gave, nothing folded again."""
        names = cls.__new__(cls)
        authors = [tuple(key.split(" ")) for key in text_of_arrays(arrays, "authors")]
        display = dict(zip(authors, text_of_arrays(arrays, "display"), strict=True))
        row_keys: dict[tuple[int, ...], tuple[tuple[str, ...], ...]] = {}
        row_authors = [
            row_keys.get(ids) or row_keys.setdefault(ids, tuple(authors[i] for i in ids))
            for ids in lists_of(arrays, "row_authors", len(authors))
        ]
        names._index_authors(row_authors, display)
        names.works = Works.from_work(arrays["works"])
        series = list(text_of_arrays(arrays, "series"))
        one: dict[tuple[int, ...], tuple[str, ...]] = {}
        names._index_series(
            [
                one.get(ids) or one.setdefault(ids, tuple(series[i] for i in ids))
                for ids in lists_of(arrays, "row_series", len(series))
            ]
        )
        names.subjects = SubjectHeadings.from_arrays(part_of(arrays, "subjects"))
        names._keep_surnames(names._index_names(), frozenset(text_of_arrays(arrays, "words")))
        names._index_tokens()
        if len(row_authors) != len(names.works.work) or len(row_authors) != len(names._row_series):
            raise ValueError("catalog names whose columns are not one length")
        return names

    def _index_authors(
        self,
        row_authors: list[tuple[tuple[str, ...], ...]],
        display: dict[tuple[str, ...], str],
    ) -> None:
        """Each author's rows and principal rows, from each row's authors."""
        self._row_authors = row_authors
        self._display = display
        self._author_rows: dict[tuple[str, ...], list[int]] = {}
        for row, keys in enumerate(row_authors):
            for key in keys:
                self._author_rows.setdefault(key, []).append(row)
        self.principal = principal_authors(self._row_authors, self._author_rows)
        self._principal_rows: dict[tuple[str, ...], list[int]] = {}
        for row, principal in enumerate(self.principal):
            for key in principal:
                self._principal_rows.setdefault(key, []).append(row)

    def _index_series(self, row_series: list[tuple[str, ...]]) -> None:
        one_series: dict[tuple[str, ...], tuple[str, ...]] = {}  # one object each, as above
        self._row_series = [one_series.setdefault(k, k) for k in row_series]
        del one_series
        self._series_rows: dict[str, list[int]] = {}
        for row, series in enumerate(self._row_series):
            for one in series:
                self._series_rows.setdefault(one, []).append(row)

    def _index_names(self) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
        """What a query's words can name (`_phrases`, `_endings`), and each surname's authors
        (returned: `_keep_surnames` keeps those a query may name alone)."""
        # a full name, the name without its initials, any ending of two or more words of that
        # ("garcia marquez", "le guin"), and a surname
        self._phrases: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
        # a name's last word by the words before it: "jane" → {"austen", …}
        self._endings: dict[tuple[str, ...], set[str]] = {}
        surnames: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
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
        self, surnames: dict[tuple[str, ...], set[tuple[str, ...]]], words: frozenset[str]
    ) -> None:
        """The surnames a query may name alone: all but the one-word surnames that are `words`
        of the catalog more than names (`_words_of`)."""
        self._words = words
        self._surnames = {s: k for s, k in surnames.items() if not (len(s) == 1 and s[0] in words)}

    def _words_of(
        self,
        surnames: dict[tuple[str, ...], set[tuple[str, ...]]],
        titles: Sequence[str],
        descriptions: Sequence[str | None] | None,
    ) -> frozenset[str]:
        """The one-word surnames that are words more than names: those the catalog's titles and
        descriptions use in as many books by others as the name's own books number or more.
        "London" is in many descriptions and Jack London wrote few of the books: a word."""
        single = {s[0] for s in surnames if len(s) == 1}
        used: Counter[str] = Counter()
        for row, title in enumerate(titles):
            text = title + " " + ((descriptions[row] or "") if descriptions else "")
            mine = {t for key in self._row_authors[row] for t in key}
            used.update({t for t in fold(text) if t in single and t not in mine})
        return frozenset(
            s[0]
            for s, keys in surnames.items()
            if len(s) == 1
            and used[s[0]] >= len({r for key in keys for r in self._author_rows[key]})
        )

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
                rows = {r for key in keys for r in self._author_rows[key]}
                name = self._display[max(sorted(keys), key=lambda k: len(self._author_rows[k]))]
                if n == len(words) and holding is not None:  # the name alone
                    others = len(holding(" ".join(words))) - len(rows)
                    if others > 2 * len(rows):  # clearly more a subject than an author
                        return None
                start, stop = i, i + n
                # "margaret weis and tracy hickman": a second name joined by "and" (or "&",
                # which folds away) is evidence for both
                if other := self._joined(words, start, stop, joined="&" in query):
                    (start, stop), more = other
                    rows |= {r for key in more for r in self._author_rows[key]}
                    second = self._display[
                        max(sorted(more), key=lambda k: len(self._author_rows[k]))
                    ]
                    name = f"{second} and {name}" if start < i else f"{name} and {second}"
                intent = "about" if _asks_about(words[:start], words[stop:]) else "by"
                return NamedAuthor(name, tuple(sorted(rows)), intent)
        return None

    def _named(self, words: Sequence[str], i: int, n: int) -> set[tuple[str, ...]] | None:
        """The author keys words[i : i + n] names, if any."""
        form = tuple(words[i : i + n])
        keys = self._phrases.get(form) or self._misspelt(form) if n >= 2 else None
        if not keys and not (i and words[i - 1] in _ARTICLES):  # "the ripper"
            keys = self._surnames.get(form)
        return keys

    def _joined(
        self, words: Sequence[str], i: int, j: int, *, joined: bool
    ) -> tuple[tuple[int, int], set[tuple[str, ...]]] | None:
        """A second name right after words[i:j] and "and", or right before them (`joined`:
        the query had a "&", which folds away, so the names stand side by side): the span of
        both, and the second's keys."""
        gap = 0 if joined else 1
        for n in range(min(MAX_NAME_TOKENS, len(words)), 0, -1):
            after = j + gap + n <= len(words) and (joined or words[j : j + 1] == ["and"])
            if after and (keys := self._named(words, j + gap, n)):
                return (i, j + gap + n), keys
            before = i >= n + gap and (joined or words[i - 1 : i] == ["and"])
            if before and (keys := self._named(words, i - gap - n, n)):
                return (i - gap - n, j), keys
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
