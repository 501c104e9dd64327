"""The relevance suite's author-intent queries, and the traps for author recognition (issue 22;
benchmarks/relevance.py runs them).

`authors`: a reader names an author in their own words, in one of these forms:

- `name`: the full name, lower case ("tom clancy");
- `by`: "books by X";  `novels`: "X novels";  `genre`: the name and a genre word
  ("agatha christie mysteries");
- `misspelt`: a misspelling or a variant transliteration ("tolkein", "dostoevsky");
- `surname`: the surname alone ("heinlein");  `initial`: first name and surname without the
  middle initial ("philip dick" for Philip K. Dick);
- `about`: books about X ("books about tolkien", "a biography of hemingway").

A query of every form but `about` is labelled by the catalog's author field: relevant are the
books one of whose authors is exactly (casefolded) one of `names` (never a substring: "Anne
Rice" must not take Luanne Rice's books, "J.R.R. Tolkien" not Christopher Tolkien's). An
`about` query's relevant books are listed by id: the candidates were the books whose title or
description names X and that X did not write, read one by one; kept are the books about X's
life or work (biographies, criticism, companions, study guides, a novel with X as its
heroine), dropped those that only mention X (a blurb's comparison, an anthology's list of
names, the films of a book, a parody). The authors were chosen from the catalog's author
counts (most with 5 or more books, a few with 1 or 2), and the queries written before any
ranking was looked at.

`traps`: queries with a name-like word that are subjects, not authors ("jack the ripper",
"king arthur legends"), labelled by regexes over the title and description in the way of
benchmarks/intent_queries.py: author recognition must leave them alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.relevance_labels import Book, Judged

MANY = 5  # the top-5 check counts the `by`-type queries whose author has this many books
HELD = 4  # … and passes a query whose top 5 holds this many of them


@dataclass(frozen=True)
class AuthorQuery:
    form: str
    query: str
    names: tuple[str, ...] = ()  # the catalog's spelling of the author(s)
    about: tuple[str, ...] = ()  # ids of the books about X (form "about")


def _q(form: str, query: str, *names: str) -> AuthorQuery:
    return AuthorQuery(form, query, names)


AUTHOR_QUERIES = [
    _q("name", "tom clancy", "Tom Clancy"),
    _q("name", "john grisham", "John Grisham"),
    _q("name", "mercedes lackey", "Mercedes Lackey"),
    _q("name", "michael crichton", "Michael Crichton"),
    _q("name", "harper lee", "Harper Lee"),
    _q("name", "paulo coelho", "Paulo Coelho"),
    _q("by", "books by c.s. lewis", "C.S. Lewis"),
    _q("by", "books by jodi picoult", "Jodi Picoult"),
    _q("by", "books by mark twain", "Mark Twain"),
    _q("by", "books by j.d. salinger", "J.D. Salinger"),
    _q("by", "books by haruki murakami", "Haruki Murakami"),
    _q("novels", "sandra brown novels", "Sandra Brown"),
    _q("novels", "dick francis novels", "Dick Francis"),
    _q("novels", "robert ludlum novels", "Robert Ludlum"),
    _q("novels", "charles dickens novels", "Charles Dickens"),
    _q("novels", "thomas hardy novels", "Thomas Hardy"),
    _q("genre", "agatha christie mysteries", "Agatha Christie"),
    _q("genre", "scary stephen king novels", "Stephen King"),
    _q("genre", "terry brooks fantasy", "Terry Brooks"),
    _q("genre", "mary higgins clark suspense", "Mary Higgins Clark"),
    _q("genre", "isaac asimov science fiction", "Isaac Asimov"),
    _q("genre", "anne rice vampire books", "Anne Rice"),
    _q("misspelt", "tolkein", "J.R.R. Tolkien"),
    _q("misspelt", "terry pratchet", "Terry Pratchett"),
    _q("misspelt", "neil gaimen", "Neil Gaiman"),
    _q("misspelt", "dostoevsky", "Fyodor Dostoyevsky"),
    _q("misspelt", "jane austin", "Jane Austen"),
    _q("misspelt", "kurt vonegut", "Kurt Vonnegut"),
    _q("surname", "le guin", "Ursula K. Le Guin"),
    _q("surname", "heinlein", "Robert A. Heinlein"),
    _q("surname", "saramago", "José Saramago"),
    _q("surname", "steinbeck", "John Steinbeck"),
    _q("surname", "koontz", "Dean Koontz"),
    _q("initial", "philip dick", "Philip K. Dick"),
    _q("initial", "george martin", "George R.R. Martin"),
    _q("initial", "raymond feist", "Raymond E. Feist"),
    _q("initial", "iain banks", "Iain M. Banks"),
    _q("initial", "arthur clarke", "Arthur C. Clarke"),
    AuthorQuery(
        "about",
        "books about tolkien",
        about=(
            "9780618057023",  # J.R.R. Tolkien: A Biography
            "9780664226107",  # The Gospel According to Tolkien
            "9780618574810",  # Tolkien and the Great War
            "9781587680267",  # Tolkien and C.S. Lewis: The Gift of a Friendship
            "9780618391028",  # The J.R.R. Tolkien Companion and Guide
            "9781403969736",  # Tolkien's Modern Middle Ages
            "9780618422531",  # Understanding The Lord of the Rings: Tolkien criticism
            "9780517146484",  # The Tolkien Companion
            "9780812695458",  # The Lord of the Rings and Philosophy
        ),
    ),
    AuthorQuery(
        "about",
        "books about jane austen",
        about=(
            "9780143035169",  # Jane Austen: A Life
            "9780470008294",  # Jane Austen For Dummies
            "9780972121798",  # Tea with Jane Austen
            "9780771014178",  # The Jane Austen Cookbook
        ),
    ),
    AuthorQuery(
        "about",
        "books about shakespeare",
        about=(
            "9780060088743",  # A Year in the Life of William Shakespeare: 1599
            "9780393050578",  # Will in the World: How Shakespeare Became Shakespeare
            "9780385313612",  # Shakespeare A to Z
            "9780691102573",  # Hamlet in Purgatory
            "9780764586033",  # Cliffs Notes on Shakespeare's Hamlet
            "9780764586026",  # Cliffs Notes on Shakespeare's Macbeth
        ),
    ),
    AuthorQuery(
        "about",
        "a biography of hemingway",
        about=("9780393318791", "9780306808906"),  # The Paris Years; A Biography
    ),
    AuthorQuery(
        "about",
        "books about virginia woolf",
        about=(
            "9780156032292",  # Virginia Woolf: An Inner Life
            "9781841150352",  # The Hours (Woolf is one of its three heroines)
            "9780764544576",  # Cliffs Notes on Woolf's Mrs. Dalloway
        ),
    ),
    AuthorQuery(
        "about",
        "books about c.s. lewis",
        about=("9781587680267", "9780898709797"),  # with Tolkien; and the Catholic Church
    ),
]


@dataclass(frozen=True)
class Trap:
    query: str
    rule: tuple[str, ...]  # regexes over "title. description", all of which must match
    title: bool = False  # over the title alone
    exclude: str | None = None  # a regex that rules a book out


TRAPS = [
    Trap("victorian london", (r"\bvictorian\b", r"\blondon\b")),
    Trap("the french revolution", (r"french revolution",)),
    Trap(
        "king arthur legends",
        (r"king arthur|\barthurian\b|\bcamelot\b",),
        exclude=r"king arthur flour",
    ),
    Trap("the napoleonic wars", (r"\bnapoleon",)),  # "jack the ripper": not in the catalog
    Trap("abraham lincoln", (r"abraham lincoln|lincoln at gettysburg|president lincoln",)),
    Trap(
        "the american civil war",
        (
            r"american civil war|\bconfederate\b|\bgettysburg\b|\bantietam\b"
            r"|civil war.{0,60}\b(lincoln|union|slavery)|\b(lincoln|union|slavery).{0,60}civil war",
        ),
    ),
    Trap("books about dogs", (r"\bdogs?\b|\bpupp(y|ies)\b|\bhounds?\b|\bcanine",), title=True),
    Trap(
        "ancient rome",
        (
            r"ancient rome|roman empire|roman republic|imperial rome|masters of rome|julius caesar"
            r"|\bgladiators?\b|emperor (nero|augustus|hadrian|claudius|caligula|tiberius)",
        ),
    ),
    Trap("mount everest", (r"\beverest\b",)),
]


def author_queries(books: Sequence[Book]) -> list[tuple[AuthorQuery, Judged]]:
    """Every author query the catalog can judge, with its labels."""
    rows = {b.id: i for i, b in enumerate(books)}
    out = []
    for q in AUTHOR_QUERIES:
        if q.form == "about":
            grades = {rows[i]: 1 for i in q.about if i in rows}
        else:
            names = {n.casefold() for n in q.names}
            grades = {
                r: 1 for r, b in enumerate(books) if names & {a.casefold() for a in b.authors}
            }
        if grades:
            out.append((q, Judged("authors", q.query, grades)))
    return out


def trap_queries(books: Sequence[Book]) -> list[Judged]:
    out = []
    for trap in TRAPS:
        rules = [re.compile(p, re.IGNORECASE) for p in trap.rule]
        texts = [b.title if trap.title else f"{b.title}. {b.description}" for b in books]
        out_rule = re.compile(trap.exclude, re.IGNORECASE) if trap.exclude else None
        grades = {
            r: 1
            for r, t in enumerate(texts)
            if all(p.search(t) for p in rules) and not (out_rule and out_rule.search(t))
        }
        if grades:
            out.append(Judged("traps", trap.query, grades))
    return out


def checks(
    queries: Sequence[tuple[AuthorQuery, Judged]], rankings: dict[str, list[list[int]]]
) -> dict[str, dict[str, float]]:
    """Per row: `by_top5`, the share of the queries naming an author with MANY or more books
    (every form but `about`) whose top 5 holds at least 4 of the author's books; `about_top1`,
    the share of the `about` queries whose first result is a book about X."""
    out = {}
    for row, ranked in rankings.items():
        by, about = [], []
        for i, (q, judged) in enumerate(queries):
            first = ranked[i][:5]
            if q.form == "about":
                about.append(bool(first) and first[0] in judged.grades)
            elif len(judged.grades) >= MANY:
                by.append(sum(r in judged.grades for r in first) >= HELD)
        out[row] = {
            "by_top5": sum(by) / len(by) if by else 0.0,
            "about_top1": sum(about) / len(about) if about else 0.0,
        }
    return out
