"""The attention core of this code next to the core of other code, in one run: benchmarks.core
(`--json`) under each source tree in turns, and this code's q/s as a ratio to the other's.

    git worktree add /tmp/attend-before REV
    .venv/bin/python -m benchmarks.core_versus /tmp/attend-before --rounds 3 --quick

Both trees run in the same venv, each with its own packages first on PYTHONPATH; rounds
alternate (this, other, this, other, …) so that noise on the shared machine falls on both, and
each cell's q/s is the median over rounds. FAISS runs the same code in both trees: its ratio is
the run's noise floor, against which the attend ratios are read. Arguments after the options go
to benchmarks.core (`--quick`, `--target-s`, …). Progress to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks._common import log

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("attend", "attend+V", "faiss")


def run_core(tree: Path, core_args: list[str]) -> dict[str, Any]:
    """benchmarks.core's JSON result, run from `tree` with its packages imported first."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.core", "--json", "--no-side", *core_args],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )  # its progress (and any error) on our stderr
    if done.returncode:
        raise SystemExit(f"benchmarks.core in {tree} exited with {done.returncode}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def qps_by_cell(results: list[dict[str, Any]]) -> dict[tuple[int, int, str], float]:
    """Median q/s over the runs, per (N, B, method)."""
    seen: dict[tuple[int, int, str], list[float]] = {}
    for result in results:
        for cell in result["cells"]:
            for name, run in cell["methods"].items():
                if run.get("qps") is not None:
                    seen.setdefault((cell["N"], cell["B"], name), []).append(run["qps"])
    return {key: statistics.median(values) for key, values in seen.items()}


def report(
    this: dict[tuple[int, int, str], float], other: dict[tuple[int, int, str], float]
) -> str:
    head = f"{'N':>9} {'B':>4}" + "".join(
        f" {m + ' q/s':>14} {'other':>9} {'ratio':>6}" for m in METHODS
    )
    lines = [head]
    ratios: dict[str, list[float]] = {m: [] for m in METHODS}
    for N, B in sorted({(n, b) for n, b, _ in this}):
        row = f"{N:>9,} {B:>4}"
        for m in METHODS:
            a, b = this.get((N, B, m)), other.get((N, B, m))
            if a is None or b is None:
                row += f" {'-':>14} {'-':>9} {'-':>6}"
                continue
            ratios[m].append(a / b)
            row += f" {a:>14.1f} {b:>9.1f} {a / b:>6.2f}"
        lines.append(row)
    lines.append(
        "geometric mean of the ratios (this / other): "
        + ", ".join(
            f"{m} {statistics.geometric_mean(r):.3f} (range {min(r):.2f}-{max(r):.2f})"
            for m, r in ratios.items()
            if r
        )
    )
    lines.append("faiss is the same code in both trees: its ratio is the run's noise")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("other", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each tree, alternating")
    args, core_args = parser.parse_known_args()
    runs: dict[str, list[dict[str, Any]]] = {"this": [], "other": []}
    for r in range(args.rounds):
        for side, tree in (("this", ROOT), ("other", args.other.resolve())):
            log(f"round {r + 1}/{args.rounds}: {side} ({tree}) ...")
            runs[side].append(run_core(tree, core_args))
    sys.stdout.write(
        f"benchmarks.core, this code ({ROOT}) / other ({args.other}), median of "
        f"{args.rounds} rounds each, in turns\n"
        + report(qps_by_cell(runs["this"]), qps_by_cell(runs["other"]))
        + "\n"
    )


if __name__ == "__main__":
    main()
