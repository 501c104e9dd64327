"""The catalog held in memory for the attention core: keys and values on the device, the few
book fields the filters need, and filters turned into attention masks."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import Tensor

from indexer.store import LoadedIndex
from models import cpu_blas
from models.attention import Attention, attend
from models.device import pick_device
from models.heads import DenseHead, DenseHeads, LocalDenseHeads
from service.lexical import LexicalIndex, book_document

logger = logging.getLogger(__name__)


RANK_FIELD = "description"  # the field whose keys rank a search
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def key_dtype_for(device: torch.device, preference: str) -> torch.dtype:
    """`auto`: float16 on CUDA (half the bytes to stream; scores still accumulate in fp32),
    float32 on the CPU, which has no fast half-precision matrix product."""
    if preference == "auto":
        return torch.float16 if device.type == "cuda" else torch.float32
    return _DTYPES[preference]


@dataclass(frozen=True)
class Filters:
    """Which books a query may attend to. Text matches are case-insensitive."""

    author: str | None = None  # substring of any author's name
    year_min: int | None = None  # inclusive; books without a year are left out
    year_max: int | None = None
    language: str | None = None  # the catalog's language code, exactly
    exclude: frozenset[str] = frozenset()  # ids left out (the books a similar query starts from)

    @property
    def active(self) -> bool:
        return bool(self.exclude) or any(
            v is not None for v in (self.author, self.year_min, self.year_max, self.language)
        )


@dataclass(frozen=True)
class Hit:
    row: int
    score: float  # raw q·k
    weight: float  # softmax weight among the matched books


@dataclass(frozen=True)
class Ranking:
    hits: list[Hit]  # best first
    matched: int  # books the filters left in the softmax


def per_head(q: Tensor, heads: int) -> Tensor:
    """(Hd, B, d): a search's one query block q (B, d) for each of `heads` dense heads, or q
    itself when it already has one block per head (books as queries: each head its own key)."""
    if q.dim() == 3:
        if q.shape[0] != heads:
            raise ValueError(f"{q.shape[0]} query blocks for {heads} dense heads")
        return q
    return q.expand(heads, *q.shape)


def lexical_index(
    index: LoadedIndex, descriptions: Sequence[str | None] | None = None
) -> LexicalIndex:
    """The lexical head's BM25 over the index's rows, built with the ranker so that it follows
    the index: title, authors and (row-aligned `descriptions`, when given) description."""
    return LexicalIndex(
        [
            book_document(title, authors, descriptions[i] if descriptions else None)
            for i, (title, authors) in enumerate(zip(index.titles, index.authors, strict=True))
        ]
    )


class Ranker:
    """Exact attention over the whole catalog, loaded once at start-up."""

    def __init__(
        self,
        index: LoadedIndex,
        *,
        device: str = "auto",
        key_dtype: str = "auto",
        chunk_size: int | None = None,
        descriptions: Sequence[str | None] | None = None,
    ):
        t0 = time.perf_counter()
        self.lexical = lexical_index(index, descriptions)
        self.device = pick_device(device)
        self.model = index.model
        self.generation = index.generation  # the snapshot of the catalog these keys are
        self.ids = index.ids
        self.titles = index.titles
        self.authors = index.authors
        self.years = index.years
        self.languages = index.languages
        self._rows = {book_id: i for i, book_id in enumerate(index.ids)}
        dtype = key_dtype_for(self.device, key_dtype)
        # Every field's keys sit on the device. They are stored (d, N) and used through their
        # (N, d) transpose view: q Kᵀ then streams memory in order, 1.8x faster at B=1 on the
        # CPU than row-major keys. The store loads them in that layout, so on the CPU in fp32
        # this line copies nothing.
        self.keys_by_field = {
            f: torch.from_numpy(k).to(self.device, dtype).T.contiguous().T  # (N, d)
            for f, k in index.keys.items()
        }
        self.keys = self.keys_by_field[RANK_FIELD]  # (N, d)
        shared = [f for f, k in index.keys.items() if index.values is k]
        self.values = (  # (N, d), shared with a field's keys when the index made them equal
            self.keys_by_field[shared[0]]
            if shared
            else torch.from_numpy(index.values).to(self.device, dtype)
        )
        self.chunk_size = chunk_size
        self._prepare_filters(index)
        if self.device.type == "cpu" and dtype == torch.float32:
            cpu_blas.backend()  # measured once per process: at start-up, not in the first search
        logger.info(
            "loaded %d books × %d keys (%s) d=%d %s on %s in %.2f s",
            len(self),
            len(self.keys_by_field),
            ", ".join(self.keys_by_field),
            self.dim,
            str(dtype).removeprefix("torch."),
            self.device,
            time.perf_counter() - t0,
        )

    def _prepare_filters(self, index: LoadedIndex) -> None:
        """Filter columns, prepared once: a year of NaN never satisfies a bound."""
        self._year = torch.tensor(
            [math.nan if y is None else y for y in index.years], dtype=torch.float64
        )  # (N,)
        self._language = [(lang or "").casefold() for lang in index.languages]
        self._author = ["\n".join(a).casefold() for a in index.authors]
        self._mask = lru_cache(maxsize=64)(self._build_mask)

    def __len__(self) -> int:
        return len(self.ids)

    def host_index(self) -> LoadedIndex:
        """This ranker's rows as an index on the host, for `store.apply_diff`: views of the
        tensors themselves for fp32 keys on the CPU ((N, d) arrays in column-major order), a
        fp32 copy otherwise."""
        keys = {f: k.to("cpu", torch.float32).numpy() for f, k in self.keys_by_field.items()}
        shared = [f for f, k in self.keys_by_field.items() if self.values is k]
        values = keys[shared[0]] if shared else self.values.to("cpu", torch.float32).numpy()
        return LoadedIndex(
            ids=self.ids,
            titles=self.titles,
            authors=self.authors,
            years=self.years,
            languages=self.languages,
            keys=keys,
            values=values,
            model=self.model,
            generation=self.generation,
        )

    def row_of(self, book_id: str) -> int | None:
        """The row of `book_id`, None when it is not in the index."""
        return self._rows.get(book_id)

    @property
    def dim(self) -> int:
        return int(self.keys.shape[1])

    def mask(self, filters: Filters) -> Tensor | None:
        """(N,) bool, True for the books the filters keep; None when there are no filters."""
        return self._mask(filters) if filters.active else None

    def _build_mask(self, filters: Filters) -> Tensor:
        keep = torch.ones(len(self), dtype=torch.bool)  # (N,)
        if filters.year_min is not None:
            keep &= self._year >= filters.year_min
        if filters.year_max is not None:
            keep &= self._year <= filters.year_max
        if filters.language is not None:
            lang = filters.language.casefold()
            keep &= torch.tensor([x == lang for x in self._language], dtype=torch.bool)
        if filters.author is not None:
            name = filters.author.casefold()
            keep &= torch.tensor([name in a for a in self._author], dtype=torch.bool)
        for book_id in filters.exclude:
            if (row := self._rows.get(book_id)) is not None:
                keep[row] = False
        return keep.to(self.device)

    def rank(
        self, q: Tensor, *, k: int, scale: float, filters: Sequence[Filters] | None = None
    ) -> list[Ranking]:
        """For each query row of q (B, d), with its own filters: the top k of
        softmax(scale · q Kᵀ) over the books its filters keep."""
        if len(self) == 0:
            return [Ranking([], 0) for _ in range(q.shape[0])]
        att = self.attend(q, k=k, scale=scale, filters=filters or [Filters()] * q.shape[0])
        rankings = []
        for idx, scores, weights, matched in zip(
            att.indices.tolist(),
            att.scores.tolist(),
            att.weights.tolist(),
            att.matched.tolist(),
            strict=True,
        ):
            hits = [Hit(i, s, w) for i, s, w in zip(idx, scores, weights, strict=True) if i >= 0]
            rankings.append(Ranking(hits, int(matched)))
        return rankings

    def attend(self, q: Tensor, *, k: int, scale: float, filters: Sequence[Filters]) -> Attention:
        """The attention core over this ranker's keys, each query row masked by its filters."""
        return attend(
            q.to(self.device),
            self.keys,
            k=k,
            scale=scale,
            mask=self.batch_mask(filters),
            chunk_size=self.chunk_size,
        )

    def dense_heads(
        self,
        q: Tensor,
        heads: Sequence[tuple[str, float]],
        *,
        filters: Sequence[Filters],
        mask: Tensor | None,
    ) -> DenseHeads:
        """A search's dense heads, (field, scale) each, for the queries q: (B, d) for every head,
        or (Hd, B, d) one per head; over this ranker's keys, masked by `mask`
        (`batch_mask(filters)`)."""
        del filters  # the mask says it here; the sharded router sends the filters instead
        qs = per_head(q.to(self.device), len(heads))
        return LocalDenseHeads(
            [
                DenseHead(qs[h], self.keys_by_field[field], scale)
                for h, (field, scale) in enumerate(heads)
            ],
            size=len(self),
            mask=mask,
            chunk_size=self.chunk_size,
        )

    def key_rows(self, rows: Sequence[int], fields: Sequence[str]) -> Tensor:
        """(F, R, d) float32 on the CPU: each field's keys of the catalog rows `rows`."""
        index = torch.tensor(list(rows), dtype=torch.long, device=self.device)
        return torch.stack([self.keys_by_field[f][index].float().cpu() for f in fields])

    def batch_mask(self, filters: Sequence[Filters]) -> Tensor | None:
        """None without filters, (N,) when every row shares them, else (B, N)."""
        masks = [self.mask(f) for f in filters]
        if all(m is None for m in masks):
            return None
        if len(set(filters)) == 1:
            return masks[0]
        everything = torch.ones(len(self), dtype=torch.bool, device=self.device)
        return torch.stack([everything if m is None else m for m in masks])  # (B, N)
