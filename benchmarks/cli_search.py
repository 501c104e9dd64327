"""`attend search` beside a running server against `attend search --here`, side by side in one run
(issue 33: the demo served on another port than ATTEND_PORT's, and a search that looked at 8000
loaded the model itself, 9.3 s against 1.7 s).

    .venv/bin/python -m benchmarks.cli_search [--reps 3] [--json]

The demo catalog is indexed into a SQLite file in a temporary folder (`attend index`), served by
`attend serve` on a free port; then `attend search` runs `--reps` times each way, in turns (so a
busy machine slows both alike): with ATTEND_PORT unset, so that only the server's record beside the
database (service/commands/server_record.py) can lead the command to it, and with `--here`, which
loads the model and the index in the command. Each run is a fresh process, timed from its start to
its exit; the ratio is of the medians. The ONNX export is made before the timed runs (the server's
start makes it), so no run waits for it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from indexer.data import DEMO_CATALOG

ATTEND = str(Path(sys.executable).with_name("attend"))
QUERY = "space opera"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str, server: subprocess.Popen[bytes], deadline_s: float = 600) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"attend serve exited with status {server.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("attend serve did not become ready")


def _timed(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(
        [ATTEND, "search", QUERY, "-k", "3", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - t0, done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="timed searches each way")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if k not in ("ATTEND_PORT", "ATTEND_HOST")}
        env |= {"ATTEND_DATABASE_URL": f"sqlite:///{folder / 'attend.db'}", "HF_HUB_OFFLINE": "1"}
        index = [ATTEND, "index", str(DEMO_CATALOG)]
        subprocess.run(index, env=env, cwd=folder, check=True, capture_output=True)
        server = subprocess.Popen(
            [ATTEND, "serve", "--port", str(port)],
            env=env,
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _ready(f"http://127.0.0.1:{port}", server)
            times: dict[str, list[float]] = {"server": [], "here": []}
            for _ in range(args.reps):
                took, err = _timed([], env, folder)
                if "searching here" in err:
                    raise RuntimeError(f"the search did not find the server: {err.strip()}")
                times["server"].append(took)
                times["here"].append(_timed(["--here"], env, folder)[0])
        finally:
            server.terminate()
            server.wait(timeout=60)
    medians = {way: statistics.median(t) for way, t in times.items()}
    result = {
        "reps": args.reps,
        "seconds": times,
        "median_s": medians,
        "server_over_here": medians["server"] / medians["here"],
    }
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
        return
    for way, t in times.items():
        runs = ", ".join(f"{s:.2f}" for s in t)
        sys.stdout.write(f"{way:>6}: median {medians[way]:.2f} s ({runs})\n")
    sys.stdout.write(f"server / here: {result['server_over_here']:.2f}\n")


if __name__ == "__main__":
    main()
