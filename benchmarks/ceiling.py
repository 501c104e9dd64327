"""The service against its own ceiling: the searcher's batched path in this process beside the
same database served over HTTP under `wrk`, cell by cell, and where the difference goes.

    .venv/bin/python -m benchmarks.ceiling --database-url sqlite:////tmp/books.db
    .venv/bin/python -m benchmarks.ceiling --clients 1 32 --seconds 5 --rounds 3 --json
    .venv/bin/python -m benchmarks.ceiling --profile 10    # and py-spy on the server, 32 clients
    .venv/bin/python -m benchmarks.ceiling --clients 1 --profile 10 --profile-clients 1

For each B = clients (1, 8, 32, 64), in turns, `--rounds` times: (1) the engine's own rate, the
searcher in this process answering batches of B unique queries (`Searcher.search_now`: one
encoder call, one ranking, the engine's result objects; with the service's thread settings and
its encoder), and (2) `attend serve` on the same database under `wrk` (Debian's package) with B
connections, unique queries rotated by a Lua script. The ratio is (2)'s requests/s over (1)'s
queries/s; p50 and p99 are a batch's latency in-process, a request's under `wrk`. The query
cache is off in both (size 1): every query runs the encoder, as a new query does. Then, for each
B > 1, B requests sent at once must be answered as the same query alone (in this process and
over HTTP). With `--profile S`, py-spy (PyPI's; on PATH or `--py-spy`) samples the server for S
seconds under `wrk` at 32 clients (`--profile-clients`) and the samples are summed by thread
and by what they were doing (benchmarks/ceiling_profile.py).

The database must hold an index (`attend index`). `wrk` and py-spy run on the cores the server
runs on (two here): the HTTP figures are a floor, and the ratio is what the service keeps of the
engine's rate on the same machine, in the same minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._common import dump_json, log, out, run_as_the_service, table
from benchmarks.queries import percentile, unique_queries
from benchmarks.service import Connection, Server, wrk_cells

CLIENTS = [1, 8, 32, 64]
SERVER_ENV = {"ATTEND_QUERY_CACHE_SIZE": "1", "ATTEND_LOG_LEVEL": "warning"}


@dataclass
class Rates:
    """One mode's cells at one B, over the rounds."""

    per_s: list[float] = field(default_factory=list)
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)  # CPU time of the process per query
    loop_ms: list[float] = field(default_factory=list)  # of the server's event loop, a request

    def add(
        self, per_s: float, p50_ms: float, p99_ms: float, cpu_ms: float, loop_ms: float = 0.0
    ) -> None:
        self.per_s.append(per_s)
        self.p50_ms.append(p50_ms)
        self.p99_ms.append(p99_ms)
        self.cpu_ms.append(cpu_ms)
        self.loop_ms.append(loop_ms)

    def summary(self) -> dict[str, float]:
        return {
            "per_s": statistics.median(self.per_s),
            "p50_ms": statistics.median(self.p50_ms),
            "p99_ms": statistics.median(self.p99_ms),
            "cpu_ms": statistics.median(self.cpu_ms),
            "loop_ms": statistics.median(self.loop_ms),
        }


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User and system CPU time so far of process `pid`, all its threads, or of its thread
    `thread` (the main thread's id is the pid: the server's event loop). Linux /proc."""
    stat = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Engine:
    """The searcher as `attend serve` builds it, in this process."""

    def __init__(self, url: str):
        from indexer import db
        from service.commands.threads import apply_serve_threads
        from service.config.settings import ServiceSettings
        from service.engine.reloader import freeze_long_lived
        from service.engine.startup import build_searcher
        from service.engine.tickets import SearchOptions

        settings = ServiceSettings(database_url=url, query_cache_size=1)
        apply_serve_threads(settings)  # torch's threads as the server sets them
        self._db = db.create_db_engine(url)
        self.searcher = build_searcher(settings, engine=self._db)
        self.options = SearchOptions(k=10)
        freeze_long_lived()  # as the server's start does: no full collection walks the index
        self.searcher.start()

    def cell(
        self, batch: int, queries: list[str], seconds: float, start: int, *, worker: bool
    ) -> dict[str, Any]:
        """`seconds` of queries from `queries[start:]` (wrapping): in batches of `batch` in
        this thread (`search_now`: one encoder call, one ranking), or with `worker` from
        `batch` clients of one query each through the searcher's line and worker, the path a
        served request takes without the HTTP around it."""
        latencies: list[float] = []
        position = [start]

        def texts(n: int) -> list[str]:
            i = position[0]
            position[0] += n
            return [queries[(i + j) % len(queries)] for j in range(n)]

        async def client(t_end: float) -> None:
            while time.perf_counter() < t_end:
                t = time.perf_counter()
                await self.searcher.search(texts(1), self.options)
                latencies.append((time.perf_counter() - t) * 1000)

        t0, cpu0 = time.perf_counter(), cpu_seconds(os.getpid())
        t_end = t0 + seconds
        if worker:

            async def clients() -> None:
                await asyncio.gather(*(client(t_end) for _ in range(batch)))

            asyncio.run(clients())
        else:
            while time.perf_counter() < t_end:
                t = time.perf_counter()
                self.searcher.search_now(texts(batch), self.options)
                latencies.append((time.perf_counter() - t) * 1000)
        elapsed, cpu = time.perf_counter() - t0, cpu_seconds(os.getpid()) - cpu0
        answered = position[0] - start
        return {
            "per_s": answered / elapsed,
            "cpu_ms": 1000 * cpu / answered,
            "p50_ms": percentile(latencies, 50),
            "p99_ms": percentile(latencies, 99),
            "next": position[0],
        }

    def ids(self, query: str) -> list[str]:
        (result,) = self.searcher.search_now([query], self.options)
        return [hit.book.id for hit in result.results]

    def close(self) -> None:
        self.searcher.close()
        self._db.dispose()


async def at_once(base: str, queries: list[str]) -> dict[str, list[str]]:
    """Each query on its own connection, all sent together: the ids each answer ranks."""
    connections = [await Connection.open(base) for _ in queries]
    try:
        replies = await asyncio.gather(
            *(
                c.get("/search", {"q": q, "k": 10})
                for c, q in zip(connections, queries, strict=True)
            )
        )
    finally:
        for c in connections:
            c.close()
    answers = {}
    for q, (status, body) in zip(queries, replies, strict=True):
        if status != 200:
            raise RuntimeError(f"GET /search?q={q!r} answered {status}: {body[:200]!r}")
        answers[q] = [hit["id"] for hit in json.loads(body)["results"]]
    return answers


def check_answers(
    base: str, engine: Engine, queries: list[str], clients: list[int]
) -> dict[str, int]:
    """Per B > 1: of B queries sent at once, how many answers differ from the same query asked
    alone, over HTTP one at a time and in this process."""
    differing = {}
    offset = 0
    for c in (c for c in clients if c > 1):
        sample = queries[offset : offset + c]
        offset += c
        together = asyncio.run(at_once(base, sample))
        alone_http = {q: asyncio.run(at_once(base, [q]))[q] for q in sample}
        differing[f"{c} at once vs alone over HTTP"] = sum(
            together[q] != alone_http[q] for q in sample
        )
        differing[f"{c} at once vs in-process"] = sum(together[q] != engine.ids(q) for q in sample)
    return differing


MODES = ("call", "worker", "http")  # search_now of B queries; B in-process clients; B over HTTP


def http_cell(server: Server, clients: int, seconds: float, queries: list[str]) -> dict[str, Any]:
    """`wrk` with `clients` connections for `seconds`; the server's CPU time per request, all
    its threads and its event loop's alone."""
    pid = server.proc.pid
    cpu0, loop0 = cpu_seconds(pid), cpu_seconds(pid, pid)
    (row,) = wrk_cells({"http": server}, [clients], seconds, queries)
    cpu, loop = cpu_seconds(pid) - cpu0, cpu_seconds(pid, pid) - loop0
    if row["non_2xx"]:
        raise RuntimeError(f"wrk at {clients} clients got {row['non_2xx']} non-2xx answers")
    n = row["rps"] * seconds
    return {"per_s": row["rps"], "p50_ms": row["p50_ms"], "p99_ms": row["p99_ms"],
            "cpu_ms": 1000 * cpu / n, "loop_ms": 1000 * loop / n}  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    queries = unique_queries()
    engine = Engine(args.database_url)
    server = Server(args.database_url, SERVER_ENV)
    rates = {(m, c): Rates() for m in MODES for c in args.clients}
    profile: dict[str, Any] | None = None
    try:
        server.wait_ready()
        # warm all three: the first calls pay for lazy set-up
        engine.cell(8, queries, 1.0, 0, worker=False)
        engine.cell(8, queries, 1.0, 0, worker=True)
        wrk_cells({"http": server}, [8], 1.0, queries)
        start = 0
        for r in range(args.rounds):
            for c in args.clients:
                for mode in MODES if r % 2 == 0 else MODES[::-1]:
                    if mode == "http":
                        cell = http_cell(server, c, args.seconds, queries)
                    else:
                        cell = engine.cell(c, queries, args.seconds, start, worker=mode == "worker")
                        start = cell["next"] % len(queries)
                    rates[mode, c].add(**{k: v for k, v in cell.items() if k != "next"})
                    log(f"round {r + 1}, B {c}: {mode} {cell['per_s']:.1f}/s")
        differing = check_answers(server.base, engine, queries, args.clients)
        if args.profile:
            from benchmarks.ceiling_profile import profile_server

            profile = profile_server(
                server, queries, args.profile, args.py_spy, args.profile_clients
            )
    finally:
        server.stop()
        engine.close()
    cells = []
    for c in args.clients:
        call, worker, http = (rates[m, c] for m in MODES)
        # the ceiling of each round: the better of the two in-process modes
        ceilings = [max(a, b) for a, b in zip(call.per_s, worker.per_s, strict=True)]
        ratios = [h / e for h, e in zip(http.per_s, ceilings, strict=True)]
        cells.append(
            {
                "B": c,
                **{m: rates[m, c].summary() for m in MODES},
                "ratio": statistics.median(ratios),
                "ratio_range": [min(ratios), max(ratios)],
            }
        )
    return {
        "database": args.database_url,
        "rounds": args.rounds,
        "seconds": args.seconds,
        "cells": cells,
        "answers_differing": differing,
        "profile": profile,
        "cores": os.cpu_count(),
    }


def report(result: dict[str, Any]) -> None:
    rows = []
    for cell in result["cells"]:
        low, high = cell["ratio_range"]
        rows.append(
            [
                str(cell["B"]),
                *(f"{cell[m]['per_s']:.1f}" for m in MODES),
                f"{cell['ratio']:.2f}x ({low:.2f}-{high:.2f})",
                " / ".join(f"{cell[m]['cpu_ms']:.1f}" for m in MODES),
                f"{cell['http']['loop_ms']:.2f}",
                " / ".join(f"{cell[m]['p50_ms']:.1f}" for m in MODES),
                " / ".join(f"{cell[m]['p99_ms']:.1f}" for m in MODES),
            ]
        )
    header = ["B = clients", "call q/s", "worker q/s", "http req/s", "http / best in-process"]
    header += ["CPU ms call/worker/http", "loop ms", "p50 ms", "p99 ms"]
    out(table(header, rows))
    out(
        f"\nmedians of {result['rounds']} rounds of {result['seconds']:g} s cells, the modes in "
        f"turns (ratio per round in brackets), {result['cores']} cores shared with wrk. call: "
        "Searcher.search_now of B queries (p50/p99 of a call); worker: B clients in this process "
        "through the searcher's line; http: wrk with B connections on attend serve. CPU ms: the "
        "process's CPU time per query; loop ms: the server's event-loop thread alone (h11, "
        "routing, validation, JSON) per request"
    )
    by_b = {cell["B"]: cell for cell in result["cells"]}
    if 1 in by_b:
        single = by_b[1]
        gap = single["http"]["p50_ms"] - single["call"]["p50_ms"]
        out(f"one client: http p50 - in-process single query p50 = {gap:+.2f} ms")
    out(
        "answers differing: "
        + ", ".join(f"{k}: {v}" for k, v in result["answers_differing"].items())
    )
    if result["profile"] is not None:
        from benchmarks.ceiling_profile import report_profile

        report_profile(result["profile"])


def main() -> None:
    run_as_the_service()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default="sqlite:///benchmarks/results/books.db")
    parser.add_argument("--clients", type=int, nargs="+", default=CLIENTS)
    parser.add_argument("--seconds", type=float, default=6.0, help="per cell")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profile", type=float, metavar="S", help="py-spy the server S seconds")
    parser.add_argument(
        "--profile-clients", type=int, default=32, help="wrk's connections while py-spy samples"
    )
    # on PATH, else beside this Python (`.venv/bin/pip install py-spy` puts it there)
    beside = Path(sys.executable).with_name("py-spy")
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or str(beside))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("benchmarks.ceiling needs wrk on PATH (Debian: apt-get install wrk)")
    if args.profile and shutil.which(args.py_spy) is None:  # before the cells' minutes, not after
        sys.exit(f"--profile needs py-spy: {args.py_spy} is not there (pip install py-spy)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    result = run(args)
    if args.json:
        dump_json(result)
    else:
        report(result)


if __name__ == "__main__":
    main()
