"""The served index: one generation of the catalog, held for searching.

It holds the books (their columns, for the responses), the filter columns (the attention masks),
the lexical head's BM25 index, the catalog's author, series and subject names, and a
`KeyStore`, which answers the dense heads. The keys are either in this process, on its device
(`LocalKeys`), or on the shards of a cluster (service/cluster/router.py), which the index
reaches through the same interface.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from indexer.book_columns import BookColumns
from indexer.loaded_index import LoadedIndex
from models import cpu_blas
from models.device import pick_device
from models.heads import DenseHead, DenseHeads, LocalDenseHeads
from service.engine.catalog_names import CatalogNames
from service.engine.filters import FilterColumns, Filters
from service.engine.lexical import LexicalIndex, book_document

logger = logging.getLogger(__name__)

RANK_FIELD = "description"  # the field whose keys score a hit (`score` in a response)
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DenseHeadSpec = Sequence[tuple[str, float]]  # a query's dense heads: (field, scale) each


def key_dtype_for(device: torch.device, preference: str) -> torch.dtype:
    """`auto`: float16 on CUDA (half the bytes to stream; scores still accumulate in fp32),
    float32 on the CPU, which has no fast half-precision matrix product."""
    if preference == "auto":
        return torch.float16 if device.type == "cuda" else torch.float32
    return _DTYPES[preference]


def per_head(q: Tensor, heads: int) -> Tensor:
    """(Hd, B, d): a search's one query block q (B, d) for each of `heads` dense heads, or q
    itself when it already has one block per head (books as queries: each head its own key)."""
    if q.dim() == 3:
        if q.shape[0] != heads:
            raise ValueError(f"{q.shape[0]} query blocks for {heads} dense heads")
        return q
    return q.expand(heads, *q.shape)


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


class LocalKeys:
    """Every field's keys on this process's device, rows [offset, offset + N) of a catalog."""

    def __init__(
        self,
        keys: dict[str, np.ndarray],
        *,
        device: torch.device,
        key_dtype: str = "auto",
        chunk_size: int | None = None,
        offset: int = 0,
    ):
        dtype = key_dtype_for(device, key_dtype)
        # Stored (d, N) and used through their (N, d) transpose view: q Kᵀ then streams memory
        # in order, 1.8x faster at B = 1 on the CPU than row-major keys. The store loads them in
        # that layout, so on the CPU in fp32 this copies nothing.
        self.by_field = {
            f: torch.from_numpy(k).to(device, dtype).T.contiguous().T  # (N, d)
            for f, k in keys.items()
        }
        self.device, self.dtype = device, dtype
        self.chunk_size, self.offset = chunk_size, offset
        self.size = len(next(iter(keys.values()))) if keys else 0
        if device.type == "cpu" and dtype == torch.float32:
            cpu_blas.blas()  # measured once per process: at start-up, not in the first search

    @property
    def dim(self) -> int:
        return int(self.by_field[RANK_FIELD].shape[1])

    def dense_heads(
        self,
        q: Tensor,
        heads: DenseHeadSpec,
        *,
        filters: Sequence[Filters] = (),
        mask: Tensor | None,
    ) -> LocalDenseHeads:
        del filters  # the mask says it here
        qs = per_head(q.to(self.device), len(heads))
        return LocalDenseHeads(
            [
                DenseHead(qs[h], self.by_field[field], scale)
                for h, (field, scale) in enumerate(heads)
            ],
            size=self.size,
            mask=mask,
            chunk_size=self.chunk_size,
            offset=self.offset,
        )

    def key_rows(self, rows: Sequence[int], fields: Sequence[str]) -> Tensor:
        index = torch.tensor([r - self.offset for r in rows], dtype=torch.long, device=self.device)
        return torch.stack([self.by_field[f][index].float().cpu() for f in fields])

    def host(self) -> dict[str, np.ndarray]:
        """The keys on the host in float32: views of the tensors themselves for fp32 keys on the
        CPU ((N, d) arrays in column-major order), a copy otherwise."""
        return {f: k.to("cpu", torch.float32).numpy() for f, k in self.by_field.items()}


def lexical_index(books: BookColumns, descriptions: Sequence[str | None] | None) -> LexicalIndex:
    """The lexical head's BM25 over the books' title, authors and (row-aligned `descriptions`,
    when given) description; a book's topic terms come from its description (its title
    without one)."""
    texts = [(descriptions[i] if descriptions else None) or t for i, t in enumerate(books.titles)]
    return LexicalIndex(
        [
            book_document(title, authors, descriptions[i] if descriptions else None)
            for i, (title, authors) in enumerate(zip(books.titles, books.authors, strict=True))
        ],
        topics=texts,
    )


class ServedIndex:
    """One generation of the catalog, ready to search: books, filter columns, BM25 and keys."""

    def __init__(
        self,
        index: LoadedIndex,
        keys: KeyStore,
        *,
        descriptions: Sequence[str | None] | None = None,
        subjects: Sequence[Sequence[str]] | None = None,
    ):
        self.books = index.books
        self.model = index.model
        self.generation = index.generation  # the snapshot of the catalog these keys are
        self.keys = keys
        self.lexical = lexical_index(index.books, descriptions)
        self.names = CatalogNames(
            index.books.titles, index.books.authors, descriptions, subjects=subjects
        )
        self.filters = FilterColumns(index.books, device=keys.device)

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
    ) -> ServedIndex:
        """The index with its keys on this process's device (`pick_device(device)`)."""
        t0 = time.perf_counter()
        keys = LocalKeys(
            index.keys, device=pick_device(device), key_dtype=key_dtype, chunk_size=chunk_size
        )
        served = cls(index, keys, descriptions=descriptions, subjects=subjects)
        logger.info(
            "loaded %d books × %d keys (%s) d=%d %s on %s in %.2f s",
            len(served),
            len(keys.by_field),
            ", ".join(keys.by_field),
            keys.dim if len(served) else 0,
            str(keys.dtype).removeprefix("torch."),
            keys.device,
            time.perf_counter() - t0,
        )
        return served

    def __len__(self) -> int:
        return len(self.books)

    @property
    def device(self) -> torch.device:
        return self.keys.device

    @property
    def dim(self) -> int:
        return self.keys.dim

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
