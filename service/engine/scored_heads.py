"""The scored heads of a mixture, built the same way for a typed query and for a book as the
query: logits over every book of the catalog given as scores, −inf for a book the head leaves
out (`models.heads.ScoredHead`).

- **lexical**: BM25 of the query's terms. Its softmax runs over the books that hold a term: a book
  without one has BM25 0 by construction, not a likelihood, so it gets p = 0.
- **restricted** (the author and series heads): attention over a set of books only, q·k with the
  description keys of the set's rows, −inf for every other book: the books by the author a
  query names, or a query book's author and series mates.

A head has **evidence** for a query when some book the filters keep has a finite logit; without
it the head abstains (its π goes to the other heads, service/engine/mixing.py), and its row is
uniform over the books, so that a query asking only for it still gets an answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from models import cpu_kernels, spare_arrays
from models.heads import ScoredHead
from service.engine.served_index import RANK_FIELD, ServedIndex


def kept(mask: Tensor | None, B: int, N: int) -> Tensor:
    """(B, N) bool: the books the filters keep, on the CPU."""
    if mask is None:
        return torch.ones(B, N, dtype=torch.bool)
    return mask.cpu().to(torch.bool).expand(B, N)


def lexical_head(
    scores: Tensor, scale: float, mask: Tensor | None
) -> tuple[ScoredHead, list[bool]]:
    """BM25 scores (B, N) → the lexical head and, per query, whether it has evidence. The
    scores are the head's own: a book without a query term is set to −inf in them, in place."""
    B = scores.shape[0]
    s = np.ascontiguousarray(scores.cpu().numpy(), dtype=np.float32)
    # the head's support is its books with a term: its top k and log-sum-exp read them alone
    if cpu_kernels.available():  # one read of the scores (models/_cpu_kernels.c)
        cols, counts = cpu_kernels.positive_support(s)
        rows = rows_of(counts)
    else:
        term = s > 0  # (B, N)
        rows, cols = np.nonzero(term)  # row-major
        np.copyto(s, s.dtype.type(-math.inf), where=~term & term.any(-1, keepdims=True))
    inside = rows if mask is None else rows[kept_at(mask, rows, cols)]
    evidence: np.ndarray = np.bincount(inside, minlength=B) > 0  # (B,)
    # a query whose terms the filters leave out has no evidence: its row is its scores again,
    # uniform over the books it keeps, as `uniform` is
    for b in np.flatnonzero(~evidence):
        np.copyto(s[b], np.float32(0.0), where=np.isneginf(s[b]))
    if not evidence.all():  # those rows are finite on every book
        N = s.shape[1]
        starts = np.searchsorted(rows, np.arange(B + 1))
        parts = [cols[starts[b] : starts[b + 1]] if evidence[b] else np.arange(N) for b in range(B)]
        rows = rows_of(np.array([len(p) for p in parts], dtype=np.int64))
        cols = np.concatenate(parts)
    finite = (torch.from_numpy(rows), torch.from_numpy(cols))
    head = ScoredHead(torch.from_numpy(s), scale, finite=finite)
    return head, [bool(e) for e in evidence]


def rows_of(counts: np.ndarray) -> np.ndarray:
    """(Σ counts,) int64: b repeated counts[b] times, for the few rows of a batch (a slice
    filled per row, a Python step each: np.repeat took about three times as long over the tens
    of millions of entries a batch's lexical support holds at 1M books)."""
    ends = np.cumsum(counts)
    rows = spare_arrays.empty("support.rows", (int(ends[-1]) if len(ends) else 0,), np.int64)
    start = 0
    for b, end in enumerate(ends.tolist()):
        rows[start:end] = b
        start = end
    return rows


def kept_at(mask: Tensor, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Whether the filters keep each book (rows[i], cols[i]) of a (B, N) batch: `mask` (N,)
    or (B, N)."""
    m = mask.cpu().to(torch.bool).numpy()
    at: np.ndarray = m[cols] if m.ndim == 1 else m[rows, cols]
    return at


def restricted_head(
    index: ServedIndex,
    q: Tensor,
    rows: Sequence[Sequence[int]],
    scale: float,
    mask: Tensor | None,
    *,
    parts: Sequence[Sequence[Sequence[int]]] | None = None,
) -> tuple[ScoredHead, list[bool]]:
    """Query b (row of q (B, d), a description-key query) attends over the books `rows[b]`
    alone: the head and, per query, whether a kept book is among its rows. `parts[b]`, where
    given, splits query b's rows into parts that share the head equally (one author each of
    "king or koontz")."""
    B, N = q.shape[0], len(index)
    scores = torch.full((B, N), -math.inf)  # (B, N)
    union = sorted({r for rs in rows for r in rs})
    if union:
        keys = index.keys.key_rows(union, [RANK_FIELD])[0]  # (U, d) float32, CPU
        s = q.float().cpu() @ keys.T  # (B, U)
        at = {r: j for j, r in enumerate(union)}
        for b, rs in enumerate(rows):
            if rs:
                cols = torch.tensor([at[r] for r in rs])
                scores[b, torch.tensor(list(rs))] = s[b, cols]
    kept_books = kept(mask, B, N)
    for b, split in enumerate(parts or ()):
        if len(split) > 1:
            shared(scores[b], split, scale, kept_books[b])
    evidence = (torch.isfinite(scores) & kept_books).any(-1)  # (B,)
    scores[~evidence] = 0.0  # uniform: it weighs only where nothing else was asked
    return ScoredHead(scores, scale), evidence.tolist()


def shared(scores: Tensor, parts: Sequence[Sequence[int]], scale: float, kept: Tensor) -> None:
    """Shift one query's restricted scores (N,) in place so that each part of its books with a
    kept book holds an equal share of the head: with L_g the log-sum-exp of scale · s over
    part g's kept books and A such parts, a book i gets

        p_i = (1 / A) · Σ_{g ∋ i} exp(scale · s_i − L_g)

    the mean of the parts' own softmaxes (a book in two parts, a co-written one, has both), as
    a softmax of scale · s_i + log Σ_{g ∋ i} exp(−L_g) over the union. Without it, the author
    whose books sit nearer the query's embedding takes the head ("john grisham or tom clancy":
    all Clancy)."""
    books = sorted({r for part in parts for r in part})
    place = {r: j for j, r in enumerate(books)}
    shift = torch.zeros(len(books), dtype=torch.float64)  # Σ_g exp(−L_g) per book of a part
    for part in parts:
        at = torch.tensor(list(part), dtype=torch.long)
        at = at[kept[at]]
        if len(at):
            lse = torch.logsumexp(scale * scores[at].double(), 0)
            shift[[place[r] for r in at.tolist()]] += torch.exp(-lse)
    inside = shift > 0
    rows = torch.tensor(books, dtype=torch.long)[inside]
    scores[rows] += (torch.log(shift[inside]) / scale).float()


def uniform(B: int, N: int, scale: float) -> ScoredHead:
    """A scored head with no evidence for any query, uniform over the kept books: what a query
    gets that asked only for heads that abstain."""
    # one row of zeros seen B times: an abstaining head is rarely read, and (B, N) zeros were
    # 128 MB at 1M books and B = 32
    return ScoredHead(torch.zeros(N).expand(B, N), scale)
