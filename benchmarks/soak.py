"""Soak: a real `attend serve` under mixed clients for minutes, with a re-index and a delete on
the way, over loopback only. Prints one table.

    .venv/bin/python -m benchmarks.soak                 # 10 minutes on the shared catalog
    .venv/bin/python -m benchmarks.soak --minutes 1     # a short run

Clients, all at once for the whole run: single-query GETs (closed loop), 64-query POSTs (closed
loop), slow clients that trickle their headers a byte a second (each is cut off by the server's
header deadline and comes back), and a sentinel query twice a second. A third of the way in, the
admin API re-indexes the catalog plus one sentinel book (a new generation); two thirds in,
`attend delete` removes it (another). Reported:

- single-GET latency alone (sequential, before the load) and under load: p50 and p99;
- every status: 5xx, other errors and transport failures, by kind of client;
- answers: every 200's ids compared with the same query's sequential answer from before the
  load, and its catalog size with its generation's (none may come from the wrong one); the
  sentinel found exactly while its generation is served;
- the server's RSS at the start of the load and at its end (and its peak).

The query cache is off (size 1), so every query runs the encoder. The database is the one given
(by default a SQLite file in benchmarks/results/), brought to the catalog first with
`attend index`, which is incremental.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import httpx

from benchmarks.queries import percentile, unique_queries

ROOT = Path(__file__).resolve().parents[1]
SHARED_CATALOG = ROOT.parent / "shared" / "data" / "books.jsonl"
ATTEND = str(Path(sys.executable).with_name("attend"))
SENTINEL = {
    "id": "soak-sentinel",
    "title": "Zebrafish Origami for Quantum Accountants",
    "description": "A sentinel book the soak adds with a re-index and removes with a delete.",
}
SENTINEL_QUERY = "zebrafish origami for quantum accountants"
REQUEST_TIMEOUT_S = 60.0


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def log(text: str) -> None:
    sys.stderr.write(f"[soak {time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Connection:
    """One keep-alive HTTP/1.1 connection to 127.0.0.1 (a lean client: it shares the cores)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int):
        self.reader, self.writer, self.port = reader, writer, port

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer, port)

    async def request(
        self, method: str, target: str, body: bytes | None = None
    ) -> tuple[int, bytes]:
        head = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + (body or b""))
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *headers = raw.decode("latin-1").split("\r\n")
        length = next(
            int(v)
            for k, _, v in (h.partition(":") for h in headers)
            if k.lower() == "content-length"
        )
        return int(status_line.split()[1]), await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


@dataclass
class Kind:
    """What one kind of client saw."""

    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    transport_errors: int = 0
    checked: int = 0  # answers compared with the sequential ones
    differing: list[str] = field(default_factory=list)  # queries whose answer differed
    wrong_generation: int = 0
    mixed: int = 0  # requests whose answers came from more than one generation

    def count(self, status: int) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1

    @property
    def server_errors(self) -> int:
        return sum(n for s, n in self.statuses.items() if s >= 500)

    @property
    def other_errors(self) -> int:
        return sum(n for s, n in self.statuses.items() if 400 <= s < 500)


@dataclass
class Run:
    sizes: dict[int, int] = field(default_factory=dict)  # generation → catalog size
    # generation → query → ids, asked one at a time while the load pauses
    reference: dict[int, dict[str, list[str]]] = field(default_factory=dict)
    go: asyncio.Event = field(default_factory=asyncio.Event)  # clear: the load pauses
    answers: list[tuple[Kind, str, dict[str, object]]] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    in_flight: int = 0  # requests of the GET and POST clients on the wire now
    single_at: list[float] = field(default_factory=list)  # when each single GET was answered
    busy: list[tuple[float, float]] = field(default_factory=list)  # a re-index or delete ran
    single: Kind = field(default_factory=Kind)
    batch: Kind = field(default_factory=Kind)
    sentinel: Kind = field(default_factory=Kind)
    slow_cut_s: list[float] = field(default_factory=list)  # how long each slow client lasted
    slow_uncut: int = 0
    slow_refused: int = 0  # connections refused outright (none expected under the bound)
    rss_kib: list[tuple[float, int]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)


def keep(run: Run, kind: Kind, query: str, answer: dict[str, object]) -> None:
    """An answer to check once the run is over (its generation's reference may come later)."""
    run.answers.append((kind, query, answer))


def check(run: Run, kind: Kind, query: str, answer: dict[str, object]) -> None:
    """One 200 answer against its generation's sequential one, and its catalog size."""
    generation, size = int(answer["generation"]), int(answer["catalog_size"])  # type: ignore[call-overload]
    expected = run.sizes.get(generation)
    if expected is not None and expected != size:
        kind.wrong_generation += 1
    ids = [h["id"] for h in answer["results"]]  # type: ignore[attr-defined]
    if query == SENTINEL_QUERY:
        # the sentinel is found exactly while a generation that holds it is served
        if (ids[:1] == [SENTINEL["id"]]) != (size == run.sizes[min(run.sizes)] + 1):
            kind.wrong_generation += 1
        kind.checked += 1
        return
    reference = run.reference.get(generation)
    if reference is None:  # a generation the soak did not make: wrong
        kind.wrong_generation += 1
        return
    kind.checked += 1
    if ids != reference[query]:
        kind.differing.append(f"{query!r} (generation {generation})")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def single_client(run: Run, port: int, queries: list[str], stop: float, offset: int) -> None:
    conn = await Connection.open(port)
    i = offset
    try:
        while time.monotonic() < stop:
            if not run.go.is_set():  # paused: past the keep-alive timeout, so a new connection
                await run.go.wait()
                conn.close()
                conn = await Connection.open(port)
            q = queries[i % len(queries)]
            i += 1
            t0 = time.perf_counter()
            run.in_flight += 1
            try:
                status, body = await asyncio.wait_for(
                    conn.request("GET", "/search?" + urlencode({"q": q, "k": 10})),
                    REQUEST_TIMEOUT_S,
                )
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
                run.single.transport_errors += 1
                log(f"single client: {type(e).__name__} {e} (paused: {not run.go.is_set()})")
                conn.close()
                conn = await Connection.open(port)
                continue
            finally:
                run.in_flight -= 1
            run.single.count(status)
            if status == 200:
                run.single.latencies_ms.append((time.perf_counter() - t0) * 1000)
                run.single_at.append(time.monotonic())
                keep(run, run.single, q, json.loads(body))
    finally:
        conn.close()


async def batch_client(run: Run, port: int, queries: list[str], stop: float, offset: int) -> None:
    conn = await Connection.open(port)
    i = offset
    try:
        while time.monotonic() < stop:
            if not run.go.is_set():  # paused: past the keep-alive timeout, so a new connection
                await run.go.wait()
                conn.close()
                conn = await Connection.open(port)
            batch = [queries[(i + j) % len(queries)] for j in range(64)]
            i += 64
            body = json.dumps({"queries": batch, "k": 10}).encode()
            t0 = time.perf_counter()
            run.in_flight += 1
            try:
                status, raw = await asyncio.wait_for(
                    conn.request("POST", "/search", body), REQUEST_TIMEOUT_S
                )
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
                run.batch.transport_errors += 1
                log(f"batch client: {type(e).__name__} {e} (paused: {not run.go.is_set()})")
                conn.close()
                conn = await Connection.open(port)
                continue
            finally:
                run.in_flight -= 1
            run.batch.count(status)
            if status == 200:
                run.batch.latencies_ms.append((time.perf_counter() - t0) * 1000)
                responses = json.loads(raw)["responses"]
                run.batch.mixed += len({r["generation"] for r in responses}) > 1
                for q, answer in zip(batch, responses, strict=True):
                    keep(run, run.batch, q, answer)
    finally:
        conn.close()


async def slow_client(run: Run, port: int, stop: float, deadline_s: float) -> None:
    """Trickles a request's headers a byte a second until the server cuts it off; again. One
    still open past the header deadline (plus 2 s) counts as not cut off."""
    trickle = b"GET /search?q=slow HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"s" * 10_000
    while time.monotonic() < stop:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            run.slow_refused += 1
            await asyncio.sleep(1)
            continue
        t0 = time.monotonic()
        cut = False
        try:
            for byte in trickle:
                if time.monotonic() >= stop:
                    break
                writer.write(bytes([byte]))
                await writer.drain()
                try:
                    if await asyncio.wait_for(reader.read(1024), 1.0) == b"":
                        cut = True  # closed by the server
                        break
                except TimeoutError:
                    pass
        except OSError:
            cut = True  # reset by the server
        lasted = time.monotonic() - t0
        if cut:
            run.slow_cut_s.append(lasted)
        elif lasted > deadline_s + 2:
            run.slow_uncut += 1
        writer.close()


async def sentinel_client(run: Run, port: int, stop: float) -> None:
    conn = await Connection.open(port)
    try:
        while time.monotonic() < stop:
            target = "/search?" + urlencode({"q": SENTINEL_QUERY, "k": 3})
            try:
                status, body = await asyncio.wait_for(
                    conn.request("GET", target), REQUEST_TIMEOUT_S
                )
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
                run.sentinel.transport_errors += 1
                log(f"sentinel client: {type(e).__name__} {e} (paused: {not run.go.is_set()})")
                conn.close()
                conn = await Connection.open(port)
                continue
            run.sentinel.count(status)
            if status == 200:
                keep(run, run.sentinel, SENTINEL_QUERY, json.loads(body))
            await asyncio.sleep(0.5)
    finally:
        conn.close()


async def rss_sampler(run: Run, pid: int, stop: float, t_start: float) -> None:
    while time.monotonic() < stop:
        run.rss_kib.append((time.monotonic() - t_start, rss_kib(pid)))
        await asyncio.sleep(5)
    run.rss_kib.append((time.monotonic() - t_start, rss_kib(pid)))
    log("RSS MiB every 30 s: " + " ".join(f"{r / 1024:.0f}" for t, r in run.rss_kib if t % 30 < 5))


@dataclass(frozen=True)
class Target:
    """The server under test."""

    port: int
    pid: int
    token: str
    env: dict[str, str]


async def events(run: Run, server: Target, catalog: Path, seconds: float) -> None:
    """Re-index with the sentinel a third in, delete it two thirds in; learn each generation."""
    t0 = time.monotonic()
    auth = {"Authorization": f"Bearer {server.token}"}
    base = f"http://127.0.0.1:{server.port}"
    with_sentinel = Path(tempfile.mkdtemp(prefix="attend-soak-")) / "catalog.jsonl"
    with_sentinel.write_bytes(
        catalog.read_bytes().rstrip(b"\n") + b"\n" + json.dumps(SENTINEL).encode() + b"\n"
    )
    size = run.sizes[min(run.sizes)]
    await asyncio.sleep(seconds / 3)
    async with httpx.AsyncClient(base_url=base, timeout=REQUEST_TIMEOUT_S) as client:
        started = time.monotonic()
        r = await client.post("/admin/reindex", json={"catalog": str(with_sentinel)}, headers=auth)
        r.raise_for_status()
        job = r.json()["id"]
        while (state := (await client.get(f"/admin/jobs/{job}", headers=auth)).json())["state"] in (
            "queued",
            "running",
        ):
            await asyncio.sleep(0.5)
        if state["state"] != "succeeded":
            raise RuntimeError(f"the re-index failed: {state}")
        gen = int(state["report"]["generation"])
        run.busy.append((started, time.monotonic()))
        run.sizes[gen] = size + 1
        await reference_for(run, server.port, gen)
        run.events.append(
            f"{time.monotonic() - t0:6.0f} s  re-index (admin API, +1 book): generation {gen}, "
            f"{state['report']['seconds']} s"
        )
        log(run.events[-1])
        await asyncio.sleep(max(0.0, t0 + 2 * seconds / 3 - time.monotonic()))
        started = time.monotonic()
        done = await asyncio.to_thread(
            subprocess.run,
            [ATTEND, "delete", str(SENTINEL["id"])],
            env=server.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"attend delete failed: {done.stderr}")
        gen = int(done.stdout.split("generation")[1].split()[0])
        run.sizes[gen] = size
        await served(server.port, gen)
        run.busy.append((started, time.monotonic()))
        await reference_for(run, server.port, gen)
        run.events.append(
            f"{time.monotonic() - t0:6.0f} s  delete (attend delete, −1 book): generation {gen}, "
            f"{time.monotonic() - started:.1f} s"
        )
        log(run.events[-1])


async def served(port: int, generation: int, timeout: float = 120) -> None:
    """Once the server answers from `generation` (it polls for a CLI's change)."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        while time.monotonic() < deadline:
            r = await client.get("/search", params={"q": SENTINEL_QUERY, "k": 1})
            if r.status_code == 200 and r.json()["generation"] == generation:
                return
            await asyncio.sleep(0.2)
    raise RuntimeError(f"the server did not switch to generation {generation}")


async def reference_for(run: Run, port: int, generation: int) -> None:
    """The load paused, every query once, one at a time: the answers of `generation`."""
    run.go.clear()
    while run.in_flight:
        await asyncio.sleep(0.05)
    answers, _, served_generation, _ = await asyncio.to_thread(sequential, port, run.queries)
    if served_generation != generation:
        raise RuntimeError(f"generation {served_generation} served, {generation} expected")
    run.reference[generation] = answers
    run.go.set()


def sequential(port: int, queries: list[str]) -> tuple[dict[str, list[str]], list[float], int, int]:
    """Each query alone, one after another: (ids by query, latencies ms, generation, size)."""
    answers: dict[str, list[str]] = {}
    latencies = []
    generation = size = -1
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=REQUEST_TIMEOUT_S) as client:
        for q in queries:
            t0 = time.perf_counter()
            r = client.get("/search", params={"q": q, "k": 10})
            latencies.append((time.perf_counter() - t0) * 1000)
            r.raise_for_status()
            body = r.json()
            answers[q] = [h["id"] for h in body["results"]]
            generation, size = int(body["generation"]), int(body["catalog_size"])
    return answers, latencies, generation, size


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("attend serve exited during start-up")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError("attend serve did not become ready")


def table(run: Run, alone_ms: list[float], seconds: float, args: argparse.Namespace) -> str:
    lines = [
        f"soak: {seconds / 60:.1f} min on {os.cpu_count()} cores, loopback; {args.singles} "
        f"single-GET clients, {args.batches} 64-query POST clients, {args.slow} slow clients, "
        "1 sentinel",
        "",
        f"{'clients':<22} {'requests':>8} {'p50 ms':>8} {'p99 ms':>8} {'5xx':>5} {'4xx':>5} "
        f"{'transport':>9} {'checked':>8} {'differ':>6} {'wrong gen':>9}",
    ]

    def row(name: str, kind: Kind | None, lat: list[float]) -> str:
        p50 = percentile(lat, 50) if lat else float("nan")
        p99 = percentile(lat, 99) if lat else float("nan")
        if kind is None:
            return f"{name:<22} {len(lat):>8} {p50:>8.1f} {p99:>8.1f}"
        n = sum(kind.statuses.values()) + kind.transport_errors
        return (
            f"{name:<22} {n:>8} {p50:>8.1f} {p99:>8.1f} {kind.server_errors:>5} "
            f"{kind.other_errors:>5} {kind.transport_errors:>9} {kind.checked:>8} "
            f"{len(kind.differing):>6} {kind.wrong_generation:>9}"
        )

    lines.append(row("single GET, alone", None, alone_ms))
    lines.append(row("single GET, under load", run.single, run.single.latencies_ms))
    quiet = [
        ms
        for ms, at in zip(run.single.latencies_ms, run.single_at, strict=True)
        if not any(a - 1 <= at <= b + 5 for a, b in run.busy)
    ]
    lines.append(row("  outside the events", None, quiet))
    lines.append(row("64-query POST", run.batch, run.batch.latencies_ms))
    lines.append(row("sentinel GET", run.sentinel, []))
    cut = run.slow_cut_s
    lines.append(
        f"{'slow clients':<22} {len(cut) + run.slow_uncut:>8} connections; cut off by the server "
        f"after {min(cut, default=float('nan')):.1f}–{max(cut, default=float('nan')):.1f} s; "
        f"{run.slow_uncut} not cut off, {run.slow_refused} refused"
    )
    ratio = percentile(run.single.latencies_ms, 99) / percentile(alone_ms, 99)
    ratio_quiet = percentile(quiet, 99) / percentile(alone_ms, 99) if quiet else float("nan")
    lines.append("")
    lines.append(
        f"single-GET p99 under load / alone: {ratio:.1f}x, outside the events (from 1 s before a "
        f"re-index or delete to 5 s after it is served) {ratio_quiet:.1f}x (target: within 5x)"
    )
    start, end = run.rss_kib[0][1], run.rss_kib[-1][1]
    warm = next((r for t, r in run.rss_kib if t >= 60), end)  # after a minute of the load
    peak = max(r for _, r in run.rss_kib)
    lines.append(
        f"server RSS: {start / 1024:.0f} MiB at the start of the load, {warm / 1024:.0f} MiB a "
        f"minute in, {end / 1024:.0f} MiB at its end ({(end - start) / start:+.1%} from the "
        f"start, {(end - warm) / warm:+.1%} from a minute in), peak {peak / 1024:.0f} MiB"
    )
    lines.append(
        f"64-query POSTs answered from more than one generation: {run.batch.mixed} "
        f"of {len(run.batch.latencies_ms)}"
    )
    lines.append("events: " + ("; ".join(e.strip() for e in run.events) or "none"))
    lines.append(
        f"generations and catalog sizes seen: {dict(sorted(run.sizes.items()))}; "
        "differ: answers unlike the same query's sequential answer; wrong gen: a catalog size "
        "not its generation's, or the sentinel found outside its generation (or missing in it)"
    )
    return "\n".join(lines)


async def load(run: Run, server: Target, args: argparse.Namespace, queries: list[str]) -> None:
    seconds = args.minutes * 60
    t0 = time.monotonic()
    stop = t0 + seconds
    port = server.port
    tasks = [
        *(single_client(run, port, queries, stop, 97 * i) for i in range(args.singles)),
        *(batch_client(run, port, queries, stop, 131 * i) for i in range(args.batches)),
        *(slow_client(run, port, stop, args.header_timeout) for _ in range(args.slow)),
        sentinel_client(run, port, stop),
        rss_sampler(run, server.pid, stop, t0),
        events(run, server, args.catalog, seconds),
    ]
    run.go.set()
    await asyncio.gather(*tasks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument(
        "--database-url", default=f"sqlite:///{ROOT / 'benchmarks' / 'results' / 'soak.db'}"
    )
    parser.add_argument("--catalog", type=Path, default=SHARED_CATALOG)
    parser.add_argument("--singles", type=int, default=4, help="single-query GET clients")
    parser.add_argument("--batches", type=int, default=2, help="64-query POST clients")
    parser.add_argument("--slow", type=int, default=20, help="slow-header clients")
    parser.add_argument(
        "--header-timeout", type=float, default=10.0, help="the server's ATTEND_HEADER_TIMEOUT_S"
    )
    parser.add_argument(
        "--env", action="append", default=[], help="extra ATTEND_*=value for the server"
    )
    args = parser.parse_args()

    token = secrets.token_urlsafe(24)
    env = {
        **os.environ,
        "ATTEND_DATABASE_URL": args.database_url,
        "ATTEND_ADMIN_TOKEN": token,
        "ATTEND_QUERY_CACHE_SIZE": "1",
        "ATTEND_LOG_LEVEL": "warning",
        "ATTEND_HEADER_TIMEOUT_S": str(args.header_timeout),
        "HF_HUB_OFFLINE": "1",
        **dict(e.split("=", 1) for e in args.env),
    }
    if args.database_url.startswith("sqlite:///"):
        Path(args.database_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    log(f"attend db upgrade; attend index {args.catalog} (incremental)")
    t0 = time.monotonic()
    for command in (["db", "upgrade"], ["index", str(args.catalog)]):
        done = subprocess.run(
            [ATTEND, *command], env=env, capture_output=True, text=True, timeout=3600, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"attend {' '.join(command)} failed: {done.stderr}")
    log(f"indexed in {time.monotonic() - t0:.0f} s")
    port = free_port()
    # a file, not a pipe: a full pipe would block the server
    server_log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in the finally below)
    proc = subprocess.Popen(
        [ATTEND, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=server_log,
    )
    try:
        wait_ready(port, proc)
        queries = unique_queries()
        run = Run()
        sequential(port, queries[:20])  # warm-up
        reference, alone_ms, generation, size = sequential(port, queries)
        run.queries = queries
        run.reference[generation], run.sizes[generation] = reference, size
        log(f"generation {generation}, {size} books; alone p99 {percentile(alone_ms, 99):.1f} ms")
        asyncio.run(load(run, Target(port, proc.pid, token, env), args, queries))
        for kind, query, answer in run.answers:
            check(run, kind, query, answer)
        after, alone_after_ms, generation, size = sequential(port, queries)
        same = sum(after[q] == reference[q] for q in queries)
        # alone: the sequential passes before and after the load, pooled (the machine is shared)
        out(table(run, alone_ms + alone_after_ms, args.minutes * 60, args))
        out(
            f"after the load: generation {generation}, {size} books; {same}/{len(queries)} "
            "sequential answers as before it"
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        server_log.seek(0)
        text = server_log.read().decode(errors="replace")
        server_log.close()
        out(f"server log: {text.count('Traceback')} tracebacks, {len(text.splitlines())} lines")


if __name__ == "__main__":
    main()
