"""The attention heads a search mixes, and their weights: `title:0.3,description:0.4,lexical:0.3`.

Each head is a softmax over the catalog: `title` and `description` over that field's keys
(logits scale · q·K_fieldᵀ), `lexical` over BM25 scores (logits lexical_scale · bm25). A search's
weights are the mixture Σ_h π_h · softmax_h, so a book's weight splits exactly into per-head
shares π_h · p_h(book).
"""

from __future__ import annotations

import math

DENSE_HEADS = ("title", "description")  # one per field of the index (indexer.pipeline.FIELDS)
LEXICAL = "lexical"
HEADS = (*DENSE_HEADS, LEXICAL)
MAX_HEADS_CHARS = 200


def parse_heads(text: str) -> dict[str, float]:
    """`name:weight,…` → {name: π} normalised to sum 1, in HEADS order; zero weights dropped.

    Raises ValueError (a 422 in the API) for an unknown or repeated head, a weight that is not
    a finite non-negative number, or weights that are all zero.
    """
    if len(text) > MAX_HEADS_CHARS:
        raise ValueError(f"heads is longer than {MAX_HEADS_CHARS} characters")
    weights: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition(":")
        name = name.strip()
        if not sep:
            raise ValueError(f"heads: expected name:weight, got {part.strip()!r}")
        if name not in HEADS:
            raise ValueError(f"unknown head {name!r}: the heads are {', '.join(HEADS)}")
        if name in weights:
            raise ValueError(f"head {name!r} is given twice")
        try:
            w = float(value)
        except ValueError:
            raise ValueError(f"head {name!r}: weight {value.strip()!r} is not a number") from None
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"head {name!r}: weight must be a finite number ≥ 0, got {w}")
        weights[name] = w
    total = sum(weights.values())
    if total <= 0:
        raise ValueError("heads: at least one head needs a weight above 0")
    return {h: weights[h] / total for h in HEADS if weights.get(h, 0) > 0}


def format_heads(weights: dict[str, float]) -> str:
    return ",".join(f"{h}:{w:g}" for h, w in weights.items())
