"""Queries the benchmarks send, and the percentile they report."""

from __future__ import annotations

# Twenty everyday catalog searches, short as people type them.
QUERIES = [
    "generative AI",
    "machine learning for beginners",
    "a wizard school",
    "space opera empire",
    "history of the second world war",
    "romance in victorian england",
    "cooking italian food",
    "how the brain works",
    "murder mystery detective",
    "relational databases and SQL",
    "children's picture book about animals",
    "philosophy of mind",
    "the american civil war",
    "learning to program in python",
    "a dragon and a quest",
    "economics of inequality",
    "poetry collection",
    "vampires",
    "climate change",
    "biography of a scientist",
]
ANGLES = [
    "for beginners", "history of", "a novel about", "the best book on", "introduction to",
    "classic", "modern", "illustrated", "short", "biography", "essays on", "a guide to",
    "the science of", "stories about", "textbook", "funny", "dark", "young adult", "memoir",
    "handbook",
]  # fmt: skip


def unique_queries() -> list[str]:
    """400 distinct texts, so that no request is answered by the query cache."""
    return [f"{angle} {query}" for angle in ANGLES for query in QUERIES]


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank p-th percentile (p in 0…100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]
