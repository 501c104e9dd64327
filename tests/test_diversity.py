"""Maximal marginal relevance (models/diversity.py) against its definition, computed the slow
way: at each step the item of the largest λ · relevance − (1 − λ) · closeness to those above."""

from __future__ import annotations

import torch

from models.diversity import mmr_order


def _unit(n: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=-1)


def _slow(keys: torch.Tensor, w: torch.Tensor, lam: float) -> list[int]:
    rel = (w / w.max()).tolist()
    sim = (keys.double() @ keys.double().T).tolist()
    order: list[int] = []
    while len(order) < len(rel):
        gains = {
            i: lam * rel[i] - (1 - lam) * max((sim[i][j] for j in order), default=-1.0)
            for i in range(len(rel))
            if i not in order
        }
        order.append(max(gains, key=lambda i: (gains[i], -i)))
    return order


def test_mmr_is_its_definition() -> None:
    keys, w = _unit(40, 8, 1), torch.rand(40, generator=torch.Generator().manual_seed(2))
    w = w.sort(descending=True).values
    for lam in (0.0, 0.3, 0.7, 0.95):
        assert mmr_order(keys, w, lam) == _slow(keys, w, lam)


def test_a_near_copy_waits_below_a_different_item() -> None:
    """Items 0 and 1 say the same thing (cosine 0.99); item 2, a little less relevant, says
    something else: with λ = 0.7 it comes second, with λ = 1 the ranking stays as it was."""
    keys = _unit(3, 8, 3)
    keys[1] = torch.nn.functional.normalize(keys[0] + 0.1 * keys[1], dim=-1)
    keys[2] = torch.nn.functional.normalize(keys[2] - (keys[2] @ keys[0]) * keys[0], dim=-1)
    w = torch.tensor([0.5, 0.45, 0.4])
    assert mmr_order(keys, w, 0.7) == [0, 2, 1]
    assert mmr_order(keys, w, 1.0) == [0, 1, 2]
    assert mmr_order(keys[:0], w[:0], 0.7) == []
