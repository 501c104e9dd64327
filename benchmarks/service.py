"""Load on the real service over loopback: QPS and latency for 1…64 concurrent clients, with and
without batching, and a check that answers under load equal answers one at a time.

    .venv/bin/python -m benchmarks.service --database-url sqlite:///benchmarks/results/books.db
    .venv/bin/python -m benchmarks.service --clients 1 8 32 64 --seconds 10 --json
    .venv/bin/python -m benchmarks.service --versus /tmp/attend-before   # this code against that


The database must already hold an index (`attend index`, or benchmarks/search_latency.py leaves
one in benchmarks/results/). The server's query cache is turned off, so every request runs the
encoder, as a query never asked before does. A batched and an unbatched server run side by side
and take turns cell by cell, so the gain is measured under the same noise. The client runs on the
same cores as the servers: QPS here is a floor.

With `--versus DIR` (a checkout of other code, e.g. `git worktree add /tmp/attend-before REV`)
the two servers are this code and DIR's (its packages first on PYTHONPATH, the same venv), both
batched, over the same database; the table then gives this code's q/s and p50 as ratios to DIR's.
When Debian's `wrk` is on PATH, each server also takes `wrk` (its own C client, which loads the
cores less than this one) for `--seconds` at each client count, queries rotated by a Lua script,
turn by turn, with the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.queries import percentile, unique_queries

ANSWERS_CHECKED = 30  # per cell: answers under load compared with the same query sent alone


@dataclass
class Cell:
    mode: str
    clients: int
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    seconds: float = 0.0
    mean_batch: float = float("nan")  # queries per encoder + attention call, from /metrics
    answers: dict[str, list[str]] = field(default_factory=dict)

    def row(self) -> dict[str, float | int | str]:
        lat = self.latencies_ms or [float("nan")]
        return {
            "mode": self.mode,
            "clients": self.clients,
            "requests": len(self.latencies_ms),
            "qps": len(self.latencies_ms) / self.seconds if self.seconds else 0.0,
            "p50_ms": percentile(lat, 50),
            "p95_ms": percentile(lat, 95),
            "p99_ms": percentile(lat, 99),
            "mean_ms": statistics.fmean(lat),
            "errors": self.errors,
            "mean_batch": self.mean_batch,
        }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`attend serve` in a subprocess on a free loopback port."""

    def __init__(self, database_url: str, env: dict[str, str]):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        full_env = {
            **os.environ,
            "ATTEND_DATABASE_URL": database_url,
            "ATTEND_LOG_LEVEL": "warning",
            "HF_HUB_OFFLINE": "1",
            **env,
        }
        attend = Path(sys.executable).with_name("attend")
        # the checkout's own entry point where the project is not installed (a lent GPU
        # machine runs it from a copy of the working tree)
        run_main = "import sys; from service.launch import main; sys.exit(main())"
        command = [str(attend)] if attend.exists() else [sys.executable, "-c", run_main]
        # BENCH_SERVER_LOG: a file the servers' stderr is appended to, for a start that fails
        log_path = os.environ.get("BENCH_SERVER_LOG")
        self._log = open(log_path, "ab") if log_path else None  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*command, "serve", "--port", str(self.port)],
            env=full_env,
            stdout=subprocess.DEVNULL,
            stderr=self._log or subprocess.DEVNULL,
        )

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("attend serve exited during start-up")
            try:
                if httpx.get(f"{self.base}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise RuntimeError("attend serve did not come up")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        if self._log is not None:
            self._log.close()


class Connection:
    """One keep-alive HTTP/1.1 connection, as lean as a client gets: the client shares the
    server's two cores, and httpx's per-request Python (about 2 ms here) capped the load at
    430 requests/s on a route that does nothing, where this client reached 2,960."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str):
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def open(cls, base: str) -> Connection:
        url = urlsplit(base)
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        return cls(reader, writer, url.netloc)

    async def get(self, path: str, params: dict[str, str | int]) -> tuple[int, bytes]:
        """(status, body) of GET path?params."""
        target = f"{path}?{urlencode(params)}"
        self.writer.write(f"GET {target} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *headers = head.decode("latin-1").split("\r\n")
        length = next(
            int(v)
            for k, _, v in (h.partition(":") for h in headers)
            if k.lower() == "content-length"
        )
        return int(status_line.split()[1]), await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def load(base: str, cell: Cell, queries: list[str], seconds: float) -> None:
    """`cell.clients` workers, each sending its next unsent query as soon as the last returns."""
    next_query = iter(queries)
    stop_at = time.perf_counter() + seconds
    bodies: dict[str, bytes] = {}  # the first answers, decoded after the clock stops

    async def worker() -> None:
        connection = await Connection.open(base)
        try:
            while time.perf_counter() < stop_at:
                q = next(next_query, None)
                if q is None:
                    return
                t0 = time.perf_counter()
                try:
                    status, body = await asyncio.wait_for(
                        connection.get("/search", {"q": q, "k": 10}), timeout=60
                    )
                except (OSError, asyncio.IncompleteReadError, TimeoutError, StopIteration):
                    cell.errors += 1
                    connection.close()
                    connection = await Connection.open(base)
                    continue
                if status == 200:
                    cell.latencies_ms.append((time.perf_counter() - t0) * 1000)
                    if len(bodies) < ANSWERS_CHECKED:
                        bodies[q] = body
                else:
                    cell.errors += 1
        finally:
            connection.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(cell.clients)))
    cell.seconds = time.perf_counter() - t0
    for q, body in bodies.items():
        cell.answers[q] = [h["id"] for h in json.loads(body)["results"]]


def batch_totals(base: str) -> tuple[float, float]:
    """The server's (queries, calls) so far: attend_search_batch_size's sum and count."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    values = {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("attend_search_batch_size")
    }
    return values["attend_search_batch_size_sum"], values["attend_search_batch_size_count"]


def check_answers(base: str, answers: dict[str, list[str]]) -> int:
    """How many of the answers given under load differ from the same query sent alone."""
    mismatches = 0
    with httpx.Client(base_url=base, timeout=60) as client:
        for q, under_load in answers.items():
            alone = [
                h["id"] for h in client.get("/search", params={"q": q, "k": 10}).json()["results"]
            ]
            mismatches += alone != under_load
    return mismatches


_WRK_SCRIPT = """
local queries = {%s}
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", "/search?k=10&q=" .. queries[(i %% #queries) + 1])
end
done = function(summary, latency, requests)
  io.write(string.format("ATTEND %%d %%f %%f %%f %%d\\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), summary.errors.status))
end
"""


def wrk_cells(
    servers: dict[str, Server], clients: list[int], seconds: float, queries: list[str]
) -> list[dict[str, Any]]:
    """Each server under `wrk` at each client count, turn by turn; [] without wrk."""
    if shutil.which("wrk") is None:
        return []
    quoted = ",".join(json.dumps(urlencode({"": q})[1:]) for q in queries)
    rows: list[dict[str, Any]] = []
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write(_WRK_SCRIPT % quoted)
        script.flush()
        for c in clients:
            for mode, server in servers.items():
                out = subprocess.run(
                    [
                        "wrk",
                        f"-t{min(2, c)}",
                        f"-c{c}",
                        f"-d{seconds:g}s",
                        "-s",
                        script.name,
                        "--timeout",
                        "60s",
                        server.base,
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                m = re.search(r"ATTEND (\d+) (\S+) (\S+) (\S+) (\d+)", out)
                if m is None:
                    raise RuntimeError(f"wrk printed no summary: {out}")
                n, us, p50, p99, bad = m.groups()
                rows.append(
                    {
                        "mode": mode,
                        "clients": c,
                        "rps": int(n) / (float(us) / 1e6),
                        "p50_ms": float(p50) / 1e3,
                        "p99_ms": float(p99) / 1e3,
                        "non_2xx": int(bad),
                    }
                )
    return rows


def run_cells(
    servers: dict[str, Server], clients: list[int], seconds: float, queries: list[str]
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Each server under this module's client at each client count, turn by turn: the rows, and
    per cell how many answers under load differ from the same query alone."""
    rows: list[dict[str, Any]] = []
    mismatches: dict[str, int] = {}
    offset = dict.fromkeys(servers, 0)
    for c in clients:
        for mode, server in servers.items():
            cell = Cell(mode, c)
            # a fresh slice of never-sent queries per cell; wraps only on very long runs
            start = offset[mode]
            pool = (queries[start:] + queries[:start]) * 50
            queries_before, calls_before = batch_totals(server.base)
            asyncio.run(load(server.base, cell, pool, seconds))
            queries_after, calls_after = batch_totals(server.base)
            if calls_after > calls_before:
                cell.mean_batch = (queries_after - queries_before) / (calls_after - calls_before)
            offset[mode] = (start + len(cell.latencies_ms)) % len(queries)
            rows.append(cell.row())
            if c > 1:
                mismatches[f"{mode}, {c} clients"] = check_answers(server.base, cell.answers)
    return rows, mismatches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default="sqlite:///benchmarks/results/books.db")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--seconds", type=float, default=8.0, help="per cell")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        help="extra ATTEND_*=value for the server, e.g. ATTEND_ENCODER_BACKEND=onnx",
    )
    parser.add_argument(
        "--versus",
        type=Path,
        help="a checkout of other code: serve it beside this code (both batched) and compare",
    )
    parser.add_argument(
        "--ready-s", type=float, default=180.0, help="how long a server may take to start"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    extra = dict(e.split("=", 1) for e in args.env)
    batched = {"ATTEND_BATCH_WINDOW_MS": "2", "ATTEND_MAX_BATCH": "64"}
    modes = {
        "batched": batched,
        "unbatched": {"ATTEND_BATCH_WINDOW_MS": "0", "ATTEND_MAX_BATCH": "1"},
    }
    if args.versus:
        modes = {"this": batched, "versus": {**batched, "PYTHONPATH": str(args.versus.resolve())}}
    # The query cache is off (size 1): every request runs the encoder, as new queries do.
    modes = {m: {**env, "ATTEND_QUERY_CACHE_SIZE": "1"} for m, env in modes.items()}
    queries = unique_queries()
    # Both servers run side by side and take turns cell by cell (an idle one costs nothing), so
    # a burst of noise on the shared machine hits both modes alike.
    servers = {mode: Server(args.database_url, {**env, **extra}) for mode, env in modes.items()}
    try:
        for server in servers.values():
            server.wait_ready(args.ready_s)
        rows, mismatches = run_cells(servers, args.clients, args.seconds, queries)
        wrk_rows = wrk_cells(servers, args.clients, args.seconds, queries)
    finally:
        for server in servers.values():
            server.stop()
    first, second = modes
    qps = {(r["mode"], r["clients"]): float(r["qps"]) for r in rows}
    gains = {c: qps[(first, c)] / qps[(second, c)] for c in args.clients if qps.get((second, c))}
    out = {
        "database": args.database_url.split(":")[0],
        "server_env": extra,
        "versus": str(args.versus) if args.versus else None,
        "rows": rows,
        "gain": {"of": first, "over": second, "qps_ratio": gains},
        "wrk": wrk_rows,
        "answers_differing_under_load": mismatches,
        "cores": os.cpu_count(),
    }
    if args.json:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        sys.stdout.write(report(out, seconds=args.seconds) + "\n")


def report(out: dict[str, Any], *, seconds: float) -> str:
    """The benchmark's result as a text table."""
    head = (
        f"{'mode':<10} {'clients':>7} {'req':>6} {'q/s':>7} {'p50 ms':>8} {'p95 ms':>8} "
        f"{'p99 ms':>8} {'errors':>6} {'batch':>6}"
    )
    env = out["server_env"] or "default"
    lines = [f"service benchmark, {out['cores']} cores, server env {env}", head]
    for r in out["rows"]:
        lines.append(
            f"{r['mode']:<10} {r['clients']:>7} {r['requests']:>6} {r['qps']:>7.1f} "
            f"{r['p50_ms']:>8.1f} {r['p95_ms']:>8.1f} {r['p99_ms']:>8.1f} {r['errors']:>6} "
            f"{r['mean_batch']:>6.1f}"
        )
    lines.append("batch: mean queries per encoder and attention call (the server's /metrics)")
    first, second = out["gain"]["of"], out["gain"]["over"]
    what = f"this code / {out['versus']}" if out["versus"] else "batching gain, batched / unbatched"
    gains = out["gain"]["qps_ratio"]
    lines.append(f"{what} (q/s): " + ", ".join(f"{c} clients {g:.2f}x" for c, g in gains.items()))
    if out["wrk"]:
        lines.append(f"wrk ({seconds:g} s a cell, queries rotated, turn by turn):")
        lines.append(f"{'mode':<10} {'clients':>7} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
        for r in out["wrk"]:
            lines.append(
                f"{r['mode']:<10} {r['clients']:>7} {r['rps']:>8.1f} {r['p50_ms']:>8.1f} "
                f"{r['p99_ms']:>8.1f}"
            )
        by = {(r["mode"], r["clients"]): r for r in out["wrk"]}
        ratios = [
            f"{c} clients q/s {by[first, c]['rps'] / by[second, c]['rps']:.2f}x, "
            f"p50 {by[first, c]['p50_ms'] / by[second, c]['p50_ms']:.2f}x"
            for (mode, c) in by
            if mode == first and by[second, c]["rps"] and by[second, c]["p50_ms"]
        ]
        lines.append(f"wrk {first} / {second}: " + ", ".join(ratios))
    lines.append(
        f"answers under load that differ from the same query sent alone (of {ANSWERS_CHECKED} "
        "per cell): "
        + ", ".join(f"{cell}: {n}" for cell, n in out["answers_differing_under_load"].items())
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
