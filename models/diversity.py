"""Maximal marginal relevance (Carbonell and Goldstein 1998): a ranked list reordered so that
each next item is relevant and unlike the items above it,

    next = argmax_{i ∉ S} λ · w_i / max_j w_j − (1 − λ) · max_{s ∈ S} k_i · k_s

with w a ranking's weights and k its items' unit-length keys (cosine similarity). λ = 1 is the
ranking itself; smaller λ trades relevance for variety: ten books about one war are one answer
ten times, and the reader who asked for books like it wants the other sides of it too.
"""

from __future__ import annotations

import torch
from torch import Tensor


def mmr_order(keys: Tensor, weights: Tensor, lam: float) -> list[int]:
    """The positions of C items in MMR order: keys (C, d) unit-length, weights (C,) ≥ 0 best
    first (ties keep their order). The first stays first (nothing above it to be unlike)."""
    C = weights.shape[0]
    if C == 0 or lam >= 1.0:
        return list(range(C))
    w = weights.double().cpu()
    rel = w / w.max().clamp_min(1e-300)  # (C,) in [0, 1]
    k = keys.double().cpu()
    sim = k @ k.T  # (C, C)
    closest = torch.full((C,), -torch.inf, dtype=torch.float64)  # max sim to the chosen
    free = torch.ones(C, dtype=torch.bool)
    order: list[int] = []
    for _ in range(C):
        gain = lam * rel - (1.0 - lam) * closest.clamp_min(-1.0)
        gain = torch.where(free, gain, -torch.inf)
        i = int(torch.argmax(gain))  # the first of equal gains: the better-ranked
        order.append(i)
        free[i] = False
        closest = torch.maximum(closest, sim[i])
    return order
