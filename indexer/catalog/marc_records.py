"""Reading MARC as library systems export it (Koha, Evergreen, Alma, FOLIO, Sierra): binary
MARC21 (ISO 2709, `.mrc`) and MARCXML, each record made a catalog row (marc_fields.py) and
numbered by its position in the file.

Binary records are cut at their terminator (1D) and each parsed by pymarc on its own, so a
record whose length or directory is wrong is reported and the next one is read; MARC-8 text is
converted to Unicode by pymarc, and a record whose leader says MARC-8 but whose bytes are valid
UTF-8 (a common export fault) is read as UTF-8. MARCXML is parsed a record at a time
(`iterparse`, what was read dropped), so memory stays about one record whatever the file;
broken XML cannot be read past, so it is one error and the end of the read.
"""

from __future__ import annotations

import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from pymarc import Field, Indicators, Leader, Record, Subfield

from indexer.catalog.jsonl_records import CHUNK, too_long
from indexer.catalog.marc_fields import marc_row

_END = b"\x1d"  # ISO 2709's record terminator
_BLANK = b"\r\n\t "  # what some exports put between records


@dataclass
class MarcStats:
    """How the records were read, for the run's notices."""

    records: int = 0
    marc8: int = 0  # converted from MARC-8
    utf8_despite_leader: int = 0  # leader 09 said MARC-8, the bytes were UTF-8

    def notices(self, name: str, fmt: str) -> list[str]:
        shown = {"marc": "MARC21 (ISO 2709)", "marcxml": "MARCXML"}[fmt]
        out = [f"{name}: read as {shown}: {self.records:,} record(s)"]
        if self.marc8:
            out.append(f"{name}: {self.marc8:,} record(s) in MARC-8, converted to Unicode")
        if self.utf8_despite_leader:
            out.append(
                f"{name}: {self.utf8_despite_leader:,} record(s) whose leader (position 09) "
                "says MARC-8 hold UTF-8: read as UTF-8"
            )
        return out


def marc21_rows(
    f: IO[bytes], limit: int, stats: MarcStats
) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """(position, the record as a row) for each record, or (position, why it is not one)."""
    for position, chunk in enumerate(_records(f, limit), start=1):
        stats.records += 1
        if chunk is None:
            yield position, too_long(limit)
            continue
        yield position, _parsed(chunk, stats)


def _records(f: IO[bytes], limit: int, *, chunk: int = CHUNK) -> Iterator[bytes | None]:
    """Each record's bytes with its terminator, at most `limit` + `chunk` of them in memory;
    None for a longer one, whose rest is skipped."""
    buf, pos, skipping = b"", 0, False
    while True:
        data = f.read(chunk)
        buf = buf[pos:] + data
        pos = 0
        while (end := buf.find(_END, pos)) >= 0:
            one = buf[pos : end + 1].lstrip(_BLANK)
            pos = end + 1
            if skipping:
                skipping = False
            elif len(one) > limit:
                yield None
            elif one != _END:
                yield one
        if len(buf) - pos > limit and not skipping:
            yield None
            skipping = True
        if skipping:
            buf, pos = b"", 0
        if not data:
            if not skipping and (rest := buf[pos:].strip(_BLANK)):
                yield rest  # no terminator: pymarc names what is wrong with it
            return


def _parsed(chunk: bytes, stats: MarcStats) -> dict[str, Any] | str:
    marc8 = chunk[9:10] == b" "
    force_utf8 = marc8 and not chunk.isascii() and _is_utf8(chunk)
    try:
        # pymarc raises a dozen kinds of error (and UnicodeDecodeError, ValueError) for one
        # malformed record: each is that record's problem, not the file's
        record = Record(chunk, to_unicode=True, force_utf8=force_utf8, utf8_handling="strict")
    except Exception as e:
        control = _control_of(chunk)
        where = f"001 {control!r}: " if control else ""
        return f"{where}not a readable MARC record ({type(e).__name__}{f': {e}' if str(e) else ''})"
    if force_utf8:
        stats.utf8_despite_leader += 1
    elif marc8 and not chunk.isascii():
        stats.marc8 += 1
    return _nfc(marc_row(record))


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _control_of(chunk: bytes) -> str | None:
    """001 of a record pymarc cannot read, where its directory can still be read."""
    try:
        base = int(chunk[12:17])
        directory = chunk[24 : base - 1]
        for i in range(0, len(directory) - 11, 12):
            if directory[i : i + 3] == b"001":
                length, start = int(directory[i + 3 : i + 7]), int(directory[i + 7 : i + 12])
                value = chunk[base + start : base + start + length].rstrip(b"\x1e")
                return value.decode("ascii", "replace").strip() or None
    except ValueError:
        pass
    return None


def marcxml_rows(
    f: IO[bytes], limit: int, stats: MarcStats
) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """(position, the record as a row) for each MARCXML record (a `record` holding a leader or
    fields, in the MARC namespace or none: a collection, one record, an OAI-PMH response), or
    (position, why it is not one)."""
    position = 0
    root: ET.Element | None = None
    try:
        for event, elem in ET.iterparse(f, events=("start", "end")):
            if root is None:
                root = elem
            if event != "end" or _local(elem.tag) != "record" or not _is_marc(elem):
                continue
            position += 1
            stats.records += 1
            if _size(elem) > limit:
                yield position, too_long(limit)
            else:
                record = _from_xml(elem)
                yield (
                    position,
                    (_nfc(marc_row(record)) if record is not None else "a record without fields"),
                )
            root.clear()  # the records read: memory stays about one record
    except ET.ParseError as e:
        line = e.position[0]
        yield (
            position + 1,
            (
                f"broken XML at line {line}: {e.msg if hasattr(e, 'msg') else e}; the records "
                "after it cannot be read"
            ),
        )
    if position == 0 and root is not None:
        yield 1, f"no MARCXML record in the file (its root element is {_local(root.tag)!r})"


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _is_marc(elem: ET.Element) -> bool:
    return any(_local(c.tag) in ("leader", "controlfield", "datafield") for c in elem)


def _size(elem: ET.Element) -> int:
    return sum(len(e.text or "") + len(e.attrib) * 8 for e in elem.iter())


def _from_xml(elem: ET.Element) -> Record | None:
    record = Record()
    for child in elem:
        name, tag = _local(child.tag), child.get("tag", "")
        if name == "leader":
            text = (child.text or "").ljust(24)[:24]
            record.leader = Leader(text)
        elif name == "controlfield":
            record.fields.append(Field(tag=tag, data=child.text or ""))
        elif name == "datafield":
            subfields = [
                Subfield(code=s.get("code", ""), value=s.text or "")
                for s in child
                if _local(s.tag) == "subfield"
            ]
            indicators = Indicators(child.get("ind1", " ")[:1], child.get("ind2", " ")[:1])
            record.fields.append(Field(tag=tag, indicators=indicators, subfields=subfields))
    return record if record.fields else None


def _nfc(row: dict[str, Any]) -> dict[str, Any]:
    """The row's text composed (NFC): MARC-8 and many MARC records write "é" as "e" and a
    combining accent."""

    def norm(value: Any) -> Any:
        if isinstance(value, str):
            return unicodedata.normalize("NFC", value)
        if isinstance(value, list):
            return [norm(v) for v in value]
        if isinstance(value, dict):
            return {k: norm(v) for k, v in value.items()}
        return value

    return {k: norm(v) for k, v in row.items()}
