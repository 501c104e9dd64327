"""The served index's compact string columns and id lookup (indexer/text_column.py) behave as
the lists and dict they replace, on real text (accents, emoji, empty strings)."""

from __future__ import annotations

import pickle

import pytest

from indexer.book_columns import BookColumns
from indexer.text_column import RowLookup, TextColumn

WORDS = ["Dune", "", "Les Misérables", "東京物語", "🐉 dragons", "Dune"]


def test_a_column_reads_back_as_the_list_it_was_made_of() -> None:
    column = TextColumn.of(WORDS)
    assert len(column) == len(WORDS)
    assert list(column) == WORDS
    assert [column[i] for i in range(len(WORDS))] == WORDS
    assert column[-1] == WORDS[-1]
    assert column == WORDS and column != WORDS[:-1]
    with pytest.raises(IndexError):
        column[len(WORDS)]


@pytest.mark.parametrize(
    "part", [slice(1, 4), slice(0, 0), slice(3, None), slice(None, -2), slice(0, 6, 2), slice(5, 2)]
)
def test_slices_and_sums_are_the_lists(part: slice) -> None:
    column = TextColumn.of(WORDS)
    assert list(column[part]) == WORDS[part]
    assert list(column[part] + column) == WORDS[part] + WORDS
    assert list(WORDS[part] + column) == WORDS[part] + WORDS  # a list on the left: __radd__


def test_a_column_survives_pickling_as_the_shards_send_it() -> None:
    column = TextColumn.of(WORDS)
    assert pickle.loads(pickle.dumps(column)) == column


def test_book_columns_hold_ids_and_titles_compactly_whatever_they_are_given() -> None:
    books = BookColumns(
        ids=["a", "b", "c"],
        titles=["Uno", "Dos", "Très"],
        authors=[["X"], [], ["Y", "Z"]],
        years=[1999, None, 2001],
        languages=["en", None, "fr"],
    )
    assert isinstance(books.ids, TextColumn) and isinstance(books.titles, TextColumn)
    assert books.row(2).title == "Très"
    taken = books.take([2, 0])
    assert list(taken.ids) == ["c", "a"] and taken.authors == [["Y", "Z"], ["X"]]
    assert list((books.slice(1, 3) + books.slice(0, 1)).titles) == ["Dos", "Très", "Uno"]


def test_the_lookup_finds_every_row_and_nothing_else() -> None:
    ids = [f"OL{i}W" for i in range(5000)]
    lookup = RowLookup(TextColumn.of(ids))
    assert all(lookup.get(book_id) == i for i, book_id in enumerate(ids))
    assert lookup.get("OL5000W") is None and lookup.get("") is None


def test_equal_hashes_are_told_apart_by_the_values() -> None:
    # two ids may hash alike by chance: the lookup then compares the ids themselves
    class Same(str):
        def __hash__(self) -> int:
            return 7

    ids = [Same("a"), Same("b"), Same("c")]
    lookup = RowLookup(ids)
    assert [lookup.get(Same(v)) for v in "abc"] == [0, 1, 2]
    assert lookup.get(Same("d")) is None
