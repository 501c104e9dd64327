"""`DenseHeads` over keys in this process (models/heads.py says what the mixture asks of them):
all of the catalog, or one shard's rows.

It keeps the raw scores its `attend` calls compute (within `KEEP_SCORES`): the mixture's
entropy sweep (models/entropy_sweep.py), the candidates' scores and a further threshold round
read them rather than the keys, which a second product per head read at the cost of the first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import numpy as np
import torch
from torch import Tensor

from models import spare_arrays
from models.attention import Attention, attend
from models.attention_chunks import exact_scores
from models.entropy_sweep import entropy_in_c, entropy_in_chunks
from models.heads import DenseHead, ScoredHead, TopLists, pad_right

# The dense heads' raw scores (Hd, B, N) are kept from their `attend` calls for the entropy
# sweep and the candidates' scores when they take at most 256 MiB of float32: the sweep then
# reads no keys and multiplies nothing again, where a second product per head cost as much as
# the first. `rows_kept` says how many queries of a batch fit; a caller with more splits the
# batch (service/engine/query_ranking.py), which reads the keys once per part.
KEEP_SCORES = 1 << 26


def rows_kept(heads: int, size: int) -> int:
    """The most queries whose raw scores in `heads` dense heads over `size` rows are kept."""
    return max(1, KEEP_SCORES // max(1, heads * size))


class LocalDenseHeads:
    """`DenseHeads` over keys in this process: rows [offset, offset + size) of the catalog (all
    of it unless these keys are one shard's), `mask` (N,) or (B, N) over those rows."""

    def __init__(
        self,
        heads: Sequence[DenseHead],
        *,
        size: int,
        mask: Tensor | None = None,
        chunk_size: int | None = None,
        offset: int = 0,
    ):
        if any(head.keys.shape[0] != size for head in heads):
            raise ValueError(f"dense heads' keys disagree with the size {size}")
        self.heads = list(heads)
        self.size = size
        self.mask = None if mask is None else mask.to(dtype=torch.bool)
        self.chunk_size = chunk_size
        self.offset = offset
        self._scores: list[Tensor | None] = [None] * len(self.heads)  # (B, N) fp32, kept
        self._lse: list[Tensor | None] = [None] * len(self.heads)  # (B,) with the kept scores
        self._keep = True  # whether `attend_heads` keeps the raw scores it computes
        # the rows of the kept scores that are these heads' queries (None: all of them)
        self._at: Tensor | None = None

    def rows(self, rows: Tensor) -> LocalDenseHeads:
        """These heads for the queries `rows` alone, reading the scores the batch's heads kept
        at those rows (`scores`, a further round's `top`), not a copy of them: a copy was a
        fresh (R, N) per head, ~11 ms a row at 1M books in page faults alone; a further round
        keeps none of its own."""
        at = rows.to(self.heads[0].q.device) if self.heads else rows
        mask = self.mask
        if mask is not None and mask.dim() == 2:
            mask = mask[at.to(mask.device)]
        sub = LocalDenseHeads(
            [DenseHead(h.q[at], h.keys, h.scale) for h in self.heads],
            size=self.size,
            mask=mask,
            chunk_size=self.chunk_size,
            offset=self.offset,
        )
        sub._scores = list(self._scores)
        sub._at = at.cpu() if self._at is None else self._at[at.cpu()]
        sub._lse = [None if x is None else x[at.to(x.device)] for x in self._lse]
        sub._keep = False
        return sub

    def _kept(self, h: int) -> Tensor:
        """Head h's kept raw scores (B, N) of these heads' queries (a copy for a further
        round's)."""
        s = cast(Tensor, self._scores[h])
        return s if self._at is None else s[self._at.to(s.device)]

    def _kept_buffer(self, n: int, device: torch.device) -> Tensor:
        """(n,) float32 for this object's kept scores: on the CPU the batch before's when no
        view of it is left (models/spare_arrays.py: a fresh (B, N) a batch cost a page fault
        per 4 KiB)."""
        if device.type != "cpu":
            return torch.empty(n, device=device)
        return torch.from_numpy(spare_arrays.empty("kept.scores", (n,), np.float32))

    @property
    def scales(self) -> list[float]:
        return [head.scale for head in self.heads]

    def attend_heads(self, k: int) -> list[Attention]:
        """Per head, `attend` over its keys (rows of these keys, not offset); heads sharing keys
        and scale run in one call over their stacked queries."""
        out: list[Attention | None] = [None] * len(self.heads)
        groups: dict[tuple[int, float], list[int]] = {}
        for h, head in enumerate(self.heads):
            groups.setdefault((id(head.keys), head.scale), []).append(h)
        mask, C = self.mask, self.chunk_size
        B = self.heads[0].q.shape[0] if self.heads else 0
        whole = None  # one buffer for every head's kept scores, each group its part
        if self.heads and self._keep and B * len(self.heads) * self.size <= KEEP_SCORES:
            whole = self._kept_buffer(len(self.heads) * B * self.size, self.heads[0].keys.device)
        taken = 0
        for members in groups.values():
            first = self.heads[members[0]]
            kept = None
            if whole is not None:
                part = len(members) * B * self.size
                kept = whole[taken : taken + part].view(-1, self.size)
                taken += part
            if len(members) == 1:
                out[members[0]] = attend(
                    first.q,
                    first.keys,
                    k=k,
                    scale=first.scale,
                    mask=mask,
                    chunk_size=C,
                    scores_out=kept,
                )
                if kept is not None:
                    self._scores[members[0]] = kept
                    self._lse[members[0]] = cast(Attention, out[members[0]]).logsumexp
                continue
            q = torch.cat([self.heads[h].q for h in members])
            m = mask if mask is None or mask.dim() == 1 else mask.repeat(len(members), 1)
            att = attend(
                q, first.keys, k=k, scale=first.scale, mask=m, chunk_size=C, scores_out=kept
            )
            for j, h in enumerate(members):
                rows = slice(j * B, (j + 1) * B)
                if kept is not None:
                    self._scores[h], self._lse[h] = kept[rows], att.logsumexp[rows]
                out[h] = Attention(
                    indices=att.indices[rows],
                    scores=att.scores[rows],
                    weights=att.weights[rows],
                    logsumexp=att.logsumexp[rows],
                    matched=att.matched[rows],
                    output=None,
                )
        return [att for att in out if att is not None]

    def top(self, k: int) -> tuple[TopLists, Tensor]:
        if not self._keep and all(x is not None for x in (*self._scores, *self._lse)):
            return self._top_of_kept(k)
        atts = self.attend_heads(k)
        lse = torch.empty(atts[0].indices.shape[0], len(atts), dtype=torch.float64)
        top: TopLists = []
        for h, att in enumerate(atts):
            idx = self._catalog_rows(att.indices.cpu())
            top.append((idx, att.weights.double().cpu(), att.scores.double().cpu()))
            lse[:, h] = att.logsumexp.double().cpu()
        return top, lse

    def _top_of_kept(self, k: int) -> tuple[TopLists, Tensor]:
        """`top` for a further round of a batch's queries, from the raw scores and log-sum-exps
        the first round kept: each head's top k by them, rescored exactly as `attend` rescores
        its winners, with no second read of the keys (1.5 GB a head at 1M books)."""
        R = self.heads[0].q.shape[0]
        lse = torch.empty(R, len(self.heads), dtype=torch.float64)
        top: TopLists = []
        for h, head in enumerate(self.heads):
            s, lse_h = cast(Tensor, self._scores[h]), cast(Tensor, self._lse[h])
            at_rows = torch.arange(R) if self._at is None else self._at
            tops = []
            for i, r in enumerate(at_rows.tolist()):  # a view of each query's row, no copy
                row = s[r]  # (N,)
                if self.mask is not None:
                    m = self.mask if self.mask.dim() == 1 else self.mask[i]
                    row = row.masked_fill(~m.to(s.device), -math.inf)
                tops.append(row.topk(min(k, self.size)))
            vals = torch.stack([t.values for t in tops])  # (R, k') by the float32 scores
            at = torch.stack([t.indices for t in tops])
            found = torch.isfinite(vals)
            idx = torch.where(found, at, -1)
            exact = exact_scores(head.q.to(head.keys.device), head.keys, at).double().cpu()
            w = (exact * head.scale - lse_h.double().cpu()[:, None]).exp().float().double()
            idx = self._catalog_rows(idx.cpu())
            top.append(
                (
                    pad_right(idx, k, -1),
                    pad_right(torch.where(found.cpu(), w, 0.0), k, 0.0),
                    # float32, as `attend` gives its winners' exact scores
                    pad_right(
                        torch.where(found.cpu(), exact.float().double(), -math.inf), k, -math.inf
                    ),
                )
            )
            lse[:, h] = lse_h.double().cpu()
        return top, lse

    def _catalog_rows(self, idx: Tensor) -> Tensor:
        """These keys' rows idx (−1: padding) as the catalog's (a shard's keys start at its
        offset)."""
        return torch.where(idx >= 0, idx + self.offset, -1) if self.offset else idx

    def scores(self, cand: Tensor) -> Tensor:
        """From the candidates' gathered keys; rows outside these keys score 0 (a shard's part:
        the shards' parts add up to every candidate's score)."""
        B, C = cand.shape
        out = torch.zeros(B, C, len(self.heads), dtype=torch.float64)
        if not self.heads or self.size == 0:
            return out
        local = cand - self.offset
        inside = (local >= 0) & (local < self.size)  # (B, C)
        safe = torch.where(inside, local, 0)
        # heads over the same keys (a recommendation's liked books) gather them once
        groups: dict[int, list[int]] = {}
        for h, head in enumerate(self.heads):
            groups.setdefault(id(head.keys), []).append(h)
        for members in groups.values():
            if all(self._scores[h] is not None for h in members):
                # the heads' attend kept every raw score: the candidates' are a gather away
                for h in members:
                    kept = cast(Tensor, self._scores[h])
                    if self._at is None:
                        s = kept.gather(1, safe.to(kept.device))  # (B, C)
                    else:  # a further round's queries: their rows of the batch's
                        s = kept[self._at.to(kept.device)[:, None], safe.to(kept.device)]
                    s = s.double().cpu()
                    out[:, :, h] = torch.where(inside, s, 0.0)
                continue
            keys = self.heads[members[0]].keys
            kc = gathered_keys(keys, safe.to(keys.device))  # (B, C, d) fp32
            q = torch.stack([self.heads[h].q for h in members], dim=-1)  # (B, d, G)
            s = torch.bmm(kc, q.to(kc.device).float())  # (B, C, G) fp32
            out[:, :, members] = torch.where(inside[:, :, None], s.double().cpu(), 0.0)
        return out

    def sweep(
        self, pi: Tensor, lse: Tensor, cand: Tensor, scored: Sequence[ScoredHead]
    ) -> tuple[Tensor, Tensor]:
        """Over these rows only: candidates elsewhere score 0, and the entropy is these rows'
        part of the sum (the shards' parts add up to the whole)."""
        B, Hd = pi.shape[0], len(self.heads)
        # the pass stays where the keys are
        device = self.heads[0].keys.device if self.heads else torch.device("cpu")
        pi, lse = pi.to(device), lse.to(device)
        # log π_h − lse_h (B, H): a term is exp(scale_h s − lse_h + log π_h), one pass fewer
        shift = pi.log() - lse
        ent = None
        if all(k is not None for k in self._scores):
            # the candidates' scores are a gather from the kept scores, and the entropy reads
            # those alone: in C on the CPU where it can
            scores = self.scores(cand).to(device)
            if device.type == "cpu":
                kept = [self._kept(h) for h in range(Hd)]
                ent = entropy_in_c(self.heads, kept, shift, scored, size=self.size, mask=self.mask)
            gather = None
        else:
            scores = torch.zeros(B, cand.shape[1], Hd, dtype=torch.float64, device=device)
            gather = ((cand - self.offset).to(device), scores)  # these keys' rows
        if ent is None:
            ent = entropy_in_chunks(
                self.heads,
                [None if x is None else self._kept(h) for h, x in enumerate(self._scores)],
                shift,
                scored,
                size=self.size,
                mask=self.mask,
                chunk_size=self.chunk_size,
                gather=gather,
            )
        return scores.cpu(), ent.cpu()


def gathered_keys(keys: Tensor, rows: Tensor) -> Tensor:
    """keys[rows] (B, C, d) float32 for rows (B, C). The served keys are an (N, d) view of
    (d, N) memory, where a key's d values lie a row of N apart: taken key by key that is a
    cache line per value. Taken as columns of the (d, N) rows, each row is read once, in order
    (models/attention_chunks.py `exact_scores` does the same for the winners)."""
    B, C = rows.shape
    if not keys.T.is_contiguous():
        return keys[rows].float()
    cols = keys.T.index_select(1, rows.reshape(-1)).float()  # (d, B·C)
    return cols.T.reshape(B, C, -1)
