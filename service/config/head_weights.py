"""The attention heads a search mixes, and their weights: `title:0.2,description:0.5,lexical:0.3`.

Each head is a softmax over the catalog: `title` and `description` over that field's keys
(logits scale_h · q·K_fieldᵀ), `lexical` over BM25 scores (logits scale_lexical · bm25), and
`author`, `series` and `subjects` over the description keys of the books by the author the query
names (or by the query book's authors), of the query book's series, and of the books under one of
its subject headings (logits scale_h · q·K_descriptionᵀ there, no other book in them). A
search's weights are the mixture Σ_h π_h · softmax_h, so a book's weight splits exactly into
per-head shares π_h · p_h(book).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Literal

DENSE_HEADS = ("title", "description")  # one per field of the index (indexer.batches.FIELDS)
LEXICAL = "lexical"
AUTHOR = "author"  # the books of a named author (a query's) or of the query book's authors
SERIES = "series"  # the other books of the query book's series
SUBJECTS = "subjects"  # the other books under one of the query book's subject headings
# HEADS order is the mixture's: the dense heads, then the scored ones (models.mixture.mix_topk)
SCORED_HEADS = (LEXICAL, AUTHOR, SERIES, SUBJECTS)
HEADS = (*DENSE_HEADS, *SCORED_HEADS)
MAX_HEADS_CHARS = 200
# The smallest weight beside the largest: a mixture Σ π_h · p_h of shares a million times apart
# is the larger head's ranking, and a weight like 1e-320 beside 1 (π = 1e-20, weights of 5e-22)
# is a typo far more often than an intent. Weights are relative, so any scale of them is fine.
MIN_RATIO = 1e-6


def parse_heads(text: str) -> dict[str, float]:
    """`name:weight,…` → {name: π} normalised to sum 1, in HEADS order; zero weights dropped.

    Raises ValueError (a 422 in the API) for an unknown or repeated head, a weight that is not
    a finite non-negative number, weights that are all zero, or a weight above 0 under
    MIN_RATIO of the largest. The messages name no field: the caller's context does.
    """
    if len(text) > MAX_HEADS_CHARS:
        raise ValueError(f"heads is longer than {MAX_HEADS_CHARS} characters")
    weights: dict[str, float] = {}
    for name, (w, written) in _per_head(text, "weight").items():
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"head {name!r}: weight must be a finite number ≥ 0, got {w}")
        if 0 < w < sys.float_info.min:  # subnormal: a few bits of precision, ratios all wrong
            raise ValueError(
                f"head {name!r}: weight {written} is too small to compute with (under "
                f"{sys.float_info.min:.1e}); weights are relative, so scale them all up"
            )
        weights[name] = w
    largest = max(weights.values())
    if largest <= 0:
        raise ValueError("at least one head needs a weight above 0")
    for name, w in weights.items():
        if 0 < w < largest * MIN_RATIO:
            raise ValueError(
                f"head {name!r}: weight {w:g} is under {MIN_RATIO:g} of the largest weight "
                f"({largest:g}); give it 0 to turn the head off, or weights within a factor "
                f"of {1 / MIN_RATIO:g} of each other"
            )
    # divided by the largest first, so the sum is at most len(HEADS), never inf (1e308 · 2)
    relative = {h: w / largest for h, w in weights.items()}
    total = sum(relative.values())
    return {h: relative[h] / total for h in HEADS if relative.get(h, 0) > 0}


def _per_head(text: str, what: str) -> dict[str, tuple[float, str]]:
    """`name:value,…` → {head: (value, as written)}. ValueError for a part without a colon, an
    unknown or repeated head, or a value that is not a number."""
    out: dict[str, tuple[float, str]] = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition(":")
        name = name.strip()
        if not sep:
            raise ValueError(f"expected name:{what}, got {part.strip()!r}")
        if name not in HEADS:
            raise ValueError(f"unknown head {name!r}: the heads are {', '.join(HEADS)}")
        if name in out:
            raise ValueError(f"head {name!r} is given twice")
        try:
            out[name] = (float(value), value.strip())
        except ValueError:
            raise ValueError(f"head {name!r}: {what} {value.strip()!r} is not a number") from None
    return out


# How a ranking fuses its heads (service/engine/ranking.py): "mixture", Σ_h π_h softmax_h
# (models/mixture.py); "rank", the weighted reciprocal ranks of each head (models/rank_fusion.py).
Fusion = Literal["mixture", "rank"]
HeadScales = dict[str, float]  # head → softmax scale (inverse temperature), every head of HEADS


def parse_scales(text: str) -> HeadScales:
    """`name:scale,…` → {name: scale} for every head of HEADS (ATTEND_HEAD_SCALES).

    Raises ValueError for an unknown, repeated or missing head, or a scale out of (0, 1000].
    """
    scales: dict[str, float] = {}
    for name, (scale, _) in _per_head(text, "scale").items():
        if not (0 < scale <= 1000):  # NaN fails too
            raise ValueError(f"head {name!r}: scale must be in (0, 1000], got {scale}")
        scales[name] = scale
    if missing := [h for h in HEADS if h not in scales]:
        raise ValueError(f"no scale for {', '.join(missing)}")
    return {h: scales[h] for h in HEADS}


@dataclass(frozen=True)
class BookHeads:
    """The heads of a query that is a book (similar books, recommendations): weights π, scales
    and how they are fused."""

    weights: dict[str, float]
    scales: HeadScales
    fusion: Fusion = "rank"
    # γ of the readers' prior ρ(i) = (1 + readers of i)^γ on the rank fusion (0: none)
    readers: float = 0.0
    # λ of the results' maximal marginal relevance over their description keys (1: none)
    diversity: float = 1.0


def recommend_heads(single: BookHeads, taste: BookHeads, liked: int) -> BookHeads:
    """A recommendation's default heads for `liked` distinct liked books: `taste`
    (ATTEND_RECOMMEND_HEADS) when two or more ask together, else `single` (ATTEND_SIMILAR_HEADS)."""
    return taste if liked > 1 else single
