"""Where a served search's time goes: py-spy samples of `attend serve` under `wrk`, summed by
thread and by what the stack was doing (benchmarks/ceiling.py `--profile`).

A sample's stack is put in the first of `KINDS` one of whose markers it holds: the encoder and
the ranking before anything that calls them, the waiting before the event loop's own code. The
event loop's thread is "MainThread"; the searcher's worker "attend-searcher"; the others are
the thread pool's (a POST's response validation, the book reads) and uvicorn's.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks._common import out, table
from benchmarks.service import Server, wrk_cells

# (kind, markers): a marker is a substring of a frame ("function (file:line)")
KINDS: list[tuple[str, tuple[str, ...]]] = [
    ("waiting (idle)", ("Condition.wait", "select (selectors.py", "_run_once (asyncio/base")),
    ("encoder", ("onnx_encoder.py", "models/encoder.py", "tokenizers", "onnxruntime")),
    ("ranking", ("query_ranking.py", "service/engine/ranking.py", "mixing.py", "models/")),
    ("engine results", ("Searcher._result", "lexical.py", "results.py")),
    ("JSON serialisation", ("render (", "model_dump_json", "json/encoder", "orjson")),
    ("validation", ("pydantic", "model_validate", "search_response", "_clean_query", "solve_")),
    ("h11 parse / write", ("h11", "h11_impl.py")),
    (
        "thread hand-offs",
        ("concurrent/futures", "wrap_future", "call_soon_threadsafe", "batching.py"),
    ),
    ("routing, middleware", ("starlette", "fastapi", "service/api")),
    ("event loop", ("asyncio",)),
]
_LINE = re.compile(r"^thread \((\w+)\): ([^;]*);(.*) (\d+)$")


def kind_of(stack: str) -> str:
    for kind, markers in KINDS:
        if any(marker in stack for marker in markers):
            return kind
    return "other"


def summarise(raw: str) -> dict[str, Counter[str]]:
    """py-spy's raw samples: thread name → kind → samples."""
    by_thread: dict[str, Counter[str]] = {}
    for line in raw.splitlines():
        m = _LINE.match(line.strip())
        if m is None:
            continue
        _, name, stack, count = m.groups()
        thread = name if name in ("MainThread", "attend-searcher") else "other threads"
        by_thread.setdefault(thread, Counter())[kind_of(stack)] += int(count)
    return by_thread


def profile_server(
    server: Server, queries: list[str], seconds: float, py_spy: str, clients: int = 32
) -> dict[str, Any]:
    """py-spy on `server` for `seconds` while `wrk` holds `clients` connections on it."""
    load: list[dict[str, Any]] = []
    wrk = threading.Thread(
        target=lambda: load.extend(wrk_cells({"http": server}, [clients], seconds + 3, queries))
    )
    wrk.start()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "samples.txt"
        threading.Event().wait(1.5)  # the connections open and the batches fill first
        subprocess.run(
            [
                py_spy,
                "record",
                "--pid",
                str(server.proc.pid),
                "--duration",
                f"{seconds:g}",
                "--rate",
                "200",
                "--format",
                "raw",
                "--threads",
                "--nonblocking",  # the server is not paused at each sample
                "-o",
                str(raw),
            ],
            capture_output=True,
            check=True,
        )
        text = raw.read_text()
    wrk.join()
    by_thread = summarise(text)
    return {
        "seconds": seconds,
        "clients": clients,
        "rps_while_sampled": load[0]["rps"] if load else None,
        "samples": {thread: dict(kinds) for thread, kinds in by_thread.items()},
    }


def report_profile(profile: dict[str, Any]) -> None:
    samples: dict[str, dict[str, int]] = profile["samples"]
    kinds = [k for k, _ in KINDS] + ["other"]
    threads = sorted(samples, key=lambda t: -sum(samples[t].values()))
    total = sum(sum(k.values()) for k in samples.values()) or 1
    rows = []
    for kind in kinds:
        counts = [samples[t].get(kind, 0) for t in threads]
        if any(counts):
            rows.append([kind, *(f"{100 * n / total:.1f}" for n in counts)])
    rps = profile["rps_while_sampled"] or 0.0
    out(
        f"\npy-spy, {profile['seconds']:g} s at {profile.get('clients', 32)} clients "
        f"({rps:.0f} req/s while sampled): "
        "% of all samples"
    )
    out(table(["what", *threads], rows))
