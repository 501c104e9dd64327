"""The relevance suite's printed report and its --json (benchmarks/relevance.py computes the
figures)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from benchmarks.relevance_labels import Scored
from benchmarks.relevance_rank import ROWS
from benchmarks.relevance_reader import READER_ROWS
from service.config.settings import ServiceSettings
from service.engine.mixing import NO_STRONG_MATCH_BELOW

PER_LINE = 4  # kinds side by side in one block of the table
ALL_ROWS = (*ROWS, *READER_ROWS)  # a kind has some of them (topical_dev: the README's)
Interval = tuple[float, float, float]  # mean difference, low, high (paired bootstrap 95%)


@dataclass
class Figures:
    """Everything a run measured, per kind of query (only the kinds it ran)."""

    size: int
    counts: dict[str, int] = field(default_factory=dict)
    table: dict[str, dict[str, Scored]] = field(default_factory=dict)
    buried: dict[str, int] = field(default_factory=dict)
    intervals: dict[str, tuple[str, float, float, float]] = field(default_factory=dict)
    binary: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # kind → row → nDCG
    versus: dict[str, dict[str, Interval]] = field(default_factory=dict)  # topical_dev's others
    works: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # kind → row
    served: dict[str, dict[str, float]] = field(default_factory=dict)  # recommend by default
    served_per_pair: dict[str, list[float]] = field(default_factory=dict)
    example: list[str] = field(default_factory=list)  # a doubled work in a served top 10
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
        f"similar heads {settings.similar_heads} (scales {settings.similar_head_scales}); "
        f"recommend heads {settings.recommend_heads}",
    ]
    for start in range(0, len(kinds), PER_LINE):
        block = kinds[start : start + PER_LINE]
        lines += [
            "",
            f"{'':<12}" + "".join(f"{k:^27}" for k in block),
            f"{'':<12}" + "".join(f"{'nDCG@10':>9}{'MRR@10':>9}{'R@100':>9}" for _ in block),
        ]
        for row in _rows(f.table, block):
            cells = ""
            for k in block:
                if row not in f.table[k]:
                    cells += f"{'':>27}"
                    continue
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
                f"{k}{'' if vs == 'rrf' else f' (− {vs})'} {d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
                for k, (vs, d, lo, hi) in f.intervals.items()
            ),
        ]
    for kind, binary in f.binary.items():
        lines.append(
            f"{kind}: binary nDCG@10 (gain 1 for any relevant book): "
            + ", ".join(f"{row} {statistics.fmean(v):.3f}" for row, v in binary.items())
        )
        lines.append(
            f"{kind}: attend " + ", ".join(_interval(n, i) for n, i in f.versus[kind].items())
        )
    lines += _works(f)
    if f.strengths:
        lines.append(
            f"no_strong_match (strength < {NO_STRONG_MATCH_BELOW}, no query word in the "
            "catalog, or no book's title or description cosine at ATTEND_MIN_MATCH_COSINE): "
            f"{_flagged(f.strengths['labelled'])} of the labelled and subject "
            f"queries; {_flagged(f.strengths['nonsense'])} of the nonsense ones ("
            + ", ".join(f"{s:.2f}{'*' if flag else ''}" for s, flag in f.strengths["nonsense"])
            + "; * flagged); "
            + f"{_flagged(f.strengths.get('off_topic', []))} of the off-topic ones"
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


def _rows(table: dict[str, dict[str, Scored]], kinds: list[str]) -> list[str]:
    present = {row for k in kinds for row in table[k]}
    return [row for row in ALL_ROWS if row in present]


def _interval(name: str, i: Interval) -> str:
    return f"{name} {i[0]:+.3f} [{i[1]:+.3f}, {i[2]:+.3f}]"


def _works(f: Figures) -> list[str]:
    """Distinct works per top 10 (kinds side by side), and recommend as the service answers."""
    if not f.works:
        return []
    kinds = list(f.works)
    lines = [
        "",
        "distinct works in the top 10 (mean; a work = normalised title + first author; fewer "
        "where a row returns fewer books) / share of top 10s holding two editions of one work "
        "/ mean cosine of two of its books' description keys (lower: more varied)",
        f"{'':<12}" + "".join(f"{k:>21}" for k in kinds),
    ]
    for row in ALL_ROWS:
        if not any(row in f.works[k] for k in kinds):
            continue
        cells = "".join(
            f"{w['distinct_works@10']:>9.2f} {w['doubled@10']:>5.2f} {w['alike@10']:>5.2f}"
            if (w := f.works[k].get(row))
            else f"{'':>21}"
            for k in kinds
        )
        lines.append(f"{row:<12}{cells}")
    if f.served:
        pairs = len(next(iter(f.served_per_pair.values())))
        lines += [
            "",
            f"recommend as served (k = 10, the service's defaults, the liked authors kept; "
            f"{pairs} pairs): share of the top 10 by a liked author (mean over the pairs; "
            "the issue's bar: ≤ 0.3) / distinct works / share doubled / mean cosine of two",
        ]
        lines += [
            f"  {row:<12}{s['liked_authors@10']:>6.3f}{s['distinct_works@10']:>9.2f}"
            f"{s['doubled@10']:>7.2f}{s['alike@10']:>7.2f}"
            for row, s in f.served.items()
        ]
        if f.example:
            lines.append(f"  e.g. attend's top 10 held both {' and '.join(f.example)}")
    return lines


def _flagged(strengths: list[tuple[float, bool]]) -> str:
    values = [s for s, _ in strengths]
    if not values:
        return "none asked"
    return (
        f"{sum(f for _, f in strengths)}/{len(strengths)} (strength min {min(values):.2f}, "
        f"median {statistics.median(values):.2f})"
    )


def as_json(settings: ServiceSettings, f: Figures) -> dict[str, object]:
    return {
        "catalog_size": f.size,
        "defaults": {
            "heads": settings.heads,
            "head_scales": settings.head_scales,
            "similar_heads": settings.similar_heads,
            "similar_head_scales": settings.similar_head_scales,
            "recommend_heads": settings.recommend_heads,
        },
        "queries": f.counts,
        "means": {k: {r: s.means() for r, s in rows.items()} for k, rows in f.table.items()},
        "per_query": {k: {r: s.ndcg for r, s in rows.items()} for k, rows in f.table.items()},
        "buried": f.buried,
        "attend_minus_rrf_ndcg_95": {k: [lo, hi] for k, (_, _, lo, hi) in f.intervals.items()},
        "attend_minus_versus": {
            k: {"versus": vs, "mean": d, "low": lo, "high": hi}
            for k, (vs, d, lo, hi) in f.intervals.items()
        }
        | {
            f"{k} {name}": {"mean": i[0], "low": i[1], "high": i[2]}
            for k, named in f.versus.items()
            for name, i in named.items()
        },
        "binary_ndcg@10": {
            k: {r: statistics.fmean(v) for r, v in rows.items()} for k, rows in f.binary.items()
        },
        "binary_per_query": f.binary,
        "works@10": f.works,
        "recommend_as_served": f.served,
        "recommend_as_served_liked_share_per_pair": f.served_per_pair,
        "match_strength": f.strengths,
        "author_checks": f.author_checks,
        "junk_top5_share": {row: sum(s) / len(s) for row, s in f.junk.items()},
        "junk_per_book": f.junk,
    }
