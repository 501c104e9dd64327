"""The softmax over a catalog's keys as `attend` (models/attention.py) folds them in chunk by
chunk, merged as flash-attention merges blocks, and `Attention`, the result it finishes into:
the top k with their exact weights, the log-sum-exp and, with values, the output.

On the CPU each chunk's pass and the winners' exact rescoring are C (models/cpu_kernels.py);
elsewhere, and without the extension, torch's operations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from models import cpu_kernels, cuda_finish, cuda_fold
from models.attention_chunks import chunk_candidates, exact_scores

LOG2_E, LN_2 = 1 / math.log(2), math.log(2)
# a chunk whose rows' max x are all within ±UNSHIFTED (or −inf) sums 2^x as it is: ≤ 2^24 terms
# of at most 2^64 stay far from float32's 2^128, and what underflows is under 2^−62 of its max
UNSHIFTED = 64.0


@dataclass(frozen=True)
class Attention:
    """The result of `attend` (or `reference_attention`) for a batch of B queries.

    Rows with fewer than k unmasked keys are padded: index −1, score −inf, weight 0.
    """

    indices: Tensor  # (B, k') int64 row numbers into keys, best first; k' = min(k, N)
    scores: Tensor  # (B, k') raw q·k (the exact dot product, rounded once to float32)
    weights: Tensor  # (B, k') softmax weight over all unmasked keys
    logsumexp: Tensor  # (B,) float64 log Σ exp(logits); −inf for a fully masked row
    matched: Tensor  # (B,) int64 number of unmasked keys
    output: Tensor | None  # (B, d_v) weights_all @ values, or None without values


@dataclass
class RunningSoftmax:
    """The softmax over the chunks folded in so far, in base-2 logits x, merged as flash-attention
    merges blocks; None before the first chunk (a small catalog has just one)."""

    k: int  # k' = min(k, N)
    matched: Tensor  # (B,) int64 unmasked keys (so far, with a mask)
    top: Tensor | None = None  # (B, k') the largest x, descending
    top_idx: Tensor | None = None  # (B, k') their rows, −1 for padding
    m: Tensor | None = None  # (B,) max x; −inf for a row masked so far
    m_safe: Tensor | None = None  # (B,) m, but 0 where −inf: what l and acc are relative to
    l: Tensor | None = None  # (B,) float64 Σ 2^(x − m_safe)
    acc: Tensor | None = None  # (B, d_v) Σ 2^(x − m_safe)·v, with values

    def fold(self, s: Tensor, start: int, values: Tensor | None, mask: Tensor | None) -> None:
        """Fold in a chunk of c keys from row `start` on: their x, s (B, c rounded up to whole
        BLOCKs, −inf past the keys), values (c, d_v) and mask ((c,) or (B, c)). May overwrite s."""
        if mask is not None:
            s[:, : mask.shape[-1]].masked_fill_(~mask, -math.inf)
            self.count(mask)
        if values is None and cpu_kernels.applies(s, self.k):
            self._fold_in_c(s, start)
            return
        # running top-k, before the exp overwrites s; and the chunk's max x and its column
        cand, cand_col, c_max, c_arg = chunk_candidates(s, self.k)  # (B, k'), ..., (B, 1)
        self._merge_top(cand, cand_col + start if start else cand_col)
        # running log-sum-exp (and output), rescaled to the new max like flash-attention
        alpha, m_safe = self._new_max(c_max)
        if values is None and _unshifted(c_max):
            # 2^x itself, and the sum rescaled by 2^(−m) in float64 after: one pass over the
            # (B, c) logits fewer than subtracting m first (4% of attend at N = 100k, B = 256), and
            # the same float32 mantissas summed, none overflowing nor lost to underflow
            p = s.exp2_()  # (B, c) 2^x, in place
            shift = torch.exp2(-m_safe.double())  # (B,)
        else:
            p = s.sub_(m_safe[:, None]).exp2_()  # (B, c) 2^(x − m) = e^(logit − m·ln 2)
            shift = None
        if values is not None:
            pv = p[:, : values.shape[0]] @ values.to(p.dtype)  # (B, d_v)
            acc = self.acc
            self.acc = pv if acc is None or alpha is None else acc * alpha.float()[:, None] + pv
        # Σ p in float32 but for the chunk's top key, whose term goes in in float64: a float32
        # sum keeps ~1e-7 of its largest terms, and of a peaked softmax that is 1e-7 of the
        # log-sum-exp, which a mixture's entropy (models/mixture.py) would carry as 1e-6 and
        # more, and shards (their own sums) would disagree on. The rest is small when peaked.
        top_p = torch.exp2(c_max.double() - m_safe.double())  # (B,)
        rest = p.scatter_(1, c_arg, 0.0).sum(dim=-1).double()  # (B,)
        if shift is not None:
            rest = rest * shift
        self._add_to_sum(alpha, top_p + rest)

    def count(self, mask: Tensor) -> None:
        """Count a chunk's unmasked keys, mask (c,) or (B, c) bool, into `matched`."""
        self.matched += mask.sum(-1) if mask.dim() == 2 else mask.sum()

    def fold_blocks(self, s: Tensor, block_max: Tensor, rest: Tensor, start: int) -> None:
        """`fold` for a chunk whose x, s (B, c) masked already, came with each BLOCK's max and
        rest (B, c / BLOCK) (models/cuda_fold.py): the top k by those maxima, and the sum as
        Σ_g 2^(bmax_g − m) · (1 + rest_g), each block's top term an exact 1 outside float32."""
        if cuda_finish.select_applies(self.k, block_max.shape[1]):  # one launch
            self.top, self.top_idx, self.m, self.m_safe, self.l = cuda_finish.select_blocks(
                s, block_max, rest, self.k, start, self.top, self.top_idx, self.m, self.l
            )
            return
        cand, cand_col, _, _ = chunk_candidates(s, self.k, block_max)  # (B, k'), ...
        self._merge_top(cand, cand_col + start if start else cand_col)
        self.m, self.m_safe, self.l = cuda_finish.merge_blocks(block_max, rest, self.m, self.l)

    def _fold_in_c(self, s: Tensor, start: int) -> None:
        """`fold` by models/_cpu_kernels.c: one read of s, left as it is, for the top k and the
        sum, where the torch passes read it four times and wrote it once. The (B,) bookkeeping
        in numpy, a few µs an operation where torch's took 5-25."""
        cand, cand_col, rest, shift = cpu_kernels.fold_chunk(s, self.k)  # (B, k'), ..., (B,)
        self._merge_top(cand, cand_col + start if start else cand_col)
        c_max = cand[:, 0].numpy()  # (B,)
        m_old = None if self.m is None else self.m.numpy()
        m = c_max.copy() if m_old is None else np.maximum(m_old, c_max)  # (B,)
        m_safe = np.nan_to_num(m, neginf=0.0)  # 0, not −inf, for masked rows
        m64 = m_safe.astype(np.float64)
        # the chunk's top term in float64, as in `fold`; the rest, summed relative to its own
        # shift (0 but for rows whose max is past ±UNSHIFTED), moved to the running max
        chunk_sum = np.exp2(c_max.astype(np.float64) - m64) + rest.numpy() * np.exp2(
            shift.numpy() - m64
        )
        if self.l is not None and m_old is not None:
            chunk_sum += self.l.numpy() * np.exp2(m_old.astype(np.float64) - m64)
        self.m, self.m_safe, self.l = (torch.from_numpy(x) for x in (m, m_safe, chunk_sum))

    def _new_max(self, c_max: Tensor) -> tuple[Tensor | None, Tensor]:
        """The running max after a chunk whose rows' max x is c_max (B,): (alpha, m_safe), alpha
        (B,) float64 2^(m_old − m_new), 0 where m_old was −inf, None for the first chunk."""
        m_old = self.m
        self.m = c_max if m_old is None else torch.maximum(m_old, c_max)  # (B,)
        self.m_safe = m_safe = self.m.nan_to_num(neginf=0.0)  # 0, not −inf, for masked rows
        alpha = None if m_old is None else torch.exp2(m_old.double() - m_safe.double())
        return alpha, m_safe

    def _add_to_sum(self, alpha: Tensor | None, chunk_sum: Tensor) -> None:
        """l ← l · alpha + the chunk's Σ 2^(x − m_safe) (B,) float64."""
        l = self.l
        self.l = chunk_sum if l is None or alpha is None else l * alpha + chunk_sum

    def _merge_top(self, cand: Tensor, cand_idx: Tensor) -> None:
        """The k best of the running top (B, k) and a chunk's candidates (B, k'), with their
        rows; the first chunk's k sorted candidates are taken as they are."""
        k, top, top_idx = self.k, self.top, self.top_idx
        if top is not None and top_idx is not None:
            cand, cand_idx = torch.cat([top, cand], dim=-1), torch.cat([top_idx, cand_idx], dim=-1)
        elif cand.shape[1] == k:  # a whole chunk's own top-k, already sorted (chunk_candidates)
            self.top, self.top_idx = cand, cand_idx
            return
        if cand.shape[1] < k:  # fewer keys so far than k: pad, as a row short of keys ends
            pad = k - cand.shape[1]
            cand = torch.cat([cand, cand.new_full((cand.shape[0], pad), -math.inf)], dim=-1)
            cand_idx = torch.cat([cand_idx, cand_idx.new_full((cand.shape[0], pad), -1)], dim=-1)
        best_x, best = cand.topk(k, dim=-1)  # (B, k)
        self.top, self.top_idx = best_x, cand_idx.gather(1, best)

    def finish(self, q: Tensor, keys: Tensor, *, scale: float) -> Attention:
        """The result, once every chunk of keys is folded in."""
        if self.top is None or self.top_idx is None or self.m_safe is None or self.l is None:
            raise ValueError("no chunk was folded in")
        top, m, l, acc = self.top, self.m_safe, self.l, self.acc
        # The winners' scores again, exactly (float64 over their k gathered keys): how a BLAS
        # sums a chunk's products depends on the chunk's shape (OpenBLAS's edge kernels
        # differ), so the float32 scores of one key can differ in the last bit between a whole
        # index and a shard. Their exact values replace their float32 terms in the sum too:
        # they are its largest, so the weights agree to ~1e-7 however the keys were chunked.
        if acc is None and cuda_fold.on_device(keys):  # one kernel, not some thirty launches
            idx_t, scores, weights, lse = cuda_finish.finish_rows(
                top, self.top_idx, m, l, q, keys, scale * LOG2_E
            )
            return Attention(idx_t, scores, weights, lse, self.matched, None)
        if keys.device.type == "cpu":
            # numpy: its operations on (B, k) cost a few µs each, torch's 5-25 (a fifth of
            # the work besides the product at N = 10k, B = 256)
            found_n = np.isfinite(top.numpy())  # (B, k) False for masked keys and padding
            idx_n = np.where(found_n, self.top_idx.numpy(), -1)
            exact_n = exact_scores(q, keys, torch.from_numpy(np.maximum(idx_n, 0))).numpy()
            l_n, lse_n, w_n = _exact_sums(
                np, top.numpy().astype(np.float64), m.numpy().astype(np.float64), l.numpy(),
                exact_n, found_n, scale * LOG2_E,
            )  # fmt: skip
            top_idx = torch.from_numpy(idx_n)
            l, lse = torch.from_numpy(l_n), torch.from_numpy(lse_n)
            scores = torch.from_numpy(np.where(found_n, exact_n, -np.inf).astype(np.float32))
            weights = torch.from_numpy(np.where(found_n, w_n, 0.0).astype(np.float32))
        else:
            found = torch.isfinite(top)  # (B, k) False for masked keys and padding
            top_idx = torch.where(found, self.top_idx, -1)
            exact = exact_scores(q, keys, top_idx.clamp_min(0))  # (B, k) float64
            x = top.double()
            l, lse, w = _exact_sums(torch, x, m.double(), l, exact, found, scale * LOG2_E)
            scores = torch.where(found, exact, -math.inf).float()
            weights = torch.where(found, w, 0.0).float()
        output = None
        if acc is not None:
            output = torch.where(l[:, None] > 0, acc / l.clamp_min(1e-300).float()[:, None], 0.0)
        return Attention(
            indices=top_idx,
            scores=scores,
            weights=weights,
            logsumexp=lse,  # float64: shards' answers merge by it (models/shard_merge.py)
            matched=self.matched,
            output=output,
        )


def _exact_sums(  # noqa: PLR0917
    xp: Any, top: Any, m: Any, l: Any, exact: Any, found: Any, scale2: float
) -> tuple[Any, Any, Any]:
    """The sum with the winners' exact terms, for numpy or torch (`xp`) arrays: top (B, k) their
    x as summed, m (B,) the max x the sum l (B,) is relative to (all float64), exact (B, k) their
    exact q·k, found (B, k) False for padding. Returns l, the log-sum-exp (B,) and the weights
    (B, k) (inf where a row has no keys: not found).

    In base 2, and exp2, not exp: torch's exp wakes a second OpenMP thread past ~2,000
    elements, 100 µs of a (256, 10) call under OMP_WAIT_POLICY=PASSIVE."""
    z = exact * scale2  # (B, k) their exact x
    m2 = m[:, None]  # (B, 1)
    summed = xp.exp2(top - m2)  # their terms as summed (≈)
    l = l + xp.where(found, xp.exp2(z - m2) - summed, 0.0).sum(-1)
    lse2 = xp.where(l > 0, m + xp.log2(xp.where(l > 0, l, 1.0)), -math.inf)  # (B,)
    return l, lse2 * LN_2, xp.exp2(z - lse2[:, None])


def _unshifted(c_max: Tensor) -> bool:
    """Whether a chunk of rows' max x `c_max` (B,) may be exponentiated without subtracting
    the max first (UNSHIFTED); only on the CPU, where reading c_max waits for nothing."""
    if c_max.device.type != "cpu":
        return False
    m = c_max.numpy()
    return bool(np.all((np.abs(m) <= UNSHIFTED) | (m == -np.inf)))
