"""What a catalog file is: its format from its name, then from its bytes.

The name gives the format (`.jsonl`/`.ndjson` one JSON object a line, `.json` a JSON array,
`.csv` comma-separated, `.tsv`/`.txt` tab-separated, `.mrc`/`.marc` binary MARC21, `.xml`
MARCXML, any of them `.gz`); the bytes then have the last word, as the snapshot is copied
(`copy_decoded`):

- gzip is known by its magic bytes (1f 8b), whatever the name, and decompressed;
- UTF-16 with a byte-order mark (LibraryThing's and Excel's "Unicode text") is converted to
  UTF-8; UTF-16 without one (every other byte 0) is refused in one sentence naming it;
- a JSONL or JSON file whose first character is `[` is a JSON array, one whose first is `{` one
  object a line; a file of any name that starts with a MARC21 leader is binary MARC, one whose
  first character is `<` MARCXML (`refine`).
"""

from __future__ import annotations

import codecs
import gzip
import re
import tempfile
import zlib
from pathlib import Path
from typing import IO, cast

import charset_normalizer

from indexer.catalog.records import CatalogError, CatalogTooLargeError

FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".txt": "tsv",
    ".mrc": "marc",
    ".marc": "marc",
    ".xml": "marcxml",
    ".xlsx": "xlsx",
}
KNOWN = ".jsonl, .json, .csv, .tsv, .xlsx, .mrc (MARC21) or .xml (MARCXML), or .gz of one"
NAMES = {
    "jsonl": "one JSON object a line",
    "json": "a JSON array",
    "marc": "MARC21",
    "marcxml": "MARCXML",
    "xlsx": "an Excel workbook",
    "openlibrary": "an Open Library dump",
}
# a MARC21 leader: the record's length, codes, "22" (indicator and subfield code counts), the
# data's base address; what every ISO 2709 record starts with
_LEADER = re.compile(rb"\d{5}[a-z ]{5}22\d{5}")
_GZIP = b"\x1f\x8b"
_ZIP = b"PK\x03\x04"  # an .xlsx is a zip of XML
_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_CHUNK = 1024 * 1024
_SAMPLE = 1024 * 1024  # bytes of non-ASCII lines charset-normalizer reads to name an encoding


def catalog_format(name: str | Path) -> str:
    """ "jsonl", "json", "csv", "tsv", "marc" or "marcxml", from the file name's suffix (a
    `.gz` one's inner suffix); `CatalogError` for any other."""
    path = Path(name)
    suffix = path.suffix.lower()
    if suffix == ".gz":
        suffix = Path(path.stem).suffix.lower()
    if suffix not in FORMATS:
        raise CatalogError([], f"{name}: unknown catalog format {suffix!r}; use {KNOWN}")
    return FORMATS[suffix]


def copy_decoded(
    source: IO[bytes], dest: IO[bytes], name: str, *, max_bytes: int | None = None
) -> list[str]:
    """Copy `source` into `dest` as UTF-8 text's bytes: gunzipped when it is gzip, converted
    when it is UTF-16 with a byte-order mark. What was done, as notices. Past `max_bytes`
    written, `CatalogTooLargeError` (what was written stays for the caller to drop)."""
    notices = []
    written = 0

    def write(data: bytes) -> None:
        nonlocal written
        written += len(data)
        if max_bytes is not None and written > max_bytes:
            raise CatalogTooLargeError(name, max_bytes)
        dest.write(data)

    head = _peek(source, 2)
    if head == _GZIP:
        source = cast(IO[bytes], gzip.GzipFile(fileobj=source, mode="rb"))
        notices.append(f"{name}: decompressed (gzip)")
    try:
        head = _peek(source, 4)
        if head.startswith(_UTF16_BOMS):
            reader = codecs.getreader("utf-16")(source)  # strict
            while text := reader.read(_CHUNK):
                write(text.encode("utf-8", "surrogatepass"))
            notices.append(f"{name}: read as UTF-16 (its byte-order mark), converted to UTF-8")
        else:
            if _utf16_without_bom(head):
                raise CatalogError(
                    [],
                    f"{name}: the file looks like UTF-16 without a byte-order mark; save it as "
                    "UTF-8 (or UTF-16 with a BOM)",
                )
            while chunk := source.read(_CHUNK):
                write(chunk)
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise CatalogError([], f"{name}: not a readable gzip file ({e or 'cut short'})") from None
    except UnicodeDecodeError as e:
        raise CatalogError([], f"{name}: invalid UTF-16 ({e.reason}); save it as UTF-8") from None
    dest.flush()
    return notices


def refine(file: IO[bytes], fmt: str, name: str) -> tuple[str, list[str]]:
    """The format of the decoded `file` (left at its start) as its first bytes say: a MARC21
    leader, MARCXML's `<`, a JSON file's first character; and a notice where that is not what
    its name said."""
    file.seek(0)
    head = file.read(48)
    file.seek(0)
    first = _first_character(file)
    if _LEADER.match(head):
        found, why = "marc", "it starts with a MARC21 leader"
    elif head.startswith(b"/type/") and head.count(b"\t") >= 2:
        found, why = "openlibrary", "its lines are type, key, revision, date and JSON"
    elif head.startswith(_ZIP):
        found, why = "xlsx", "its bytes are a zip, as a workbook's"
    elif first == "<" and fmt != "marcxml":
        found, why = "marcxml", "its first character is '<'"
    elif fmt == "marcxml" and first != "<":
        raise CatalogError(
            [],
            f"{name}: not XML (it starts with {first or 'a non-ASCII byte'!r}): a .xml catalog "
            "is read as MARCXML",
        )
    elif fmt in ("json", "jsonl") and first in "[{" and first:
        found, why = {"[": "json", "{": "jsonl"}[first], f"its first character is {first!r}"
    else:
        found, why = fmt, ""
    if found == fmt:
        return fmt, []
    return found, [f"{name}: read as {NAMES[found]} ({why})"]


def _peek(f: IO[bytes], n: int) -> bytes:
    """The next `n` bytes, the file left where it was (seekable files, and gzip's reader)."""
    start = f.tell()
    head = f.read(n)
    f.seek(start)
    return head


def _utf16_without_bom(head: bytes) -> bool:
    """ASCII text in UTF-16 has a NUL as every other byte; UTF-8 text has none."""
    return len(head) == 4 and (head[1] == head[3] == 0 or head[0] == head[2] == 0)


def _first_character(file: IO[bytes]) -> str:
    """The first character that is not white space or a byte-order mark ("" for none)."""
    file.seek(0)
    try:
        while chunk := file.read(4096):
            text = chunk.lstrip(b" \t\r\n").removeprefix(codecs.BOM_UTF8).lstrip(b" \t\r\n")
            if text:
                return chr(text[0]) if text[0] < 128 else ""
        return ""
    finally:
        file.seek(0)


def as_utf8(file: IO[bytes], name: str, encoding: str | None) -> tuple[IO[bytes], list[str]]:
    """The text `file` (decoded: no gzip, no UTF-16) as UTF-8: itself when it is UTF-8 and no
    `encoding` is given; else a new temporary file of it read as `encoding`, or as the encoding
    charset-normalizer finds in its non-ASCII lines (Book-Crossing's Latin-1, a Windows
    shop's cp1252), with a notice naming it. A file that is mostly UTF-8 with a few bad bytes
    stays as it is: those rows are named, as rows. CatalogError for an encoding the bytes do
    not decode in, or one Python does not know."""
    if encoding is not None:
        try:
            codec = codecs.lookup(encoding).name
        except LookupError:
            raise CatalogError([], f"--encoding {encoding!r}: no such encoding") from None
        if codec == "utf-8":
            return file, []
        said = f"{name}: read as {codec} (--encoding), converted to UTF-8"
    else:
        sample = _non_utf8_sample(file)
        if sample is None:
            return file, []
        matches = charset_normalizer.from_bytes(sample)
        best = matches.best()
        if best is None or codecs.lookup(best.encoding).name in ("utf-8", "ascii"):
            return file, []
        # a few accented letters read as well in several code pages (the same text, or text
        # as coherent): Windows' Western one, where it is among them, is the likeliest
        tied = [m for m in matches if (m.chaos, m.coherence) == (best.chaos, best.coherence)]
        western = any("cp1252" in m.could_be_from_charset for m in tied)
        found = "cp1252" if western else best.encoding
        codec = codecs.lookup(found).name
        said = (
            f"{name}: not UTF-8: read as {codec}, the encoding charset-normalizer finds in it, "
            "converted to UTF-8 (--encoding NAME names another)"
        )
    copy = tempfile.TemporaryFile()  # noqa: SIM115  # the snapshot's: closed by it
    try:
        file.seek(0)
        reader = codecs.getreader(codec)(file)  # strict
        while text := reader.read(_CHUNK):
            copy.write(text.encode("utf-8", "surrogatepass"))
    except UnicodeDecodeError as e:
        copy.close()
        raise CatalogError(
            [],
            f"{name}: not {codec} ({e.reason} at a byte {e.object[e.start : e.end]!r}); "
            "name its encoding: attend index --encoding NAME (ATTEND_CATALOG_ENCODING)",
        ) from None
    file.close()
    copy.seek(0)
    return copy, [said]


def _non_utf8_sample(file: IO[bytes]) -> bytes | None:
    """None when `file` is UTF-8, or UTF-8 in most of its non-ASCII lines (a UTF-8 file with a
    few damaged rows, which read as another encoding would garble every accent: its bad rows
    are named instead); else its lines that hold non-ASCII bytes, up to _SAMPLE bytes of them
    (what tells an encoding from another)."""
    file.seek(0)
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    valid = True
    try:
        while chunk := file.read(_CHUNK):
            decoder.decode(chunk)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        valid = False
    if valid:
        file.seek(0)
        return None
    file.seek(0)
    sample = bytearray()
    utf8 = other = 0
    while line := file.readline(_CHUNK):  # a line at most a chunk: one-line files too
        if not line.isascii():
            sample += line
            try:
                line.decode("utf-8")
                utf8 += 1
            except UnicodeDecodeError:
                other += 1
            if len(sample) >= _SAMPLE:
                break
    file.seek(0)
    return None if utf8 >= other else bytes(sample)
