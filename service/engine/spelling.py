"""Words one edit apart: how a misspelt author's name ("tolkein", "pratchet") is read as the
catalog's own (service/engine/catalog_names.py)."""

from __future__ import annotations


def one_edit(a: str, b: str) -> bool:
    """One substitution, insertion, deletion or swap of neighbours apart (a ≠ b)."""
    if len(a) < len(b):
        a, b = b, a
    if len(a) - len(b) > 1:
        return False
    if len(a) - len(b) == 1:
        return any(a[:i] + a[i + 1 :] == b for i in range(len(a)))
    diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    if len(diff) == 1:
        return True
    i, j = diff if len(diff) == 2 else (0, 0)
    return len(diff) == 2 and j == i + 1 and a[i] == b[j] and a[j] == b[i]


def deletions(word: str) -> set[str]:
    """Every string one deletion from `word` (symmetric-delete spelling correction: two words
    one substitution, insertion, deletion or transposition apart share one of these)."""
    return {word[:i] + word[i + 1 :] for i in range(len(word))}
