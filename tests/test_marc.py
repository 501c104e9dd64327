"""Issue 47 item 1: MARC as library systems export it. Records built here with pymarc (binary
MARC21 in UTF-8 and in MARC-8, and MARCXML), each field read as a librarian would (title without
its ISBD punctuation, authors by relator, the original year of a reprint, subjects with their
subdivisions, numbered series), bad records named by position and control number with reading
going on, the format known by its bytes whatever the name, and the books indexed on both
databases with their series reaching the series head of similar books."""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pymarc import Field, Indicators, Record, Subfield, record_to_xml
from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from conftest import FakeEncoder, finished_job, index_file
from indexer.catalog import CatalogError, CatalogRecord, CatalogSnapshot, InvalidRow
from indexer.catalog.marc_fields import trim
from indexer.catalog.marc_records import MarcStats, _records, marc21_rows
from indexer.schema import Book
from service.api.main import create_app
from service.config.settings import ServiceSettings
from service.engine.name_rows import NameRows

S = Subfield
NO = Indicators(" ", " ")


def field(tag: str, *subfields: tuple[str, str], ind: str = "  ") -> Field:
    return Field(tag, Indicators(ind[0], ind[1]), [S(c, v) for c, v in subfields])


def record(control: str | None, *fields: Field, marc8: bool = False) -> Record:
    """A record in UTF-8 (leader 09 "a") or in MARC-8 (" "): pymarc writes a MARC-8 record's
    text as Latin-1, so a MARC-8 combining accent is given as its byte ("\\xe2" + "e": é)."""
    r = Record(to_unicode=not marc8, force_utf8=not marc8)  # to_unicode writes UTF-8
    r.leader = r.leader[:9] + (" " if marc8 else "a") + r.leader[10:]
    if control is not None:
        r.add_field(Field(tag="001", data=control))
    r.add_field(*fields)
    return r


HOBBIT = record(
    "ocm00012345",
    Field(tag="008", data="780101r19781937enka   j      000 1 eng d"),
    field("020", ("a", "0395071224 (pbk.) :"), ("c", "$5.95")),
    field("020", ("a", "978-0-261-10221-7")),
    field("100", ("a", "Tolkien, J. R. R.,"), ("d", "1892-1973,"), ("e", "author."), ind="1 "),
    field("245", ("a", "The hobbit :"), ("b", "or, There and back again /"), ind="14"),
    field("250", ("a", "Rev. ed.")),
    field("264", ("a", "Boston :"), ("b", "Houghton Mifflin,"), ("c", "[1978?]"), ind=" 1"),
    field("490", ("a", "Middle-earth ;"), ("v", "v. 1"), ind="1 "),
    field("520", ("a", "Bilbo Baggins, a hobbit, is swept into a quest for a dragon's gold.")),
    field("650", ("a", "Fantasy fiction."), ("v", "Juvenile literature."), ("2", "lcsh"), ind=" 0"),
    field("651", ("a", "Middle Earth (Imaginary place)"), ("v", "Fiction."), ind=" 0"),
    field("700", ("a", "Anderson, Douglas A.,"), ("e", "editor."), ind="1 "),
    field("700", ("a", "Lewis, C. S."), ("t", "On stories."), ind="12"),  # a work within
    field("830", ("a", "Middle-earth (Tolkien) ;"), ("v", "1."), ind=" 0"),
)  # fmt: skip
ILIAD = record(
    "ocm2",
    Field(tag="008", data="900101s1990    nyu           000 1 eng d"),
    field("100", ("a", "Homer."), ind="0 "),
    field("245", ("a", "The Iliad /"), ("c", "Homer ; translated by Robert Fagles."), ind="14"),
    field("260", ("a", "New York :"), ("b", "Viking,"), ("c", "c1990.")),
    field("490", ("a", "Penguin classics"), ind="0 "),
    field("700", ("a", "Fagles, Robert."), ("4", "trl"), ind="1 "),
    field("700", ("a", "Knox, Bernard,"), ("e", "writer of introduction."), ind="1 "),
)  # fmt: skip
# MARC-8, no 008: the year from 260's "1942-", the language from 041; co-authors without a
# relator are authors
ETRANGER = record(
    "c3",
    field("041", ("a", "fre")),
    field("100", ("a", "Camus, Albert,"), ("d", "1913-1960."), ind="1 "),
    field("245", ("a", "L'\xe2etranger :"), ("b", "roman /"), ("c", "Albert Camus."), ind="12"),
    field("260", ("a", "Paris :"), ("b", "Gallimard,"), ("c", "1942-")),
    field("700", ("a", "Sartre, Jean-Paul."), ind="1 "),
    marc8=True,
)  # fmt: skip
# an anthology: no author, so its editor is credited
ANTHOLOGY = record(
    "c5",
    field("245", ("a", "Best short stories of 1999."), ind="00"),
    field("264", ("c", "\u00a92000"), ind=" 4"),
    field("700", ("a", "Moore, Lorrie,"), ("e", "editor."), ind="1 "),
    field("700", ("a", "John, of Salisbury,"), ("e", "compiler."), ind="0 "),
    field("700", ("a", "Pen, Ann,"), ("4", "ill"), ind="1 "),
)  # fmt: skip
NO_TITLE = record("c4", field("100", ("a", "Nobody, A."), ind="1 "))
RECORDS = [HOBBIT, ILIAD, ETRANGER, ANTHOLOGY]


def marc(records: list[Record]) -> bytes:
    return b"".join(r.as_marc() for r in records)


def marcxml(records: list[Record]) -> bytes:
    """The records as MARCXML, which is Unicode: a MARC-8 one as pymarc reads it."""
    body = b"\n".join(record_to_xml(Record(r.as_marc())) for r in records)
    return (
        b'<?xml version="1.0" encoding="UTF-8"?>\n'
        b'<collection xmlns="http://www.loc.gov/MARC21/slim">\n' + body + b"\n</collection>\n"
    )


def read(path: Path) -> tuple[list[CatalogRecord | InvalidRow], list[str]]:
    with CatalogSnapshot.take(path) as snapshot:
        return list(snapshot.scan()), snapshot.check().notices


def books(path: Path) -> dict[str, CatalogRecord]:
    rows, _ = read(path)
    return {r.id: r for r in rows if isinstance(r, CatalogRecord)}


@pytest.fixture(params=["mrc", "xml"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / f"books.{request.param}"
    path.write_bytes(marc(RECORDS) if request.param == "mrc" else marcxml(RECORDS))
    return path


def test_every_field_read_as_a_librarian_would(catalog: Path) -> None:
    found = books(catalog)
    assert list(found) == ["ocm00012345", "ocm2", "c3", "c5"]  # 001, in file order
    hobbit = found["ocm00012345"]
    assert hobbit.title == "The hobbit: or, There and back again"  # 245 $c not in it
    assert hobbit.authors == ["J. R. R. Tolkien"]  # inverted, dates dropped
    assert hobbit.year == 1937  # a reprint's 008: the original's date, not 1978
    assert hobbit.language == "eng"
    assert (
        hobbit.description == "Bilbo Baggins, a hobbit, is swept into a quest for a dragon's gold."
    )
    assert hobbit.extra["isbn"] == "0395071224"  # qualifier and ISBD colon dropped
    assert hobbit.extra["isbns"] == ["0395071224", "9780261102217"]
    assert hobbit.extra["edition"] == "Rev. ed."
    assert (hobbit.extra["publisher"], hobbit.extra["place"]) == ("Houghton Mifflin", "Boston")
    assert hobbit.extra["subjects"] == [
        "Fantasy fiction -- Juvenile literature",
        "Middle Earth (Imaginary place) -- Fiction",
    ]
    assert hobbit.extra["contributors"] == [{"name": "Douglas A. Anderson", "roles": ["editor"]}]
    # 830 (controlled) over 490 (as transcribed); its volume
    assert (hobbit.extra["series"], hobbit.extra["series_index"]) == (
        ["Middle-earth (Tolkien)"],
        "1",
    )

    iliad = found["ocm2"]
    assert iliad.title == "The Iliad"
    assert iliad.authors == ["Homer"]  # a forename entry (indicator 0) is not inverted
    assert iliad.extra["contributors"] == [
        {"name": "Robert Fagles", "roles": ["translator"]},  # $4 code as its term
        {"name": "Bernard Knox", "roles": ["writer of introduction"]},
    ]
    assert iliad.year == 1990
    assert "series" not in iliad.extra  # no volume: a publisher's line, not a reader's series
    assert iliad.extra["other_series"] == ["Penguin classics"]

    etranger = found["c3"]
    assert etranger.title == "L'étranger: roman"  # MARC-8 converted, composed (NFC)
    assert etranger.authors == ["Albert Camus", "Jean-Paul Sartre"]  # no relator: an author
    assert (etranger.year, etranger.language) == (1942, "fre")  # 260 "1942-"; 041
    assert etranger.extra["publisher"] == "Gallimard"

    anthology = found["c5"]
    assert anthology.title == "Best short stories of 1999"
    # no author: the editor and compiler credited; a forename entry is not inverted
    assert anthology.authors == ["Lorrie Moore", "John, of Salisbury"]
    assert anthology.extra["contributors"] == [{"name": "Ann Pen", "roles": ["illustrator"]}]
    assert anthology.year == 2000  # the copyright date, 264 second indicator 4


def test_binary_and_xml_give_the_same_books(tmp_path: Path) -> None:
    """The same books from either, their text composed: many records spell "é" as "e" and a
    combining accent."""
    decomposed = record("d1", field("245", ("a", "Cafe\u0301 society."), ind="10"))
    (tmp_path / "a.mrc").write_bytes(marc([*RECORDS, decomposed]))
    (tmp_path / "a.xml").write_bytes(marcxml([*RECORDS, decomposed]))
    binary, xml = books(tmp_path / "a.mrc"), books(tmp_path / "a.xml")
    assert binary["d1"].title == xml["d1"].title == "Caf\u00e9 society"
    assert [(b.id, b.title, b.authors, b.year, b.extra) for b in binary.values()] == [
        (b.id, b.title, b.authors, b.year, b.extra) for b in xml.values()
    ]


def test_the_format_is_known_by_its_bytes(tmp_path: Path) -> None:
    """Whatever the name says: an export saved as .txt, MARCXML named .txt, MARC gzipped."""
    (tmp_path / "export.txt").write_bytes(marc(RECORDS))
    (tmp_path / "records.tsv").write_bytes(marcxml(RECORDS))
    (tmp_path / "books.mrc.gz").write_bytes(gzip.compress(marc(RECORDS)))
    for name, shown in [
        ("export.txt", "MARC21 (it starts with a MARC21 leader)"),
        ("records.tsv", "MARCXML (its first character is '<')"),
        ("books.mrc.gz", None),
    ]:
        rows, notices = read(tmp_path / name)
        assert [r.id for r in rows if isinstance(r, CatalogRecord)] == [
            "ocm00012345",
            "ocm2",
            "c3",
            "c5",
        ]
        if shown:
            assert f"{tmp_path / name}: read as {shown}" in notices
    _, notices = read(tmp_path / "books.mrc.gz")
    assert f"{tmp_path / 'books.mrc.gz'}: read as MARC21 (ISO 2709): 4 record(s)" in notices
    assert f"{tmp_path / 'books.mrc.gz'}: 1 record(s) in MARC-8, converted to Unicode" in notices


def test_bad_records_are_named_and_reading_goes_on(tmp_path: Path) -> None:
    # not UTF-8 though its leader says so: its directory still names its 001
    broken = ILIAD.as_marc().replace(b"ocm2", b"ocm7").replace(b"Iliad", b"Il\xffad")
    path = tmp_path / "books.mrc"
    path.write_bytes(
        HOBBIT.as_marc()
        + NO_TITLE.as_marc()
        + b"\n00099xx garbage\x1d"  # not a record at all, after a newline some exports put
        + bytes(broken)
        + HOBBIT.as_marc()  # the same 001 again
        + ETRANGER.as_marc()
        + ILIAD.as_marc()[:-40]  # cut short at the end of the file
    )
    rows, _ = read(path)
    bad = [str(r) for r in rows if isinstance(r, InvalidRow)]
    unreadable = "not a readable MARC record"
    assert bad == [
        f"{path}:2: 001 'c4': missing 'title'",
        f"{path}:3: {unreadable} (RecordLeaderInvalid: Unable to extract record leader)",
        f"{path}:4: 001 'ocm7': {unreadable} (UnicodeDecodeError: 'utf-8' codec can't decode "
        "byte 0xff in position 6: invalid start byte)",
        f"{path}:5: duplicate id 'ocm00012345' (first at record 1)",
        f"{path}:7: 001 'ocm2': {unreadable} (TruncatedRecord: Record length in leader is greater "
        "than the length of data)",
    ]
    assert [r.id for r in rows if isinstance(r, CatalogRecord)] == ["ocm00012345", "c3"]


def test_a_marc8_leader_over_utf8_bytes_is_read_as_utf8(tmp_path: Path) -> None:
    """Leader 09 says MARC-8, the bytes are UTF-8 (an export fault): MARC-8 would read "é" as
    two other characters."""
    r = record("u1", field("245", ("a", "Caf\u00e9 society"), ind="10"))
    data = bytearray(r.as_marc())
    data[9] = ord(" ")
    path = tmp_path / "books.mrc"
    path.write_bytes(bytes(data))
    rows, notices = read(path)
    assert [r.title for r in rows if isinstance(r, CatalogRecord)] == ["Café society"]
    assert any(
        "1 record(s) whose leader (position 09) says MARC-8 hold UTF-8" in n for n in notices
    )


def test_broken_xml_is_one_error_at_its_line(tmp_path: Path) -> None:
    text = marcxml(RECORDS[:2]).replace(b"</collection>", b"<record><datafield></collection>")
    path = tmp_path / "books.xml"
    path.write_bytes(text)
    rows, _ = read(path)
    assert [r.id for r in rows if isinstance(r, CatalogRecord)] == ["ocm00012345", "ocm2"]
    (bad,) = [r for r in rows if isinstance(r, InvalidRow)]
    assert bad.line == 3 and "broken XML at line" in bad.reason
    other = tmp_path / "other.xml"
    other.write_bytes(b"<?xml version='1.0'?><library><book>Dune</book></library>")
    assert [str(r) for r in read(other)[0]] == [
        f"{other}:1: no MARCXML record in the file (its root element is 'library')"
    ]


def test_a_record_past_the_row_limit_is_skipped_to_its_end() -> None:
    """One record over `limit` bytes is reported and the next is read: whether its terminator
    was in the buffer or not (chunks smaller than the record)."""
    small, big = ETRANGER.as_marc(), HOBBIT.as_marc()
    data = small + big + small
    for chunk in (1 << 20, 64):
        got = list(_records(io.BytesIO(data), len(small), chunk=chunk))
        assert got == [small, None, small], chunk
    # at the limit exactly, a record is read
    assert list(_records(io.BytesIO(big), len(big), chunk=64)) == [big]
    assert list(_records(io.BytesIO(big), len(big) - 1, chunk=64)) == [None]
    stats = MarcStats()
    rows = list(marc21_rows(io.BytesIO(data), len(small), stats))
    assert [line for line, r in rows if isinstance(r, str)] == [2] and stats.records == 3


def test_isbd_punctuation_goes_but_initials_and_ellipses_stay() -> None:
    assert trim("The hobbit :") == "The hobbit"
    assert trim("Tolkien, J. R. R.,") == "Tolkien, J. R. R."
    assert trim("Homer.") == "Homer"
    assert trim("And then...") == "And then..."
    assert trim("Rev. ed.", period=False) == "Rev. ed."


def test_unknown_names_still_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(
        CatalogError, match=r"unknown catalog format '\.dat'; use .*\.mrc \(MARC21\)"
    ):
        CatalogSnapshot.take(tmp_path / "export.dat")


def test_series_a_row_names_and_a_title_marker_are_one_series() -> None:
    rows = NameRows.of(
        ["Mort (Discworld, #4)", "Sourcery", "Dune", "Emma"],
        [["Terry Pratchett"], ["Terry Pratchett"], ["Frank Herbert"], ["Jane Austen"]],
        series=[[], ["Discworld"], ["Dune Chronicles", "Dune Chronicles"], []],
    )
    assert rows.series == [("discworld",), ("discworld",), ("dune chronicles",), ()]


@pytest.fixture
def indexed(engine: Engine, tmp_path: Path) -> Iterator[Engine]:
    second = record(
        "ocm3",
        field("100", ("a", "Tolkien, J. R. R."), ind="1 "),
        field("245", ("a", "The fellowship of the ring"), ind="14"),
        field("520", ("a", "A ring of power must be carried to the fire where it was made.")),
        field("830", ("a", "Middle-earth (Tolkien) ;"), ("v", "2."), ind=" 0"),
    )
    path = tmp_path / "library.mrc"
    path.write_bytes(marc([*RECORDS, second]))
    report = index_file(engine, path)
    assert (report.added, report.rejected) == (5, [])
    yield engine


def test_indexed_on_both_databases_with_its_series_in_the_series_head(
    indexed: Engine, tmp_path: Path
) -> None:
    with Session(indexed) as session:
        stored = {b.id: b for b in session.scalars(select(Book))}
    hobbit = stored["ocm00012345"]
    assert (hobbit.title, hobbit.authors, hobbit.year, hobbit.language) == (
        "The hobbit: or, There and back again",
        ["J. R. R. Tolkien"],
        1937,
        "eng",
    )
    assert hobbit.extra["series"] == ["Middle-earth (Tolkien)"]
    assert stored["c3"].title == "L'étranger: roman"
    url = indexed.url.render_as_string(hide_password=False)
    settings = ServiceSettings(database_url=url, device="cpu")
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        body = client.get("/books/ocm00012345/similar", params={"k": 4}).json()
        assert not body["heads"]["series"]["abstained"]
        first = body["results"][0]
        assert first["id"] == "ocm3" and first["heads"]["series"]["share"] > 0
        # the Iliad's unnumbered "Penguin classics" is no series: its head abstains
        iliad = client.get("/books/ocm2/similar", params={"k": 4}).json()
        assert iliad["heads"]["series"]["abstained"]


def test_a_marc_upload_reindexes_through_the_admin_api(indexed: Engine) -> None:
    """A library's nightly export posted to /admin/reindex as a file: the new record searchable
    after the job, the others kept."""
    url = indexed.url.render_as_string(hide_password=False)
    token = "marc-admin-token-0123456"
    settings = ServiceSettings(
        database_url=url, device="cpu", admin_token=token, generation_poll_s=0
    )
    added = record(
        "ocm99",
        field("100", ("a", "Le Guin, Ursula K."), ind="1 "),
        field("245", ("a", "A wizard of Earthsea /"), ind="12"),
        field("520", ("a", "A boy on an island of wizards learns the true names of things.")),
    )
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        r = client.post(
            "/admin/reindex",
            files={"catalog": ("nightly.mrc", marc([added]))},
            data={"keep_missing": "true"},
            headers=auth,
        )
        assert r.status_code == 202, r.text
        job = finished_job(client, r.json()["id"], auth)
        assert job["state"] == "succeeded", job
        assert (job["report"]["added"], job["report"]["removed"]) == (1, 0)
        book = client.get("/books/ocm99").json()
        assert (book["title"], book["authors"]) == ("A wizard of Earthsea", ["Ursula K. Le Guin"])
        assert client.get("/healthz").json()["catalog_size"] == 6
