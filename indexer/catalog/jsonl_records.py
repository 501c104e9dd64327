"""Reading JSONL: one JSON object a line, each read with a bounded amount of memory, and JSON
held to what the databases store (finite numbers, 64-bit integers, `MAX_DEPTH` levels)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from typing import IO, Any

from indexer.catalog.rows import INT_MAX, INT_MIN, HugeInt, RowError, clip, kind

MAX_DEPTH = 32  # levels of a row's JSON, the row itself being 1 (255 broke /books/{id})
CHUNK = 1024 * 1024


def too_long(limit: int) -> str:
    return f"row longer than {limit:,} bytes (ATTEND_MAX_ROW_BYTES)"


def lines(f: IO[bytes], limit: int) -> Iterator[bytes | None]:
    """The file's lines (with their b"\\n"), each read with at most `limit` + 1 bytes in memory;
    None for a line longer than `limit`, whose rest is skipped."""
    while raw := f.readline(limit + 1):
        if len(raw) > limit and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = f.readline(CHUNK)
            yield None
            continue
        yield raw


def jsonl_rows(f: IO[bytes], limit: int) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """(line, the object) for each non-blank line, or (line, why it is not one)."""
    for line, raw in enumerate(lines(f, limit), start=1):
        if raw is None:
            yield line, too_long(limit)
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield line, f"invalid UTF-8 at byte {e.start}"
            continue
        if line == 1:
            text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
        if not text.strip():
            continue
        try:
            obj = _loads(text)
        except json.JSONDecodeError as e:
            yield line, f"broken JSON: {e.msg} at column {e.colno}"
            continue
        except RowError as e:
            yield line, str(e)
            continue
        if not isinstance(obj, dict):
            yield line, f"expected a JSON object, got {kind(obj)}"
            continue
        yield line, obj


def _loads(text: str) -> Any:
    try:
        obj = json.loads(
            text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_no_constant
        )
    except RecursionError:  # CPython's decoder recurses once per level
        raise RowError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    if _depth(obj) > MAX_DEPTH:
        raise RowError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return obj


def _parse_int(digits: str) -> int | HugeInt:
    # checked before int(): CPython refuses over 4,300 digits with a ValueError, not a row error
    if len(digits) > 20 or not INT_MIN <= (value := int(digits)) <= INT_MAX:
        return HugeInt(digits)
    return value


def _parse_float(digits: str) -> float:
    value = float(digits)
    if not math.isfinite(value):
        raise RowError(f"number {clip(digits)} out of the floating-point range")
    return value


def _no_constant(name: str) -> float:
    raise RowError(f"{name} is not a JSON number (the databases cannot store it)")


def _depth(obj: Any) -> int:
    """Levels of nested objects and lists, without recursion (a top-level object is 1)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            children: Iterable[Any] = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            return level
        stack.extend((child, level + 1) for child in children)
    return deepest


_DECODER = json.JSONDecoder(
    parse_int=_parse_int, parse_float=_parse_float, parse_constant=_no_constant
)


def decode_at(text: str, pos: int) -> tuple[Any, int]:
    """The JSON value that starts at `text[pos]` and where it ends, held to what the databases
    store as `_loads` holds a line: json.JSONDecodeError for broken JSON, RowError for a value
    the databases cannot store."""
    try:
        obj, end = _DECODER.raw_decode(text, pos)
    except RecursionError:
        raise RowError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    if _depth(obj) > MAX_DEPTH:
        raise RowError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return obj, end
