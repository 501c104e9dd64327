"""The relevance suite's printed report (benchmarks/relevance.py computes the figures)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from benchmarks.relevance_labels import Scored
from benchmarks.relevance_rank import ROWS
from service.engine.searcher import NO_STRONG_MATCH_BELOW
from service.settings import ServiceSettings

PER_LINE = 4  # kinds side by side in one block of the table


@dataclass
class Figures:
    """Everything a run measured, per kind of query (only the kinds it ran)."""

    size: int
    counts: dict[str, int] = field(default_factory=dict)
    table: dict[str, dict[str, Scored]] = field(default_factory=dict)
    buried: dict[str, int] = field(default_factory=dict)
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    strengths: dict[str, list[tuple[float, bool]]] = field(default_factory=dict)
    author_checks: dict[str, dict[str, float]] = field(default_factory=dict)
    junk: dict[str, list[float]] = field(default_factory=dict)  # row → share per book


def report(settings: ServiceSettings, f: Figures) -> str:
    kinds = list(f.table)
    counts = [f"{f.counts[k]} {k}" for k in kinds]
    if f.junk:
        counts.append(f"{len(next(iter(f.junk.values())))} junk-audit")
    lines = [
        f"Relevance on {f.size} books: {', '.join(counts)} queries",
        f"attend: search heads {settings.heads} (scales {settings.head_scales}); "
        f"similar heads {settings.similar_heads} (scales {settings.similar_head_scales})",
    ]
    for start in range(0, len(kinds), PER_LINE):
        block = kinds[start : start + PER_LINE]
        lines += [
            "",
            f"{'':<12}" + "".join(f"{k:^27}" for k in block),
            f"{'':<12}" + "".join(f"{'nDCG@10':>9}{'MRR@10':>9}{'R@100':>9}" for _ in block),
        ]
        for row in ROWS:
            cells = ""
            for k in block:
                m = f.table[k][row].means()
                cells += f"{m['ndcg@10']:>9.3f}{m['mrr@10']:>9.3f}{m['recall@100']:>9.3f}"
            lines.append(f"{row:<12}{cells}")
    lines.append("")
    if kinds:
        lines += [
            "buried (a head alone had a relevant book in its top 10, attend none): "
            + ", ".join(f"{k} {f.buried[k]}/{f.counts[k]}" for k in kinds),
            "attend − rrf, nDCG@10, paired bootstrap 95%: "
            + ", ".join(
                f"{k} {_mean_diff(f.table[k]):+.3f} [{lo:+.3f}, {hi:+.3f}]"
                for k, (lo, hi) in f.intervals.items()
            ),
        ]
    if f.strengths:
        lines.append(
            f"no_strong_match (strength < {NO_STRONG_MATCH_BELOW} or no query word in the "
            f"catalog): {_flagged(f.strengths['labelled'])} of the labelled and subject "
            f"queries; {_flagged(f.strengths['nonsense'])} of the nonsense ones ("
            + ", ".join(f"{s:.2f}{'*' if flag else ''}" for s, flag in f.strengths["nonsense"])
            + "; * flagged)"
        )
    if f.author_checks:
        lines.append(
            "authors: by_top5 = share of the author queries (author with ≥ 5 books) with ≥ 4 "
            "of the top 5 by the author; about_top1 = share of the 'about X' queries whose "
            "first result is about X"
        )
        lines += [
            f"  {row:<12}by_top5 {c['by_top5']:.3f}   about_top1 {c['about_top1']:.3f}"
            for row, c in f.author_checks.items()
        ]
    if f.junk:
        lines.append(
            "junk audit: mean share of the top 5 similar books sharing neither an author, a "
            "series nor a heading with the book (standalone books; lower is better)"
        )
        lines += [f"  {row:<12}{statistics.fmean(s):.3f}" for row, s in f.junk.items()]
    return "\n".join(lines)


def _flagged(strengths: list[tuple[float, bool]]) -> str:
    values = [s for s, _ in strengths]
    return (
        f"{sum(f for _, f in strengths)}/{len(strengths)} (strength min {min(values):.2f}, "
        f"median {statistics.median(values):.2f})"
    )


def _mean_diff(rows: dict[str, Scored]) -> float:
    return statistics.fmean(rows["attend"].ndcg) - statistics.fmean(rows["rrf"].ndcg)
