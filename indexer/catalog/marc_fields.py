"""A MARC21 bibliographic record as a catalog row: what each of its fields becomes.

- `id`: 001, the record's control number in the library system (else the ISBN becomes the id,
  else one derived from title and authors, as for any row);
- `title`: 245 $a $b $n $p, each joined as its ISBD punctuation says (" :" → ": ") and the
  punctuation itself dropped;
- `authors`: 100/110/111 and 700/710/711 whose relator ($e, $j, $4) is none or an author's, a
  person's "Surname, Forenames" turned "Forenames Surname"; the other names (translators,
  illustrators, editors) are `contributors` with their roles, and a record of no author credits
  its editors or compilers;
- `year`: 008's date (a reprint's original date), else 264/260 $c (c1998, [1998?], 1998-);
- `language`: 008/35-37, else 041 $a;
- `description`: 520 $a $b; `isbn` (020 $a, qualifiers dropped), `edition` (250), `publisher`
  and `place` (264/260), `subjects` (600/610/611/630/650/651/655, subdivisions joined by " -- "),
  and `series` with `series_index` (8XX, else 490, with a volume number $v: a numbered series;
  one without, a publisher's line such as "Penguin classics", is `other_series`).

Values are kept as the cataloguer wrote them; only the ISBD punctuation between and after them
goes.
"""

from __future__ import annotations

import re
from typing import Any

from pymarc import Field, Record

from indexer.catalog.columns import isbn_id

# a relator that makes the name an author: MARC's terms and codes (id.loc.gov/vocabulary/relators)
AUTHOR_ROLES = frozenset({"author", "joint author", "creator", "writer", "aut", "cre", "wrt"})
EDITOR_ROLES = frozenset({"editor", "compiler"})  # credited when no author is
# the relator codes of the roles a book's credits name most, as their terms
_ROLE_TERMS = {
    "aft": "author of afterword",
    "aui": "author of introduction",
    "com": "compiler",
    "ctb": "contributor",
    "edt": "editor",
    "ill": "illustrator",
    "nrt": "narrator",
    "pht": "photographer",
    "trl": "translator",
}
_NAME_TAGS = ("100", "110", "111", "700", "710", "711")
_SUBJECT_TAGS = ("600", "610", "611", "630", "650", "651", "655")
_SUBDIVISIONS = frozenset("vxyz")  # form, general, chronological, geographic
_NOT_TEXT = frozenset("0123456789e4j")  # linkage, sources, relators
_TRAILING = re.compile(r"[\s/:;,=]+$")  # ISBD's " /", " :", " ;", " =", ","
_INITIAL = re.compile(r"(?:^|[\s.(])\w\.$")  # "J. R. R." keeps its last period
_YEAR = re.compile(r"(?<!\d)(\d{4})(?!\d)")
_ISBN = re.compile(r"[0-9][0-9\- ]{8,16}[0-9Xx]")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_JOINER = {":": ": ", "=": " = ", ";": "; ", ".": ". ", ",": ", "}


def trim(text: str, *, period: bool = True) -> str:
    """`text` without the ISBD punctuation that ends it: "The hobbit :" → "The hobbit",
    "Tolkien, J. R. R.," → "Tolkien, J. R. R.", "1892-1973." → "1892-1973". `period`: whether
    a final period goes too (not in prose, nor in an edition's "Rev. ed.")."""
    while True:
        out = _TRAILING.sub("", text.strip())
        if period and out.endswith(".") and not out.endswith("...") and not _INITIAL.search(out):
            out = out[:-1].rstrip()
        if out == text:
            return out
        text = out


def marc_row(record: Record) -> dict[str, Any]:
    """The record's fields under the names a catalog row has (the module's docstring): empty
    ones left out, so `parse_row` names a missing title as for any row."""
    authors, contributors = _names(record)
    isbns = list(dict.fromkeys(i for f in record.get_fields("020") for i in _isbns(f)))
    series, index, other = _series(record)
    row: dict[str, Any] = {
        "id": _control(record, "001"),
        "title": _title(record),
        "authors": authors,
        "year": _year(record),
        "language": _language(record),
        "description": "\n".join(_joined(f, "ab", period=False) for f in record.get_fields("520"))
        or None,
        "isbn": isbns[0] if isbns else None,
        "isbns": isbns if len(isbns) > 1 else None,
        "contributors": contributors,
        "edition": next(map(_prose, record.get_fields("250")), None),
        "publisher": _imprint(record, "b"),
        "place": _imprint(record, "a"),
        "series": series,
        "series_index": index,
        "other_series": other,
        "subjects": list(dict.fromkeys(filter(None, map(_heading, _subject_fields(record))))),
    }
    return {k: v for k, v in row.items() if v not in (None, "", [])}


def _control(record: Record, tag: str) -> str | None:
    field = record.get(tag)
    return (field.data or "").strip() or None if field is not None else None


def _subject_fields(record: Record) -> list[Field]:
    return _fields(record, _SUBJECT_TAGS)


def _fields(record: Record, tags: tuple[str, ...]) -> list[Field]:
    return [f for f in record.fields if f.tag in tags]


def _joined(field: Field, codes: str, *, period: bool = True) -> str:
    """The subfields `codes` in their order, each joined to the one before as the ISBD
    punctuation that ends it says ("Dune :" + "a novel" → "Dune: a novel")."""
    out = ""
    for sub in field.subfields:
        if sub.code not in codes or not (part := sub.value.strip()):
            continue
        if out:
            kept = trim(out)
            joiner = _JOINER.get(out.rstrip()[-1:], " ")
            out = kept + (" " if kept.endswith(".") and joiner.startswith(".") else joiner)
        out += part
    return trim(out, period=period)


def _prose(field: Field) -> str:
    """$a $b of a summary or an edition, its final period kept."""
    return _joined(field, "ab", period=False)


def _title(record: Record) -> str | None:
    field = record.get("245")
    title = _joined(field, "abnp") if field is not None else ""
    return title.strip("[]") or None


def _roles(field: Field) -> set[str]:
    terms = field.get_subfields("j" if field.tag.endswith("11") else "e")
    codes = [trim(c.rstrip("/").rsplit("/", 1)[-1]).lower() for c in field.get_subfields("4")]
    return {trim(r).lower() for t in terms for r in t.split(",") if trim(r)} | {
        _ROLE_TERMS.get(c, c) for c in codes if c
    }


def _name(field: Field) -> str:
    if field.tag.endswith("00"):  # a person: "Tolkien, J. R. R.," → "J. R. R. Tolkien"
        name = trim(" ".join(field.get_subfields("a")))
        if field.indicator1 == "1" and ", " in name:
            surname, forenames = name.split(", ", 1)
            name = f"{forenames} {surname}"
        numeration = trim(" ".join(field.get_subfields("b")))
        return f"{name} {numeration}".strip()
    return _joined(field, "ab" if field.tag.endswith("10") else "a")


def _names(record: Record) -> tuple[list[str], list[dict[str, Any]]]:
    """The authors, and the other names with their roles."""
    authors: dict[str, None] = {}
    others: dict[str, set[str]] = {}
    for field in _fields(record, _NAME_TAGS):
        if field.get_subfields("t"):  # a work the book contains, not a credit
            continue
        if not (name := _name(field)):
            continue
        roles = _roles(field)
        if not roles or roles & AUTHOR_ROLES:
            authors[name] = None
        else:
            others.setdefault(name, set()).update(roles)
    if not authors:
        authors = {n: None for n, roles in others.items() if roles & EDITOR_ROLES}
    contributors = [
        {"name": n, "roles": sorted(roles)} for n, roles in others.items() if n not in authors
    ]
    return list(authors), contributors


def _year(record: Record) -> int | None:
    """008's date (its original for a reprint), else the first of the imprint's years."""
    fixed = _control(record, "008") or ""
    if len(fixed) >= 15:
        kind, date1, date2 = fixed[6], fixed[7:11], fixed[11:15]
        for date in (date2, date1) if kind == "r" else (date1,):
            if date.isdigit() and date not in ("0000", "9999"):
                return int(date)
    for text in (_imprint(record, "c", "1"), _imprint(record, "c", "4")):
        if text and (found := _YEAR.search(text)):
            return int(found.group(1))
    return None


def _imprint(record: Record, code: str, function: str = "1") -> str | None:
    """Subfield `code` of the imprint: 264 of the publication (`function` 1; 4: the copyright
    date), else 260."""
    fields = [f for f in record.get_fields("264") if f.indicator2 == function]
    fields += record.get_fields("260") if function == "1" else []
    for field in fields:
        if values := [trim(v) for v in field.get_subfields(code) if trim(v)]:
            return "; ".join(values)
    return None


def _language(record: Record) -> str | None:
    fixed = _control(record, "008") or ""
    code = fixed[35:38].strip().lower() if len(fixed) >= 38 else ""
    if len(code) == 3 and code.isalpha() and code not in ("und", "zxx"):
        return code
    for field in record.get_fields("041"):
        for value in field.get_subfields("a"):
            if len(value.strip()) >= 3 and value.strip()[:3].isalpha():
                return value.strip()[:3].lower()
    return None


def _isbns(field: Field) -> list[str]:
    """020 $a's ISBNs without their qualifiers: "0441172717 (pbk.)" → "0441172717"."""
    found = (_ISBN.match(v.strip()) for v in field.get_subfields("a"))
    return [isbn for m in found if m and len(isbn := isbn_id(m.group())) in (10, 13)]


def _heading(field: Field) -> str:
    """A subject heading with its subdivisions: "Science fiction -- Juvenile literature"."""
    main: list[str] = []
    parts: list[str] = []
    for sub in field.subfields:
        if sub.code in _NOT_TEXT or not (value := trim(sub.value)):
            continue
        if sub.code in _SUBDIVISIONS:
            parts.append(value)
        elif not parts:
            main.append(value)
    return " -- ".join([" ".join(main), *parts]) if main else ""


def _series(record: Record) -> tuple[list[str], str | None, list[str]]:
    """The numbered series (8XX, else 490), the first one's volume number, and the series
    statements without a number."""
    traced = [
        (_joined(f, "t" if f.tag in ("800", "810", "811") else "anp"), f.get_subfields("v"))
        for f in _fields(record, ("800", "810", "811", "830"))
    ]
    transcribed = [(_joined(f, "a"), f.get_subfields("v")) for f in record.get_fields("490")]
    statements = traced or transcribed
    numbered: dict[str, str] = {}
    other: dict[str, None] = {}
    for title, volumes in statements:
        number = next((m.group() for v in volumes if (m := _NUMBER.search(v))), None)
        if title and number is not None:
            numbered.setdefault(title, number)
        elif title:
            other[title] = None
    first = next(iter(numbered.values()), None)
    return list(numbered), first, [t for t in other if t not in numbered]
