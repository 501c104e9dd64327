"""A mixture's heads: what each is (`DenseHead`: logits scale · q Kᵀ over keys; `ScoredHead`:
logits scale · s over scores given for every book, e.g. BM25), and the operations the
mixture needs from its dense heads, behind `DenseHeads`:

    top(k')       each head's top k' rows, their weights and exact scores, and its log-sum-exp
    scores(cand)  the raw scores of given rows
    sweep(...)    one pass: the candidates' scores and the mixture's entropy
    rows(rows)    the heads for some of the batch's queries (a further threshold round)

`LocalDenseHeads` (models/local_heads.py) answers them over keys in this process; a cluster's
router (service/cluster/shards/router.py `ShardedDenseHeads`) asks shards and
merges their answers exactly (models/shard_merge.py). The mixture (models/mixture.py) never
calls them: it yields what it needs, and the engine asks them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from models import spare_arrays


@dataclass(frozen=True)
class DenseHead:
    """Logits scale · q Kᵀ. Heads sharing the same `keys` tensor and scale run in one `attend`."""

    q: Tensor  # (B, d)
    keys: Tensor  # (N, d)
    scale: float


@dataclass(frozen=True)
class ScoredHead:
    """Logits scale · scores, for scores computed for every book (e.g. BM25); a score of −inf
    leaves the book out of this head (p = 0) without masking it from the others."""

    scores: Tensor  # (B, N) float
    scale: float
    # the finite scores' (rows, cols) where the maker of the head knows them (the lexical
    # head: its query terms' books), else found by `support`
    finite: tuple[Tensor, Tensor] | None = field(default=None, compare=False, repr=False)

    def rows(self, rows: Tensor) -> ScoredHead:
        """The head for the queries `rows` (R,) of its batch alone, with their part of the
        finite scores' places where those are known (found again, they were a pass over
        (R, N): 57 ms a query at 1M books)."""
        finite = None
        if self.finite is not None:
            at, cols = self.finite
            starts = torch.searchsorted(at, torch.arange(self.scores.shape[0] + 1))
            parts = [cols[starts[r] : starts[r + 1]] for r in rows.tolist()]
            sizes = torch.tensor([len(p) for p in parts], dtype=torch.long)
            finite = (torch.repeat_interleave(torch.arange(len(parts)), sizes), torch.cat(parts))
        at = rows.to(self.scores.device)
        if self.scores.device.type != "cpu" or self.scores.dtype != torch.float32:
            return ScoredHead(self.scores[at], self.scale, finite=finite)
        shape = (len(rows), self.scores.shape[1])
        out = torch.from_numpy(spare_arrays.empty("scored.rows", shape, np.float32))
        torch.index_select(self.scores, 0, at, out=out)
        return ScoredHead(out, self.scale, finite=finite)

    @cached_property
    def support(self) -> tuple[Tensor, Tensor] | None:
        """(rows, cols) of the finite scores, row-major, when at most half of (B, N) is finite,
        else None. The lexical head holds only the books with a query term (3-34% of a 1M-book
        catalog for the benchmarks' queries), and passes over those beat passes over N mostly
        −inf. numpy's: torch's isfinite and nonzero took 5 ms over (1, 1M) here, numpy's 1."""
        if self.finite is not None:
            rows, cols = self.finite
        else:
            found = np.nonzero(np.isfinite(self.scores.cpu().numpy()))
            rows, cols = torch.from_numpy(found[0]), torch.from_numpy(found[1])
        if 2 * len(rows) > self.scores.numel():
            return None
        return rows, cols


# per head: its top rows (B, k') int64, −1 padded, their weights (B, k') float64, 0 padded, and
# their exact raw scores (B, k') float64
TopLists = list[tuple[Tensor, Tensor, Tensor]]


class DenseHeads(Protocol):
    """A mixture's dense heads, wherever their keys are; rows are the catalog's, and the mask
    (the filters) is the implementation's to apply."""

    @property
    def scales(self) -> Sequence[float]:
        """One per dense head."""
        ...

    @property
    def size(self) -> int:
        """The catalog rows the heads cover."""
        ...

    def top(self, k: int) -> tuple[TopLists, Tensor]:
        """Each head's top k rows and their weights, and its log-sum-exp (B, Hd) float64 over
        the unmasked rows."""
        ...

    def rows(self, rows: Tensor) -> DenseHeads:
        """The heads for the queries `rows` (R,) of the batch alone (a further threshold round
        for the queries the first did not settle)."""
        ...

    def scores(self, cand: Tensor) -> Tensor:
        """Raw scores (B, C, Hd) float64 of the candidate rows cand (B, C) (−1: padding, whose
        score is anything)."""
        ...

    def sweep(
        self, pi: Tensor, lse: Tensor, cand: Tensor, scored: Sequence[ScoredHead]
    ) -> tuple[Tensor, Tensor]:
        """One pass over every row: the candidates' raw scores (B, C, Hd) float64, and the entropy
        −Σ_i w_i log w_i (B,) float64 over the unmasked rows, w_i = Σ_h π_h exp(scale_h s_hi −
        lse_h). pi, lse (B, Hd + Hs): the dense heads' columns first, then those of `scored`,
        whose scores are aligned with the rows these heads cover."""
        ...


def pad_right(x: Tensor, k: int, fill: float) -> Tensor:
    """x (B, k') padded on the right to (B, k) with `fill`: a head holding fewer than k books."""
    return torch.nn.functional.pad(x, (0, k - x.shape[1]), value=fill) if x.shape[1] < k else x
