"""Fair admission on a real `attend serve` (issue 25, findings 5 and 6). Prints one table.

    .venv/bin/python -m benchmarks.admission --database-url sqlite:////tmp/books.db
    .venv/bin/python -m benchmarks.admission --flood-seconds 10 --hold 0   # the flood only

The database must already hold an index (a copy of benchmarks/results/books.db, the shared
catalog: SQLite takes a lock file beside it). Measured, in this order:

- **probes idle**: `/healthz`, `/readyz` and a `/search` (a new query each time, so the query
  cache does not answer it), one after another on one keep-alive connection: median and p90;
- **one recommend of each size**: 100 liked, 80 disliked, and k=100 (the issue's body) or
  `--flood-k`: status, bytes, time;
- **probes under a recommend flood**: `--flood` clients in a child process, each POSTing the
  `--flood-k` body again as soon as its last answer came (after a 429, once its Retry-After
  passed, unless `--ignore-retry-after`), for `--flood-seconds`; the probes meanwhile, as idle;
  the flood's answers by status, and the server's RSS before, at its peak and
  `--settle-seconds` after the flood;
- **a client holding connections**: `--hold` sockets from 127.0.0.1 opened and reopened as the
  server closes them, and meanwhile `--tries` new connections from 127.0.0.2 (another client:
  Linux routes all of 127.0.0.0/8 to lo), each asking `/healthz`: how many were answered.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import resource
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import httpx

from benchmarks.queries import percentile
from benchmarks.service import Server
from benchmarks.soak import out

PROBES = ("/healthz", "/readyz", "/search")


@dataclass
class Probes:
    ms: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PROBES})
    failed: Counter[str] = field(default_factory=Counter)

    def at(self, path: str, q: float) -> float:
        """The q-th percentile of `path`'s latencies (ms)."""
        return percentile(self.ms[path], q) if self.ms[path] else float("nan")


async def exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    method: str,
    target: str,
    body: bytes = b"",
) -> tuple[int, int, float]:
    """(status, body bytes, Retry-After seconds or 0) of one request on an open keep-alive
    connection; the body is read and dropped (the client shares the server's cores)."""
    head = f"{method} {target} HTTP/1.1\r\nHost: attend\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    writer.write(head.encode() + b"\r\n" + body)
    status_line, *lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines)}
    left = length = int(headers["content-length"])
    while left:
        left -= len(await reader.read(min(left, 1 << 20)) or b"x" * left)
    return int(status_line.split()[1]), length, float(headers.get("retry-after", 0))


async def probe(port: int, probes: Probes, until: float, pause_s: float) -> None:
    """The probes in turn, one connection, until `until` (perf_counter)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = 0
    try:
        while time.perf_counter() < until:
            for path in PROBES:
                i += 1
                target = path if path != "/search" else f"/search?{urlencode({'q': f'a {i} tale'})}"
                t0 = time.perf_counter()
                try:
                    status, *_ = await asyncio.wait_for(exchange(reader, writer, "GET", target), 60)
                except (OSError, TimeoutError, asyncio.IncompleteReadError):
                    probes.failed[path] += 1
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    continue
                if status == 200:
                    probes.ms[path].append((time.perf_counter() - t0) * 1000)
                else:
                    probes.failed[path] += 1
            await asyncio.sleep(pause_s)
    finally:
        writer.close()


def flood(
    port: int,
    body: bytes,
    args: argparse.Namespace,
    results: multiprocessing.Queue,  # type: ignore[type-arg]
) -> None:
    """The child process: `args.flood` closed loops of POST /recommend, each waiting out a
    429's Retry-After unless `args.ignore_retry_after`; puts the status counts."""

    async def client(statuses: Counter[int], until: float) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while time.perf_counter() < until:
            try:
                status, _, retry_after = await asyncio.wait_for(
                    exchange(reader, writer, "POST", "/recommend", body), 120
                )
                statuses[status] += 1
                if status == 429 and not args.ignore_retry_after:
                    await asyncio.sleep(retry_after)
            except (OSError, TimeoutError, asyncio.IncompleteReadError):
                statuses[0] += 1  # a transport failure
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()

    async def main() -> Counter[int]:
        statuses: Counter[int] = Counter()
        until = time.perf_counter() + args.flood_seconds
        await asyncio.gather(*(client(statuses, until) for _ in range(args.flood)))
        return statuses

    results.put(dict(asyncio.run(main())))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def watch_rss(pid: int, peak: list[float], until: float) -> None:
    while time.perf_counter() < until:
        peak[0] = max(peak[0], rss_mib(pid))
        await asyncio.sleep(0.2)


async def holding(port: int, hold: int, tries: int) -> tuple[int, int, int]:
    """(connections the holder had open at the end, tries answered from 127.0.0.2, from
    127.0.0.1 itself) while 127.0.0.1 holds `hold` idle connections, reopening each the server
    closes."""
    stop = asyncio.Event()
    open_now = [0]

    async def holder() -> None:
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            open_now[0] += 1
            # idle until the server closes it (its deadline, or the bound at once)
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(reader.read(1), 30)
            open_now[0] -= 1
            writer.close()

    async def tried(host: str) -> bool:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, local_addr=(host, 0)), 5
            )
            status, *_ = await asyncio.wait_for(exchange(reader, writer, "GET", "/healthz"), 5)
            writer.close()
            return status == 200
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            return False

    tasks = [asyncio.create_task(holder()) for _ in range(hold)]
    await asyncio.sleep(3)  # all opened, the bound's share closed again
    other = same = 0
    for _ in range(tries):
        other += await tried("127.0.0.2")
        same += await tried("127.0.0.1")
        await asyncio.sleep(0.1)
    held = open_now[0]
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return held, other, same


def book_ids(base: str) -> list[str]:
    """200 ids of the catalog: a search's first two pages of 100."""
    pages = [
        httpx.get(f"{base}/search", params={"q": "a story", "k": 100, "offset": o}, timeout=60)
        for o in (0, 100)
    ]
    return [h["id"] for page in pages for h in page.json()["results"]]


def recommend_body(ids: list[str], k: int) -> bytes:
    """The issue's body: 100 liked, 80 disliked."""
    return json.dumps({"liked": ids[:100], "disliked": ids[100:180], "k": k}).encode()


async def one_each(port: int, ids: list[str], ks: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for k in ks:
        body = recommend_body(ids, k)
        t0 = time.perf_counter()
        status, size, _ = await exchange(reader, writer, "POST", "/recommend", body)
        out(
            f"one recommend (100 liked, 80 disliked, k={k}; {len(body):,} B): {status}, "
            f"{size:,} B in {time.perf_counter() - t0:.2f} s"
        )
    writer.close()


async def measure(args: argparse.Namespace, server: Server) -> None:
    port, pid = server.port, server.proc.pid
    ids = await asyncio.to_thread(book_ids, server.base)
    idle = Probes()
    await probe(port, idle, time.perf_counter() + args.idle_seconds, 0.05)
    await one_each(port, ids, sorted({100, args.flood_k}))
    before = rss_mib(pid)
    results: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    body = recommend_body(ids, args.flood_k)
    child = multiprocessing.Process(target=flood, args=(port, body, args, results))
    child.start()
    await asyncio.sleep(1)  # the flood under way
    loaded, peak = Probes(), [before]
    until = time.perf_counter() + args.flood_seconds - 1
    await asyncio.gather(probe(port, loaded, until, 0.2), watch_rss(pid, peak, until + 60))
    statuses = await asyncio.to_thread(results.get)
    child.join()
    await asyncio.sleep(args.settle_seconds)
    after = rss_mib(pid)
    out(
        f"flood: {args.flood} clients × {args.flood_seconds:.0f} s of k={args.flood_k}"
        f"{', 429s retried at once' if args.ignore_retry_after else ''}: "
        + ", ".join(f"{s or 'transport error'}: {n}" for s, n in sorted(statuses.items()))
    )
    out(
        f"{'probe':<10} {'idle p50':>9} {'idle p90':>9} {'load p50':>9} {'load p90':>9} "
        f"{'ratio p50':>9} {'failed':>6}"
    )
    for path in PROBES:
        cells = [idle.at(path, 50), idle.at(path, 90), loaded.at(path, 50), loaded.at(path, 90)]
        ratio = cells[2] / cells[0]
        out(
            f"{path:<10} "
            + " ".join(f"{c:>9.1f}" for c in [*cells, ratio])
            + f" {loaded.failed[path]:>6}"
        )
    out(
        f"server RSS MiB: before the flood {before:.0f}, peak {peak[0]:.0f}, "
        f"{args.settle_seconds:.0f} s after {after:.0f}"
    )
    if args.hold:
        held, other, same = await holding(port, args.hold, args.tries)
        out(
            f"127.0.0.1 holding {args.hold} connections ({held} open at the end): /healthz "
            f"from 127.0.0.2 answered {other}/{args.tries}, from 127.0.0.1 {same}/{args.tries}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default="sqlite:////tmp/books.db")
    parser.add_argument("--flood", type=int, default=60, help="recommend clients")
    parser.add_argument("--flood-seconds", type=float, default=20.0)
    parser.add_argument(
        "--ignore-retry-after", action="store_true", help="flood clients retry a 429 at once"
    )
    # 20: 100 liked × k=20 × 6 heads = 12,000, the default ATTEND_BOOK_QUERY_BUDGET
    parser.add_argument("--flood-k", type=int, default=20, help="k of the flood's requests")
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--settle-seconds", type=float, default=5.0)
    parser.add_argument("--hold", type=int, default=1000, help="connections one client holds")
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--env", action="append", default=[], help="ATTEND_*=value")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the holder's sockets
    server = Server(args.database_url, dict(e.split("=", 1) for e in args.env))
    try:
        server.wait_ready()
        asyncio.run(measure(args, server))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
