"""Reading a JSON array of books (`[{"title": …}, …]`, a `.json` export, or a `.jsonl` that is
really one indented array) element by element, each with a bounded amount of memory.

An element is decoded where it starts (`json.JSONDecoder.raw_decode`) from a buffer that grows
a chunk at a time until the element is whole, up to `limit` bytes. Its line is the line it
starts on. Broken JSON cannot be read past (where the next element starts is unknown), so it is
one error with its line, and the end of the read: not one "broken JSON" per line as a JSONL
reader would report each line of an indented array.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from typing import IO, Any

from indexer.catalog.jsonl_records import CHUNK, decode_at, too_long
from indexer.catalog.rows import RowError, kind

_SPACE = " \t\r\n"


class _Text:
    """The file decoded as UTF-8 a chunk at a time: `buf[pos:]` not yet read, `line` of `pos`."""

    def __init__(self, f: IO[bytes]):
        self.f = f
        self.decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf = ""
        self.pos = 0
        self.line = 1
        self.eof = False

    def more(self) -> bool:
        """Read a chunk more; False at the end of the file. UnicodeDecodeError for bad bytes."""
        if self.eof:
            return False
        raw = self.f.read(CHUNK)
        self.eof = not raw
        text = self.decoder.decode(raw, final=self.eof)
        if self.pos > CHUNK:  # drop what was read: the buffer holds about one element
            self.buf, self.pos = self.buf[self.pos :], 0
        self.buf += text.removeprefix("\ufeff") if self.line == 1 and not self.buf else text
        return not self.eof or bool(text)

    def skip_space(self) -> str:
        """The next character that is not white space ("" at the end), `pos` moved to it."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _SPACE:
                self.line += self.buf[self.pos] == "\n"
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def advance(self, end: int) -> None:
        self.line += self.buf.count("\n", self.pos, end)
        self.pos = end


def json_array_rows(f: IO[bytes], limit: int) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """(line, the object) for each element of the file's JSON array, or (line, why it is not
    one); an error the array cannot be read past is the last item."""
    text = _Text(f)
    try:
        yield from _elements(text, limit)
    except UnicodeDecodeError as e:
        yield text.line, f"invalid UTF-8 in the JSON array ({e.reason}): save the file as UTF-8"


def _elements(text: _Text, limit: int) -> Iterator[tuple[int, dict[str, Any] | str]]:
    first = text.skip_space()
    if first != "[":
        found = f"{first!r}" if first else "nothing"
        yield text.line, f"expected a JSON array ('['), found {found}"
        return
    text.pos += 1
    after_value = False
    while True:
        ch = text.skip_space()
        if ch == "]":
            text.pos += 1
            if text.skip_space():
                yield text.line, "text after the end of the JSON array (its closing ']')"
            return
        if not ch:
            yield text.line, "the JSON array ends without its closing ']'"
            return
        if after_value:
            if ch != ",":
                yield text.line, f"broken JSON in the JSON array: expected ',' or ']', found {ch!r}"
                return
            text.pos += 1
            text.skip_space()
        line = text.line
        try:
            obj, end = _decode(text, limit)
        except _StopError as e:
            yield line, str(e)
            return
        except RowError as e:
            yield line, str(e)
            return
        text.advance(end)
        after_value = True
        yield line, obj if isinstance(obj, dict) else f"expected a JSON object, got {kind(obj)}"


class _StopError(Exception):
    """Why the array cannot be read on."""


def _decode(text: _Text, limit: int) -> tuple[Any, int]:
    """The element at `text.pos`, reading on until it is whole or `limit` is passed."""
    while True:
        try:
            obj, end = decode_at(text.buf, text.pos)
        except json.JSONDecodeError as e:
            if len(text.buf) - text.pos > limit:
                raise _StopError(too_long(limit) + ": the rest of the file is not read") from None
            if text.more():
                continue  # the element goes on past what was read
            line = text.line + text.buf.count("\n", text.pos, e.pos)
            raise _StopError(
                f"broken JSON in the JSON array on line {line}: {e.msg}; the rest of the file "
                "is not read"
            ) from None
        if end == len(text.buf) and text.more():
            continue  # a number may go on in the next chunk
        if end - text.pos > limit:
            raise _StopError(too_long(limit) + ": the rest of the file is not read")
        return obj, end
