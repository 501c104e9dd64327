"""The served index: one generation of the catalog, held for searching.

It holds the books (their columns, for the responses), the filter columns (the attention masks),
the lexical head's BM25 index, the catalog's author, series and subject names, and a
`KeyStore`, which answers the dense heads. The keys are either in this process, on its device
(`models.keys.LocalKeys`), or on the shards of a cluster (service/cluster/shards/router.py),
which the index
reaches through the same interface.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from indexer.boilerplate import Boilerplate
from indexer.book_columns import BookColumns
from indexer.filters import FilterColumns, Filters
from indexer.loaded_index import VALUE_FIELD, LoadedIndex
from models.device import pick_device
from models.heads import DenseHeads
from models.keys import DenseHeadSpec, LocalKeys
from service.engine.bm25_postings import RowMoves
from service.engine.catalog_names import CatalogNames
from service.engine.isbn_lookup import IsbnRows
from service.engine.lexical import LexicalIndex, LikeThisIndex, book_document, like_this_text
from service.engine.name_rows import NameRows
from service.engine.results import NamedBook
from service.engine.row_lists import nested, part_of

RANK_FIELD = "description"  # the field whose keys score a hit (`score` in a response)


class KeyStore(Protocol):
    """Where a served index's keys are, answering its dense heads."""

    @property
    def device(self) -> torch.device: ...

    @property
    def dim(self) -> int: ...

    def dense_heads(
        self, q: Tensor, heads: DenseHeadSpec, *, filters: Sequence[Filters], mask: Tensor | None
    ) -> DenseHeads:
        """The dense heads, (field, scale) each, for queries q: (B, d) for every head, or
        (Hd, B, d) one per head; masked by `mask`, the mask of `filters` (a store that holds
        no filter columns, the cluster's, sends the filters instead)."""
        ...

    def key_rows(self, rows: Sequence[int], fields: Sequence[str]) -> Tensor:
        """(F, R, d) float32 on the CPU: each field's keys of the catalog rows `rows`."""
        ...

    def unanswered(self) -> str | None:
        """Why a part of the keys does not answer now (a shard that is asked and is silent), or
        None. Blocks for a few seconds at most (/readyz asks it on its own thread)."""
        ...


def lexical_index(books: BookColumns, descriptions: Sequence[str | None] | None) -> LexicalIndex:
    """The lexical head's BM25 over the books' title, authors and (row-aligned `descriptions`,
    when given) description."""
    return LexicalIndex(_documents(books, descriptions), len(books))


def like_this_index(books: BookColumns, descriptions: Sequence[str | None] | None) -> LikeThisIndex:
    """The lexical head of a book as the query: BM25 over "<title>. <description>"."""
    return LikeThisIndex(_like_this_texts(books, descriptions), len(books))


# generators: the BM25 builds read them a chunk at a time, so no list of every book's text
def _documents(books: BookColumns, descriptions: Sequence[str | None] | None) -> Iterator[str]:
    return (
        book_document(title, authors, descriptions[i] if descriptions else None)
        for i, (title, authors) in enumerate(zip(books.titles, books.authors, strict=True))
    )


def _like_this_texts(
    books: BookColumns, descriptions: Sequence[str | None] | None
) -> Iterator[str]:
    return (
        like_this_text(title, descriptions[i] if descriptions else None)
        for i, title in enumerate(books.titles)
    )


class Stripped(Sequence[str | None]):
    """Row-aligned descriptions as the lexical heads read them: without their boilerplate
    sentences (indexer/boilerplate.py). Each is read once for both BM25 indexes: the ones it
    changed are kept, the others marked as read."""

    def __init__(self, descriptions: Sequence[str | None], boilerplate: Boilerplate):
        self._descriptions, self._boilerplate = descriptions, boilerplate
        self._read = np.zeros(len(descriptions), np.bool_)
        self._changed: dict[int, str | None] = {}

    def __len__(self) -> int:
        return len(self._descriptions)

    def __getitem__(self, i: int) -> str | None:  # type: ignore[override]
        text = self._descriptions[i]
        if not self._boilerplate:
            return text
        if self._read[i]:
            return self._changed.get(i, text)
        self._read[i] = True
        stripped = self._boilerplate.strip(text)
        if stripped != text:
            self._changed[i] = stripped
        return stripped


def row_moves(order: np.ndarray, before: int) -> RowMoves:
    """How the `before` rows of a generation become the next's, whose rows come from where
    `order` says (indexer/loaded_index.py `diff_order`: a row before, or `before` + a changed
    row's place in the diff)."""
    moved = order < before
    new_row = np.full(before, -1, np.int64)
    new_row[order[moved]] = np.flatnonzero(moved)
    return RowMoves(new_row, np.flatnonzero(~moved), len(order))


def known_or_nan(values: Sequence[float | None] | None, n: int) -> np.ndarray:
    """(N,) float64 a number of each book (how many readers rated it, their average rating),
    NaN where not known."""
    if values is None:
        return np.full(n, np.nan)
    return np.array([np.nan if v is None else v for v in values], np.float64)


def readers_of(counts: np.ndarray) -> Tensor | None:
    """(N,) float64 log(1 + readers) of each book (`counts`: NaN where not known), the readers'
    prior of similar books and recommendations (service/engine/book_attention.py); a book
    without a count gets the median of those with one (unknown is not unread). None when no
    book has a count."""
    known = ~np.isnan(counts)
    if not known.any():
        return None
    return torch.from_numpy(np.where(known, counts, np.median(counts[known]))).log1p()


class ServedIndex:
    """One generation of the catalog, ready to search: books, filter columns, BM25 and keys."""

    names: CatalogNames
    filters: FilterColumns
    rating_counts: np.ndarray  # (N,) float64, NaN where not known
    isbns: IsbnRows  # each book's ISBNs, for a reader who types one
    ratings: np.ndarray  # (N,) float64 each book's readers' average rating, NaN where not known
    boilerplate: Boilerplate  # sentences the lexical heads and explanations leave out

    def __init__(
        self,
        index: LoadedIndex,
        keys: KeyStore,
        *,
        descriptions: Sequence[str | None] | None = None,
        subjects: Sequence[Sequence[str]] | None = None,
        series: Sequence[Sequence[str]] | None = None,
        rating_counts: Sequence[int | None] | None = None,
        isbns: Sequence[Sequence[str]] | None = None,
        ratings: Sequence[float | None] | None = None,
        publishers: Sequence[Sequence[str]] | None = None,
        follows: tuple[ServedIndex, RowMoves] | None = None,
        boilerplate: Boilerplate | None = None,
    ):
        """`descriptions`, `subjects`, `series` (those a row names, beside its title's
        marker), `rating_counts`, `isbns` (the texts of their metadata ISBN fields), `ratings`
        (their average ratings), `publishers`: the books' (None: none has one), or
        with `follows`, the changed books' only, in `moves.changed` order. `follows`: the
        served index of the generation before and how its rows moved to these: its BM25
        indexes, names and rating counts are then moved, the changed rows' made from their
        books (the same as built whole).

        What a swap costs (`follows`): O(changed) tokenizing and folding, O(N) numpy to move
        the postings and keys, and O(N) passes over lists to index the names again (each
        author's, series' and heading's rows: service/engine/catalog_names.py).

        `boilerplate`: the generation's (indexer/boilerplate_rows.py), left out of the
        descriptions the lexical heads read. It is written with the generation, and a book
        that reads it otherwise than the generation before did is a changed row of the diff:
        a swap reads the same as a whole build."""
        self.books = index.books
        self.model = index.model
        self.generation = index.generation  # the snapshot of the catalog these keys are
        self.keys = keys
        self.boilerplate = boilerplate or Boilerplate()
        read = descriptions and Stripped(descriptions, self.boilerplate)
        if follows is None:
            self.lexical = lexical_index(index.books, read)
            self.like_this = like_this_index(index.books, read)
            rows = NameRows.of(
                index.books.titles,
                index.books.authors,
                descriptions,
                subjects=subjects,
                series=series,
                publishers=publishers,
            )
            self.rating_counts = known_or_nan(rating_counts, len(index))
            self.isbns = IsbnRows.of(index.books.ids, isbns)
            self.ratings = known_or_nan(ratings, len(index))
        else:
            previous, moves = follows
            changed = index.books.take(moves.changed.tolist())
            self.lexical = LexicalIndex.following(
                previous.lexical, moves, _documents(changed, read)
            )
            self.like_this = LikeThisIndex.following(
                previous.like_this, moves, _like_this_texts(changed, read)
            )
            rows = previous.names.rows.following(
                moves,
                NameRows.of(
                    changed.titles,
                    changed.authors,
                    descriptions,
                    subjects=subjects,
                    series=series,
                    publishers=publishers,
                ),
            )
            self.rating_counts = previous.rating_counts[moves.sources.clip(0)]
            self.rating_counts[moves.changed] = known_or_nan(rating_counts, len(changed))
            self.isbns = previous.isbns.following(moves, IsbnRows.of(changed.ids, isbns))
            self.ratings = previous.ratings[moves.sources.clip(0)]
            self.ratings[moves.changed] = known_or_nan(ratings, len(changed))
        self.names = CatalogNames(rows, self.like_this.word_rows, index.books.authors)
        self.filters = FilterColumns(
            index.books,
            device=keys.device,
            follows=None if follows is None else (previous.filters, moves.sources),
            named=self.names.rows_named,
        )
        self.readers = readers_of(self.rating_counts)

    def arrays(self, keys: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """This index as arrays, its served form (service/engine/served_form.py): the books,
        both BM25 indexes, the names, the rating counts, and `keys` (field → (N, d), the
        loaded index's, stored (d, N))."""
        out = {
            **nested("books", self.books.arrays()),
            **nested("lexical", self.lexical.arrays()),
            **nested("like_this", self.like_this.arrays()),
            **nested("names", self.names.arrays()),
            **nested("keys", {field: k.T for field, k in keys.items()}),
        }
        out["rating_counts"], out["ratings"] = self.rating_counts, self.ratings
        out["boilerplate"] = np.array(sorted(self.boilerplate.keys), dtype=np.str_)
        return out | self.isbns.arrays()

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, np.ndarray],
        place: Callable[[LoadedIndex], KeyStore],
        *,
        model: str,
        generation: int,
    ) -> ServedIndex:
        """The served index `arrays()` gave, its keys placed by `place`: nothing tokenized,
        folded or parsed again. ValueError for arrays that do not hold together."""

        books = BookColumns.from_arrays(part_of(arrays, "books"))
        # (N, d) views of the (d, N) files
        keys = {field: k.T for field, k in part_of(arrays, "keys").items()}
        if any(k.shape[0] != len(books) for k in keys.values()):
            raise ValueError("keys of another number of books than the books'")
        index = LoadedIndex(books, keys, model, generation, values=keys.get(VALUE_FIELD))
        served = cls.__new__(cls)
        served.books, served.model, served.generation = books, model, generation
        served.keys = place(index)
        served.lexical = LexicalIndex.from_arrays(part_of(arrays, "lexical"))
        served.like_this = LikeThisIndex.from_arrays(part_of(arrays, "like_this"))
        served.names = CatalogNames.from_arrays(
            part_of(arrays, "names"), served.like_this.word_rows, books.authors
        )
        served.filters = FilterColumns(
            books, device=served.keys.device, named=served.names.rows_named
        )
        served.rating_counts = np.array(arrays["rating_counts"], np.float64)
        served.readers = readers_of(served.rating_counts)
        served.isbns = IsbnRows.from_arrays(arrays, len(books))
        served.ratings = np.array(arrays["ratings"], np.float64)
        served.boilerplate = Boilerplate.of(np.asarray(arrays["boilerplate"]).tolist())
        sizes = {len(served.lexical), served.like_this.size, len(served.names.works.work)}
        if sizes | {len(served.rating_counts), len(served.ratings)} != {len(books)}:
            raise ValueError("parts of other numbers of books than the books'")
        return served

    @classmethod
    def local(
        cls,
        index: LoadedIndex,
        *,
        device: str = "auto",
        key_dtype: str = "auto",
        chunk_size: int | None = None,
        descriptions: Sequence[str | None] | None = None,
        subjects: Sequence[Sequence[str]] | None = None,
        series: Sequence[Sequence[str]] | None = None,
        rating_counts: Sequence[int | None] | None = None,
        isbns: Sequence[Sequence[str]] | None = None,
        ratings: Sequence[float | None] | None = None,
        publishers: Sequence[Sequence[str]] | None = None,
    ) -> ServedIndex:
        """The index with its keys on this process's device (`pick_device(device)`), as
        service/engine/startup.py `LocalPlacement` places them (tests and benchmarks)."""
        keys = LocalKeys(
            index.keys, device=pick_device(device), key_dtype=key_dtype, chunk_size=chunk_size
        )
        return cls(
            index,
            keys,
            descriptions=descriptions,
            subjects=subjects,
            series=series,
            rating_counts=rating_counts,
            isbns=isbns,
            ratings=ratings,
            publishers=publishers,
        )

    def __len__(self) -> int:
        return len(self.books)

    @property
    def device(self) -> torch.device:
        return self.keys.device

    @property
    def dim(self) -> int:
        return self.keys.dim

    def named_books(self, rows: Sequence[int]) -> tuple[NamedBook, ...]:
        """The books of catalog rows `rows`, by id and title."""
        return tuple(NamedBook(self.books.ids[r], self.books.titles[r]) for r in rows)

    def row_of(self, book_id: str) -> int | None:
        """The row of `book_id`, None when it is not in the index."""
        return self.filters.row_of(book_id)  # the filter columns map ids to rows already

    def host_index(self) -> LoadedIndex:
        """This index's rows on the host, for `loaded_index.apply_diff` (local keys only)."""
        if not isinstance(self.keys, LocalKeys):
            raise TypeError("the keys are not in this process: reload the index instead")
        return LoadedIndex(
            books=self.books, keys=self.keys.host(), model=self.model, generation=self.generation
        )
