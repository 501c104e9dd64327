"""How the service grows with its catalog: one synthetic catalog per size N, indexed, served and
measured, a row of the table per N.

    .venv/bin/python -m benchmarks.growth                       # N = 10k and 100k
    .venv/bin/python -m benchmarks.growth --sizes 10000 100000 1000000 --json

Per N (benchmarks/growth_catalog.py: real-looking books, keys from a stand-in encoder recorded
as the real model's, so the server encodes queries with the real model): the index build's
books/s with the stand-in's own time taken out (what the pipeline costs beside an encoder),
beside the real encoder's books/s on the same books (its ceiling); then `attend serve` on the
index: the time from start to ready (the first start after the index run, which writes the
served form, and a restart, which reads it), its resident memory over the keys' own bytes once
searches have touched them, GET /search p50/p99 under `wrk` at 1 and 32 connections (unique
queries; the 32 for at least five times 32 searches at one connection's p50, so that whole
batches finish in the cell), GET /books/{id}/similar and POST /recommend p50 one at a time;
then a re-index that changes 1% of the descriptions and the swap to that generation (the
server's log: the diff folded in, the search and more-like-this BM25 indexes rebuilt), with the
BM25 builds at start and at the swap. Steps that grow faster than N show as a per-book cost
that rises along the column.

Beside each row, what a search and the memory are held to: the search's floor (one `attend` of
B = 1 over N random unit keys per dense head, plus the real encoder on one query, both in this
process) timed in turns with one client's GET /search once the server is ready (`Floor`), the
search's p50 over it; and the server's RSS less that of a process holding the model alone, over
the keys' bytes.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any

import httpx

from benchmarks._common import dump_json, log, out, run_as_the_service, table
from benchmarks.ceiling import cpu_seconds
from benchmarks.growth_catalog import (
    Source,
    StandInEncoder,
    changed_catalog,
    synthetic_books,
    write_catalog,
)
from benchmarks.queries import ANGLES, QUERIES, percentile, unique_queries
from benchmarks.reindex import TimedEncoder
from benchmarks.service import free_port, wrk_cells
from indexer import db, pipeline
from indexer.batches import FIELDS
from indexer.settings import IndexSettings
from models.encoder import Encoder
from service.config.head_weights import DENSE_HEADS
from service.config.settings import ServiceSettings
from service.engine.startup import build_encoder

_LOGS = {
    "bm25_s": re.compile(r"built the BM25 index of (\d+) books in ([\d.]+) s"),
    "like_this_s": re.compile(r"built the more-like-this BM25 of (\d+) books in ([\d.]+) s"),
    "swap_s": re.compile(r"serving generation \d+ \((\d+) books; diff.*\) after ([\d.]+) s"),
}


class LoggedServer:
    """`attend serve` on a free port, its INFO log in a file."""

    def __init__(self, url: str, log_path: Path):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {
            **os.environ,
            "ATTEND_DATABASE_URL": url,
            "ATTEND_LOG_LEVEL": "info",
            "ATTEND_QUERY_CACHE_SIZE": "1",
            "ATTEND_GENERATION_POLL_S": "0.5",
            "HF_HUB_OFFLINE": "1",
        }
        attend = str(Path(sys.executable).with_name("attend"))
        self._log = log_path.open("w")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [attend, "serve", "--port", str(self.port)],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 1800) -> float:
        """Seconds from the start to the first 200 of /readyz."""
        while time.perf_counter() - self.started < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"attend serve exited: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base}/readyz", timeout=2).status_code == 200:
                    return time.perf_counter() - self.started
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError("attend serve did not come up")

    def rss_bytes(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        (kb,) = re.findall(r"VmRSS:\s+(\d+) kB", status)
        return int(kb) * 1024

    def generation(self) -> int | None:
        generation = httpx.get(f"{self.base}/healthz", timeout=10).json().get("generation")
        return None if generation is None else int(generation)

    def logged(self, name: str) -> list[float]:
        return [float(m.group(2)) for m in _LOGS[name].finditer(self.log_path.read_text())]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self._log.close()


def index(url: str, catalog: Path) -> dict[str, float]:
    """The catalog indexed with the stand-in encoder: books/s of the pipeline beside it."""
    engine = db.create_db_engine(url)
    timed = TimedEncoder(StandInEncoder())
    try:
        report = pipeline.run(
            IndexSettings(database_url=url), engine=engine, encoder=timed, path=catalog
        )
    finally:
        engine.dispose()
    own = report.seconds - timed.seconds
    return {
        "books": report.books,
        "seconds": report.seconds,
        "pipeline_books_per_s": report.books / own if own > 0 else 0.0,
        "embedded": report.embedded,
    }


def encoder_ceiling(books: list[dict[str, Any]]) -> float:
    """The real encoder's books/s on `books` (title and description each), as `attend index`
    builds it."""
    encoder = build_encoder(IndexSettings())
    texts = [t for b in books for t in (b["title"], b["description"])]
    encoder.encode(texts[:8])
    t0 = time.perf_counter()
    for i in range(0, len(texts), 64):
        encoder.encode(texts[i : i + 64])
    return len(books) / (time.perf_counter() - t0)


class Floor:
    """What one search over N books cannot go below: the encoder on one query (the service's
    backend) and one `attend` of B = 1 over N random unit keys in the served (d, N) layout,
    which a search runs once per dense head. Timed in this process in turns with one client's
    GET /search on the server (idle between requests), so that both see the same machine: its
    memory bandwidth, which the 1M-key pass is bound by, moved by a third within an hour here."""

    def __init__(self, n: int, encoder: Encoder):
        import torch

        g = torch.Generator().manual_seed(n)
        keys = torch.randn(n, StandInEncoder.dim, generator=g)
        keys /= keys.norm(dim=1, keepdim=True)
        self.keys = keys.T.contiguous().T  # (N, d), a view of (d, N) memory, as served
        del keys
        self.q = torch.randn(64, StandInEncoder.dim, generator=g)
        self.q /= self.q.norm(dim=1, keepdim=True)
        self.encoder = encoder

    def attend_ms(self, calls: int) -> float:
        from models.attention import attend

        q, keys = self.q, self.keys
        return p50_of(lambda i: attend(q[i : i + 1], keys, k=10, scale=20.0), calls)

    def in_turns(self, client: httpx.Client, rounds: int = 5, calls: int = 8) -> dict[str, Any]:
        """Per round: `calls` GET /search of queries never asked (no query cache), then the
        encoder and `attend` on as many; p50s in ms, and each round's p50 over its floor."""
        texts = [f"{q}, {angle}" for angle in ANGLES for q in QUERIES]  # not wrk's texts
        self.attend_ms(1)  # the BLAS choice and first touch out of the timing
        self.encoder.encode(texts[-1:])
        client.get("/search", params={"q": texts[-1]})
        rows = []
        for r in range(rounds):
            batch = texts[r * calls : (r + 1) * calls]
            search = p50_ms(lambda i, b=batch: client.get("/search", params={"q": b[i]}), calls)
            encoder = p50_of(lambda i, b=batch: self.encoder.encode([b[i]]), calls)
            attend = self.attend_ms(calls)
            floor = len(DENSE_HEADS) * attend + encoder
            rows.append(
                {
                    "search_ms": search,
                    "encoder_ms": encoder,
                    "attend_ms": attend,
                    "floor_ms": floor,
                    "ratio": search / floor,
                }
            )
        mid = sorted(rows, key=lambda row: row["ratio"])[len(rows) // 2]
        return {**mid, "ratios": [row["ratio"] for row in rows]}


def model_rss_bytes() -> int:
    """The resident memory of a process that holds the service's encoder after one query: the
    runtime and the model, which a server of any catalog holds too."""
    code = (
        "import re, pathlib\n"
        "from service.config.settings import ServiceSettings\n"
        "from service.engine.startup import build_encoder\n"
        "build_encoder(ServiceSettings()).encode(['a query'])\n"
        "status = pathlib.Path('/proc/self/status').read_text()\n"
        "print(re.findall(r'VmRSS:\\s+(\\d+) kB', status)[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    )
    return int(done.stdout.split()[-1]) * 1024


def p50_of(run: Any, n: int) -> float:
    """p50 in ms of run(i) for i < n."""
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        run(i)
        times.append((time.perf_counter() - t0) * 1000)
    return percentile(times, 50)


def p50_ms(send: Any, n: int) -> float:
    """p50 in ms of the requests send(i) for i < n, each of which must answer 200."""

    def checked(i: int) -> None:
        response = send(i)
        if response.status_code != 200:
            raise RuntimeError(f"{response.request.url} answered {response.status_code}")

    return p50_of(checked, n)


def serve_and_measure(
    url: str, n: int, catalog: Path, folder: Path, seconds: float, *, encoder: Encoder
) -> dict[str, Any]:
    floor = Floor(n, encoder)  # its keys built before the server starts, not while it is timed
    # the first start after an index run writes the served form; a restart reads it (what
    # every start but the first costs: an orchestrator's restart, another replica)
    first = LoggedServer(url, folder / f"serve-{n}-first.log")
    try:
        first_ready_s = first.wait_ready()
    finally:
        first.stop()
    server = LoggedServer(url, folder / f"serve-{n}.log")
    try:
        ready_s = server.wait_ready()
        with httpx.Client(base_url=server.base, timeout=120) as client:
            against_floor = floor.in_turns(client)
        rss = server.rss_bytes()  # once searches have touched every key
        del floor
        queries = unique_queries()
        search: dict[int, dict[str, Any]] = {}
        for c in (1, 32):
            # long enough for a few batches of c at one client's latency: at 1M books a batch
            # of 32 outlasts 4 s, and wrk counts no request still in flight when it stops
            # (whole seconds: wrk reads no fraction there)
            cell_s = (
                seconds if c == 1 else max(seconds, math.ceil(5 * c * search[1]["p50_ms"] / 1000))
            )
            (row,) = wrk_cells({"http": server}, [c], cell_s, queries)  # type: ignore[dict-item]
            search[c] = row
        ids = [f"syn-{(i * 7919) % n:07d}" for i in range(20)]
        with httpx.Client(base_url=server.base, timeout=120) as client:
            similar = p50_ms(lambda i: client.get(f"/books/{ids[i]}/similar"), len(ids))
            recommend = p50_ms(
                lambda i: client.post("/recommend", json={"liked": [ids[i], ids[-1 - i]]}),
                len(ids),
            )
        before = server.generation()
        edited = folder / f"books-{n}-edited.jsonl"
        changed = changed_catalog(catalog, edited, 0.01)
        cpu0 = cpu_seconds(server.proc.pid)
        reindex = index(url, edited)
        while server.generation() == before:
            time.sleep(0.2)
        swap_cpu = cpu_seconds(server.proc.pid) - cpu0
        bm25, like_this, swaps = (server.logged(k) for k in ("bm25_s", "like_this_s", "swap_s"))
    finally:
        server.stop()
    return {
        "first_ready_s": first_ready_s,
        "start_to_ready_s": ready_s,
        "rss_bytes": rss,
        "floor": against_floor,
        "search": {
            c: {k: row[k] for k in ("rps", "p50_ms", "p99_ms")} for c, row in search.items()
        },
        "similar_p50_ms": similar,
        "recommend_p50_ms": recommend,
        "changed_books": changed,
        "reindex_1pct_s": reindex["seconds"],
        "swap_s": swaps[-1] if swaps else None,
        "swap_server_cpu_s": swap_cpu,
        "bm25_build_s": bm25,
        "like_this_build_s": like_this,
    }


def grow(n: int, source: Source, folder: Path, seconds: float, encoder: Encoder) -> dict[str, Any]:
    catalog = folder / f"books-{n}.jsonl"
    write_catalog(catalog, synthetic_books(source, n))
    url = f"sqlite:///{folder / f'growth-{n}.db'}"
    log(f"N={n}: indexing …")
    built = index(url, catalog)
    log(f"N={n}: {built['pipeline_books_per_s']:.0f} books/s beside the stand-in; serving …")
    served = serve_and_measure(url, n, catalog, folder, seconds, encoder=encoder)
    keys_bytes = n * len(FIELDS) * StandInEncoder.dim * 4
    return {"books": n, "index": built, "keys_bytes": keys_bytes, **served}


def normalize_by_the_loop(text: str) -> str:
    """models.text.normalize_text as it was before its fast path: a character at a time."""
    if text.isascii():
        return text
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    out: list[str] = []
    base = False
    for ch in unicodedata.normalize("NFKC", text):
        category = unicodedata.category(ch)
        if category in ("Mn", "Mc", "Me"):
            if base:
                out.append(ch)
            continue
        out.append(ch)
        base = category[0] in "LN"
    return unicodedata.normalize("NFKC", "".join(out))


def lexical_versus(n: int, source: Source, rounds: int = 2) -> dict[str, Any]:
    """The BM25 and more-like-this builds of `n` synthetic books (as a start and a swap build
    them) with normalize_text before and after its fast path, in turns in this process."""
    from models.text import normalize_text
    from service.engine import lexical

    books = list(synthetic_books(source, n))
    documents = [lexical.book_document(b["title"], b["authors"], b["description"]) for b in books]
    texts = [f"{b['title']}. {b['description']}" for b in books]
    times: dict[str, list[float]] = {"loop": [], "fast path": []}
    try:
        for r in range(rounds):
            ways = (("loop", normalize_by_the_loop), ("fast path", normalize_text))
            for name, normalize in ways if r % 2 == 0 else ways[::-1]:
                setattr(lexical, "normalize_text", normalize)  # noqa: B010  # what it calls
                t0 = time.perf_counter()
                lexical.LexicalIndex(documents)
                lexical.LikeThisIndex(texts)
                times[name].append(time.perf_counter() - t0)
    finally:
        setattr(lexical, "normalize_text", normalize_text)  # noqa: B010
    before, after = (statistics.median(times[k]) for k in ("loop", "fast path"))
    return {"books": n, "seconds": times, "after_over_before": after / before}


def report(rows: list[dict[str, Any]], ceiling: float, model_rss: int) -> None:
    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    lines = []
    for r in rows:
        s1, s32 = r["search"][1], r["search"][32]
        lines.append(
            [
                f"{r['books']:,}",
                f"{r['index']['pipeline_books_per_s']:.0f}",
                f"{r['first_ready_s']:.1f} / {r['start_to_ready_s']:.1f}",
                f"{r['rss_bytes'] / 2**20:.0f} / {r['keys_bytes'] / 2**20:.0f}",
                f"{s1['p50_ms']:.1f} / {s1['p99_ms']:.1f}",
                f"{s32['p50_ms']:.0f} / {s32['p99_ms']:.0f} ({s32['rps']:.0f}/s)",
                f"{r['similar_p50_ms']:.1f} / {r['recommend_p50_ms']:.1f}",
                f"{r['reindex_1pct_s']:.1f} / {ms(r['swap_s'])}",
                " / ".join(f"{x:.2f}" for x in r["bm25_build_s"] + r["like_this_build_s"]),
            ]
        )
    header = ["books", "index books/s", "ready s: first / restart", "RSS / keys MiB"]
    header += ["search 1: p50/p99 ms"]
    header += ["32: p50/p99 ms", "similar / recommend p50", "1% re-index / swap s"]
    out(table([*header, "BM25 s (start, swap; like-this)"], lines))
    out(
        f"\nindex books/s: the pipeline's own (the stand-in encoder's time taken out); the real "
        f"encoder embeds {ceiling:.1f} books/s here, the ceiling of a real index's rate. ready: "
        "the first start after the index run (which writes the served form) and a restart. "
        "RSS: the restarted server's once searches have touched its keys (the model included)."
    )
    bounds = []
    for r in rows:
        f = r["floor"]
        bounds.append(
            [
                f"{r['books']:,}",
                f"{f['search_ms']:.1f}",
                f"{len(DENSE_HEADS)} × {f['attend_ms']:.2f} + {f['encoder_ms']:.2f}",
                f"{f['ratio']:.2f}x ({min(f['ratios']):.2f}-{max(f['ratios']):.2f})",
                f"{(r['rss_bytes'] - model_rss) / r['keys_bytes']:.2f}x",
            ]
        )
    header = ["books", "search p50 ms", "floor: attend ms × heads + encoder ms"]
    out("\n" + table([*header, "search / floor", "(RSS - model) / keys"], bounds))
    out(
        f"\nsearch / floor: {len(rows[0]['floor']['ratios'])} rounds in turns, each 8 GET /search "
        "(queries never asked, one client) then the floor on as many: one attend of B = 1 over "
        "N random unit keys per dense head and the service's encoder on one query, in this "
        "process; the median round (the range in brackets). model: the RSS of a process "
        f"holding the service's encoder alone, {model_rss / 2**20:.0f} MiB."
    )


def main() -> None:
    run_as_the_service()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--seconds", type=float, default=5.0, help="per wrk cell")
    parser.add_argument("--folder", type=Path, help="keep the catalogs and indexes here")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--lexical-versus",
        type=int,
        metavar="N",
        help="only the BM25 builds of N books, normalize_text before / after its fast path",
    )
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    source = Source.read()
    if args.lexical_versus:
        result = lexical_versus(args.lexical_versus, source)
        if args.json:
            dump_json(result)
            return
        medians = ", ".join(
            f"{k} {statistics.median(v):.2f} s" for k, v in result["seconds"].items()
        )
        out(
            f"BM25 + more-like-this builds of {result['books']:,} books: {medians}; "
            f"after / before {result['after_over_before']:.2f}"
        )
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.folder or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        ceiling = encoder_ceiling(list(synthetic_books(source, 128, seed=7)))
        model_rss = model_rss_bytes()
        encoder = build_encoder(ServiceSettings())
        rows = [grow(n, source, folder, args.seconds, encoder) for n in args.sizes]
    if args.json:
        dump_json({"encoder_books_per_s": ceiling, "model_rss_bytes": model_rss, "rows": rows})
    else:
        report(rows, ceiling, model_rss)


if __name__ == "__main__":
    main()
