"""`DenseHeads` over keys in this process (models/heads.py says what the mixture asks of them):
all of the catalog, or one shard's rows.

It keeps the raw scores its `attend` calls compute (within `KEEP_SCORES`): the mixture's
entropy sweep, the candidates' scores and a further threshold round read them rather than the
keys, which a second product per head read at the cost of the first. On the CPU the sweep's
entropy is one C read of them (models/cpu_kernels.py `sweep_entropy`); elsewhere torch's passes
over chunks of rows (`_entropy_in_chunks`).
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from models import cpu_kernels
from models.attention import Attention, attend, chunk_for
from models.attention_chunks import BLOCK, exact_scores, raw_scores
from models.heads import DenseHead, ScoredHead, TopLists, pad_right

# Elements of one sweep chunk on the CPU: (B, c) float64 buffers of 1 MiB each.
SWEEP_CACHED = 1 << 17
# The dense heads' raw scores (Hd, B, N) are kept from their `attend` calls for the entropy
# sweep and the candidates' scores when they take at most 256 MiB of float32: the sweep then
# reads no keys and multiplies nothing again, where a second product per head cost as much as
# the first. `rows_kept` says how many queries of a batch fit; a caller with more splits the
# batch (service/engine/query_ranking.py), which reads the keys once per part.
KEEP_SCORES = 1 << 26


# One buffer for the kept scores, lent to one `LocalDenseHeads` at a time and given back when
# it is dropped: a fresh (B, N) buffer a batch cost a page fault per 4 KiB, ~25 ms a chunk of
# (32, 524,288) here. It holds at most KEEP_SCORES floats.
_spare: list[Tensor] = []
_spare_lock = threading.Lock()


def _lend(n: int) -> Tensor:
    """(≥ n,) float32 on the CPU: the spare buffer when it is large enough, else a new one."""
    with _spare_lock:
        buf = _spare.pop() if _spare else None
    if buf is None or buf.numel() < n:
        del buf  # freed before the larger one is taken
        buf = torch.empty(n)
    return buf


def _give_back(buf: Tensor) -> None:
    with _spare_lock:
        if not _spare or _spare[0].numel() < buf.numel():
            _spare[:] = [buf]


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

    def rows(self, rows: Tensor) -> LocalDenseHeads:
        """These heads for the queries `rows` alone, with the rows of the scores they kept
        (which `scores` reads); a further round keeps none of its own."""
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
        sub._scores = [None if s is None else s[at.to(s.device)] for s in self._scores]
        sub._lse = [None if x is None else x[at.to(x.device)] for x in self._lse]
        sub._keep = False
        return sub

    def _kept_buffer(self, n: int, device: torch.device) -> Tensor:
        """(n,) float32 for this object's kept scores: on the CPU the spare buffer, lent until
        this object is dropped (so no other object's attend writes over its scores)."""
        if device.type != "cpu":
            return torch.empty(n, device=device)
        buf = _lend(n)
        weakref.finalize(self, _give_back, buf)
        return buf[:n]

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
            idx = att.indices.cpu()
            if self.offset:
                idx = torch.where(idx >= 0, idx + self.offset, -1)
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
            if self.mask is not None:
                s = s.masked_fill(~self.mask.to(s.device), -math.inf)
            vals, at = s.topk(min(k, self.size), dim=-1)  # (R, k') by the float32 scores
            found = torch.isfinite(vals)
            idx = torch.where(found, at, -1)
            exact = exact_scores(head.q.to(head.keys.device), head.keys, at).double().cpu()
            w = (exact * head.scale - lse_h.double().cpu()[:, None]).exp().float().double()
            idx = idx.cpu()
            if self.offset:
                idx = torch.where(idx >= 0, idx + self.offset, -1)
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
                    s = kept.gather(1, safe.to(kept.device)).double().cpu()  # (B, C)
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
        pi, lse, cand = pi.to(device), lse.to(device), (cand - self.offset).to(device)
        # log π_h − lse_h (B, H): a term is exp(scale_h s − lse_h + log π_h), one pass fewer
        shift = pi.log() - lse
        ent = None
        if all(k is not None for k in self._scores):
            # the candidates' scores are a gather from the kept scores, and the entropy reads
            # those alone: in C on the CPU where it can
            scores = self.scores(cand + self.offset).to(device)
            ent = self._entropy_in_c(shift, scored) if device.type == "cpu" else None
            gather = None
        else:
            scores = torch.zeros(B, cand.shape[1], Hd, dtype=torch.float64, device=device)
            gather = (cand, scores)
        if ent is None:
            sparse = [SparseTerms.of(sh, shift[:, j], device) for j, sh in enumerate(scored, Hd)]
            ent = self._entropy_in_chunks(shift, gather, scored, sparse)
        return scores.cpu(), ent.cpu()

    def _entropy_in_chunks(
        self,
        shift: Tensor,
        gather: tuple[Tensor, Tensor] | None,
        scored: Sequence[ScoredHead],
        sparse: Sequence[SparseTerms | None],
    ) -> Tensor:
        """The sweep's entropy (B,) in torch's operations, a chunk of rows at a time, the
        heads' scores kept or multiplied again; `gather`: the candidates (B, C) (local rows)
        whose scores (B, C, Hd) it writes as it passes them."""
        B, N, Hd = shift.shape[0], self.size, len(self.heads)
        device = shift.device
        # on the CPU, chunks whose two float64 buffers stay in the core's cache: the dozen
        # in-place passes a chunk takes then read no memory but the scores; on a GPU, an
        # eighth of attend's chunk (float64 and several arrays) keeps the same budget
        if self.chunk_size:
            C = self.chunk_size
        elif device.type == "cpu":
            C = max(BLOCK, min(N, SWEEP_CACHED // max(B, 1)))
        else:
            C = chunk_for(8 * B, N, device)
        mask = None if self.mask is None else self.mask.to(device)
        total = torch.zeros(B, dtype=torch.float64, device=device)
        # w the mixture's probabilities, s one head's scores then its term: two float64
        # buffers for every chunk, worked in place (an expression per head allocated five per
        # chunk, each a page fault per 4 KiB)
        w_buf = torch.empty(B * min(C, N), dtype=torch.float64, device=device)
        s_buf = torch.empty_like(w_buf)
        for start in range(0, N, C):
            stop = min(N, start + C)
            w = w_buf[: B * (stop - start)].view(B, stop - start)  # (B, c)
            s = s_buf[: B * (stop - start)].view(B, stop - start)  # (B, c)
            w.zero_()
            for h, head in enumerate(self.heads):
                kept = self._scores[h]
                if kept is not None:  # from the head's attend call: no second pass over its keys
                    s.copy_(kept[:, start:stop])  # (B, c)
                else:
                    kc = head.keys[start:stop]
                    s.copy_(raw_scores(head.q.to(kc.device), kc))  # (B, c)
                if gather is not None:  # the candidates in this chunk take their scores
                    cand, scores = gather
                    inside = (cand >= start) & (cand < stop)  # (B, C)
                    at = (cand - start).clamp(0, stop - start - 1)
                    scores[:, :, h] = torch.where(inside, s.gather(1, at), scores[:, :, h])
                w.add_(s.mul_(head.scale).add_(shift[:, h : h + 1]).exp_())
            for j, (sh, terms) in enumerate(zip(scored, sparse, strict=True), start=Hd):
                if terms is not None:  # the few books the head holds
                    terms.add_to(w, start, stop)
                    continue
                s.copy_(sh.scores[:, start:stop])
                w.add_(s.mul_(sh.scale).add_(shift[:, j : j + 1]).exp_())
            if mask is not None:
                w.mul_(mask[..., start:stop])
            # −Σ w log w over w > 0 (a fully masked row's w is inf · 0 = NaN: it adds nothing)
            # (log 0 · 0 is NaN too: w = 0 adds nothing, as it should; xlogy took twice as long)
            total -= s.copy_(w).log_().mul_(w).nansum(-1)
        return total

    def _entropy_in_c(self, shift: Tensor, scored: Sequence[ScoredHead]) -> Tensor | None:
        """The sweep's entropy in one read of the kept scores (models/_cpu_kernels.c), a head
        of few books (`ScoredHead.support`) read at those alone, where every head's scores are
        float32 rows in CPU memory; None where they are not."""
        if not cpu_kernels.available():
            return None
        B, Hd = shift.shape[0], len(self.heads)
        dense = [(cast(Tensor, s), h.scale) for s, h in zip(self._scores, self.heads, strict=True)]
        sparse: list[tuple[Tensor, float, Tensor, Tensor]] = []
        dense_cols, sparse_cols = list(range(Hd)), []
        for j, sh in enumerate(scored, start=Hd):
            if sh.support is None:
                dense.append((sh.scores.cpu(), sh.scale))
                dense_cols.append(j)
                continue
            rows, cols = sh.support
            offsets = torch.searchsorted(rows.contiguous(), torch.arange(B + 1))
            sparse.append((sh.scores.cpu(), sh.scale, cols, offsets))
            sparse_cols.append(j)
        scores = [x for x, _ in dense] + [x for x, _, _, _ in sparse]
        if any(
            x.dtype != torch.float32 or x.shape != (B, self.size) or x.stride(1) != 1
            for x in scores
        ):
            return None
        columns = dense_cols + sparse_cols
        return cpu_kernels.sweep_entropy(dense, sparse, shift[:, columns], self.mask)


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


@dataclass(frozen=True)
class SparseTerms:
    """A scored head's part of the sweep's w when it holds few books (the lexical head: the
    books with a query term): exp(scale · s − lse + log π) of its finite scores only, flat
    positions b · N + i ascending."""

    where: Tensor  # (nnz,) int64 b · N + i
    terms: Tensor  # (nnz,) float64
    size: int  # N

    @classmethod
    def of(cls, head: ScoredHead, shift: Tensor, device: torch.device) -> SparseTerms | None:
        """The head's terms (shift (B,): log π − lse), or None when it holds over half of (B, N):
        then the dense pass is the cheaper."""
        if head.support is None:
            return None
        rows, cols = head.support
        N = head.scores.shape[1]
        where = rows * N + cols
        terms = (head.scores.cpu().reshape(-1)[where].double() * head.scale).to(device)
        return cls(where.to(device), terms.add_(shift[rows]).exp_(), N)

    def add_to(self, w: Tensor, start: int, stop: int) -> None:
        """Add the terms of columns [start, stop) into w (B, stop − start)."""
        B, c = w.shape
        if start == 0 and stop == self.size:  # one chunk: b · N + i is where w holds it
            w.view(-1).index_add_(0, self.where, self.terms)
            return
        rows = torch.arange(B, device=w.device)
        lo = torch.searchsorted(self.where, rows * self.size + start)  # (B,)
        hi = torch.searchsorted(self.where, rows * self.size + stop)
        counts = hi - lo  # each row's terms in the chunk: [lo, hi) of `where`, concatenated
        take = torch.repeat_interleave(lo - (counts.cumsum(0) - counts), counts)
        take += torch.arange(int(counts.sum()), device=w.device)
        where = self.where[take]
        b, i = where // self.size, where % self.size
        w.view(-1).index_add_(0, b * c + (i - start), self.terms[take])
