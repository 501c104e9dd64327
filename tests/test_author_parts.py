"""The author head of a query that joins two authors ("king or koontz"): each author's books
hold an equal share of the head (service/engine/scored_heads.py `shared`), whichever author's
books sit nearer the query's embedding."""

from __future__ import annotations

import math

import pytest
import torch

from service.engine.scored_heads import shared

SCALE = 10.0


def _probabilities(scores: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    logits = torch.where(kept, SCALE * scores.double(), -math.inf)
    return torch.softmax(logits, 0)


def test_each_part_holds_an_equal_share_whatever_its_scores() -> None:
    scores = torch.full((8,), -math.inf)
    scores[[0, 1, 2]] = torch.tensor([0.9, 0.8, 0.85])  # the near author's books
    scores[[4, 5]] = torch.tensor([0.1, 0.3])  # the far author's
    kept = torch.ones(8, dtype=torch.bool)
    before = _probabilities(scores, kept)
    assert before[[4, 5]].sum() < 0.01  # alone, the near author takes the head
    shared(scores, [[0, 1, 2], [4, 5]], SCALE, kept)
    p = _probabilities(scores, kept)
    assert p[[0, 1, 2]].sum().item() == pytest.approx(0.5, rel=1e-6)
    assert p[[4, 5]].sum().item() == pytest.approx(0.5, rel=1e-6)
    # within a part, the books keep their order and their ratios
    assert (p[1] / p[0]).item() == pytest.approx((before[1] / before[0]).item(), rel=1e-5)
    assert (p[4] / p[5]).item() == pytest.approx(math.exp(SCALE * (0.1 - 0.3)), rel=1e-5)
    assert p[[3, 6, 7]].sum() == 0


def test_a_book_in_both_parts_has_both_shares_and_a_part_the_filters_empty_has_none() -> None:
    scores = torch.full((6,), -math.inf)
    scores[[0, 1, 2, 3]] = torch.tensor([0.5, 0.2, 0.4, 0.7])
    kept = torch.ones(6, dtype=torch.bool)
    parts = [[0, 1], [1, 2, 3]]  # book 1 is co-written
    alone = [_probabilities(scores, kept & _only(6, part)) for part in parts]
    shared(scores, parts, SCALE, kept)
    p = _probabilities(scores, kept)
    assert p.tolist() == pytest.approx(((alone[0] + alone[1]) / 2).tolist(), rel=1e-5)

    # the filters keep one of the second part's books: it holds that part's share alone
    scores = torch.full((6,), -math.inf)
    scores[[0, 1, 2, 3]] = torch.tensor([0.5, 0.2, 0.4, 0.7])
    kept = torch.tensor([True, True, True, False, True, True])
    shared(scores, [[0, 1], [2, 3]], SCALE, kept)
    assert _probabilities(scores, kept)[2].item() == pytest.approx(0.5, rel=1e-6)

    # the filters keep none of the second part's books: the first part holds the head
    scores = torch.full((6,), -math.inf)
    scores[[0, 1, 4, 5]] = torch.tensor([0.5, 0.2, 0.4, 0.7])
    kept = torch.tensor([True, True, True, True, False, False])
    shared(scores, [[0, 1], [4, 5]], SCALE, kept)
    p = _probabilities(scores, kept)
    assert p[[0, 1]].sum().item() == pytest.approx(1.0, rel=1e-6)


def _only(n: int, rows: list[int]) -> torch.Tensor:
    at = torch.zeros(n, dtype=torch.bool)
    at[rows] = True
    return at
