"""The attention core on the CPU next to FAISS and a naive full softmax, on random unit keys.

    .venv/bin/python benchmarks/core.py            # N = 10k, 100k, 1M; a few minutes on 2 cores
    .venv/bin/python -m benchmarks.core            # the same
    .venv/bin/python benchmarks/core.py --quick    # N = 10k, 100k; under a minute
    .venv/bin/python benchmarks/core.py --json     # one JSON object on stdout instead

Needs FAISS: `pip install -e '.[bench]'` (with `torch==2.13.0` on the same command line).

For every N × B cell (d = 384, k = 10, scale = 20), four methods (five where the C passes are
built) answer the same B queries:

- attend:    models.attention.attend(q, keys, k=10, scale=20.0), weights only, with the keys
             laid out as the service holds them ((d, N) memory, an (N, d) view), multiplied
             by the BLAS this process measured faster for each batch size (models/cpu_blas.py,
             printed in the header)
- attend+V:  the same with values V (a separate random (N, 384) matrix), so `output` too
- faiss:     IndexFlatIP.search with as many OpenMP threads as torch has. At B = 1 FAISS's
             defaults; at B ≥ 16 its BLAS path (distance_compute_blas_threshold = 0) with a
             database block of --faiss-db-block keys (65,536, like attend's chunk; FAISS's
             default of 1,024 makes each GEMM tiny and was 4-10× slower at B = 256, N = 1M here)
- naive:     torch.softmax(q @ keys.T * 20, -1).topk(10), the whole (B, N) matrix at once
- attend-torch: attend as above with its CPU passes in torch's operations, not in C
             (models/cpu_kernels.py), where the C ones are built: what they gain, same run

Each is timed as a median over calls after one warm-up call (whose answer is checked against
a float64 reference, see _common.py), the methods in turns, a call of each per round, so
all meet the same load from other processes; q/s = B / median seconds per call. Then the achieved
read bandwidth of attend at B = 1 next to this machine's measured memory bandwidth, and a side
table at the largest N: the bare matmuls `q @ keys.T` and `q @ keysT` (keys pre-transposed to a
contiguous (d, N) matrix) against FAISS, and attend itself given keys as `keysT.T`, a (N, d) view
of that same contiguous (d, N) memory.

Progress goes to stderr; the table (or the JSON object) to stdout.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import Tensor

if not __package__:  # run as a file (python benchmarks/core.py): make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (
    GRID_B,
    GRID_N,
    SCALE,
    TORCH_PASSES,
    Answer,
    Cell,
    D,
    K,
    cell_table,
    cpu_snapshot,
    dump_json,
    environment,
    fmt_num,
    log,
    other_cores,
    out,
    random_normal,
    random_unit,
    reference,
    run_as_the_service,
    run_in_turns,
    table,
    time_call,
    tolerances,
)
from models import cpu_blas, cpu_kernels
from models.attention import Attention, attend

BYTES = 4  # float32
BUSY_CORES = 0.25  # other processes used more than this many cores: the cell is not clean


def import_faiss() -> ModuleType:
    try:
        import faiss
    except ImportError:
        sys.exit(
            "benchmarks/core.py needs FAISS: .venv/bin/pip install -e '.[bench]' torch==2.13.0"
        )
    return faiss


class FaissFlat:
    """IndexFlatIP over the keys, configured per batch size as the module docstring says."""

    def __init__(
        self,
        faiss: ModuleType,
        keys: Tensor,
        *,
        threads: int,
        db_block: int,
        defaults: tuple[int, int],
    ) -> None:
        """`defaults`: FAISS's own (blas_threshold, database_bs), read before anything set them."""
        self.faiss = faiss
        faiss.omp_set_num_threads(threads)
        self.default_threshold, self.default_db_block = defaults
        self.db_block = db_block or self.default_db_block
        self.index = faiss.IndexFlatIP(keys.shape[1])
        self.index.add(np.ascontiguousarray(keys.numpy()))

    def configure(self, B: int) -> str:
        """Set FAISS's globals for a batch of B queries; returns what was set, for the record."""
        cvar = self.faiss.cvar
        if B == 1:
            cvar.distance_compute_blas_threshold = self.default_threshold
            cvar.distance_compute_blas_database_bs = self.default_db_block
            return (
                f"defaults (blas_threshold {self.default_threshold}, "
                f"database_bs {self.default_db_block})"
            )
        cvar.distance_compute_blas_threshold = 0
        cvar.distance_compute_blas_database_bs = self.db_block
        return f"BLAS (blas_threshold 0, database_bs {self.db_block})"

    def search(self, q: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        scores, indices = self.index.search(q, K)
        return scores, indices

    def close(self) -> None:
        self.index.reset()
        del self.index


# --------------------------------------------------------------------------- measurements


def memory_bandwidth(target_s: float, gib: float = 1.5) -> dict[str, float]:
    """Read and copy bandwidth of this machine with torch's threads, on a `gib` GiB buffer.

    - sum:  x.sum(), a pure streaming read (GB/s of x read)
    - gemv: ones(384) @ x.view(384, -1), BLAS reading the same bytes as a contiguous (d, N)
            matrix, the fastest read kernel found here (GB/s of x read)
    - copy: y.copy_(x), counted as read + write (2 × bytes)
    """
    n = int(gib * 2**30) // BYTES // D * D
    x = torch.ones(n)
    nbytes = n * BYTES
    result: dict[str, float] = {"bytes": float(nbytes)}
    timing, _ = time_call(x.sum, target_s=target_s, min_reps=5)
    result["sum_read_gbps"] = nbytes / timing.median_s / 1e9
    ones = torch.ones(D)
    mat = x.view(D, -1)
    timing, _ = time_call(lambda: ones @ mat, target_s=target_s, min_reps=5)
    result["gemv_read_gbps"] = nbytes / timing.median_s / 1e9
    y = torch.empty_like(x)
    timing, _ = time_call(lambda: y.copy_(x), target_s=target_s, min_reps=5)
    result["copy_gbps"] = 2 * nbytes / timing.median_s / 1e9
    result["read_gbps"] = max(result["sum_read_gbps"], result["gemv_read_gbps"])
    return result


def run_cell(
    N: int,
    B: int,
    *,
    keys: Tensor,
    values: Tensor,
    flat: FaissFlat,
    generator: torch.Generator,
    target_s: float,
    check_queries: int,
) -> Cell:
    t_cell = time.perf_counter()
    q = random_unit(B, D, generator=generator)
    qn = np.ascontiguousarray(q.numpy())
    ref = reference(q[:check_queries], keys, values, k=K, scale=SCALE)
    tols = tolerances(keys.dtype, SCALE)

    def from_attention(a: object) -> Answer:
        assert isinstance(a, Attention)
        return Answer(indices=a.indices, weights=a.weights, output=a.output)

    def from_faiss(r: object) -> Answer:
        assert isinstance(r, tuple)
        return Answer(indices=torch.from_numpy(r[1]))

    def from_topk(r: object) -> Answer:
        assert isinstance(r, tuple)
        return Answer(indices=r[1], weights=r[0])

    def naive() -> tuple[Tensor, Tensor]:
        w = torch.softmax(q @ keys.T * SCALE, -1)
        top = w.topk(K)
        return top.values, top.indices

    faiss_setting = flat.configure(B)
    # attend runs on the keys as the service holds them (service/engine/served_index.py
    # `LocalKeys`): (d, N) memory seen through its (N, d) transpose view
    served = keys.T.contiguous().T
    plan: dict[str, tuple[Callable[[], object], Callable[[object], Answer]]] = {
        "attend": (lambda: attend(q, served, k=K, scale=SCALE), from_attention),
        "attend+V": (lambda: attend(q, served, values, k=K, scale=SCALE), from_attention),
        "faiss": (lambda: flat.search(qn), from_faiss),
        "naive": (naive, from_topk),
    }
    if cpu_kernels.available():  # the same call on torch's passes: what the C ones gain
        plan[TORCH_PASSES] = (lambda: torch_passes(q, served), from_attention)
    # in turns (run_in_turns), so attend and FAISS meet the same load from other processes
    methods = run_in_turns(plan, B=B, ref=ref, keys=keys, target_s=target_s, tols=tols)
    gc.collect()
    for name, run in methods.items():
        log(
            f"  N={N:,} B={B} {name}: {fmt_num(run.qps)} q/s ({run.reps} reps, "
            f"{run.ms_per_call or 0:.2f} ms/call, others {run.other_cores or 0:.2f} cores) "
            f"{run.check.text() if run.check else ''}"
        )
    methods["faiss"].note = faiss_setting
    return Cell(N=N, B=B, dtype="float32", methods=methods, seconds=time.perf_counter() - t_cell)


def torch_passes(q: Tensor, served: Tensor) -> Attention:
    """attend with models/cpu_kernels.py's C passes disabled for the call."""
    cpu_kernels.set_enabled(False)
    try:
        return attend(q, served, k=K, scale=SCALE)
    finally:
        cpu_kernels.set_enabled(True)


def side_ops(
    q: Tensor, keys: Tensor, keys_t: Tensor, flat: FaissFlat
) -> dict[str, Callable[[], object]]:
    """The side table's operations for one batch of queries q."""
    qn = np.ascontiguousarray(q.numpy())
    setting = flat.configure(q.shape[0])

    def matmul_rows() -> Tensor:
        return q @ keys.T

    def matmul_t() -> Tensor:
        return q @ keys_t

    def matmul_t_openblas() -> Tensor:
        return cpu_blas.openblas_matmul(q, keys_t)

    def search() -> object:
        return flat.search(qn)

    def attend_t() -> Attention:
        return attend(q, keys_t.T, k=K, scale=SCALE)

    ops: dict[str, Callable[[], object]] = {
        "q @ keys.T   (keys (N, d) row-major)": matmul_rows,
        "q @ keysT    (keysT contiguous (d, N))": matmul_t,
        "q @ keysT    (the same, numpy's OpenBLAS)": matmul_t_openblas,
        f"faiss search  [{setting}]": search,
    }
    if q.shape[0] == 1:  # at B = 256 the layout hardly matters and a call takes seconds
        ops["attend(q, keysT.T)  (same API, keys a view of (d, N) memory)"] = attend_t
    return ops


def side_table(
    keys: Tensor,
    flat: FaissFlat,
    cells: list[Cell],
    *,
    generator: torch.Generator,
    target_s: float,
    batches: tuple[int, ...] = (1, 256),
) -> list[dict[str, Any]]:
    """Bare matmuls on both key layouts and FAISS alone, then attend on both layouts
    (attend(q, keys) copied from the main table's cell, measured there)."""
    N = keys.shape[0]
    keys_t = keys.T.contiguous()  # (d, N), another N·d·4 bytes
    rows: list[dict[str, Any]] = []

    def row(op: str, B: int, seconds: float, reps: int, others: float | None) -> dict[str, Any]:
        return {
            "op": op,
            "N": N,
            "B": B,
            "ms_per_call": seconds * 1e3,
            "qps": B / seconds,
            "keys_read_gbps": N * D * BYTES / seconds / 1e9,
            "reps": reps,
            "other_cores": others,
        }

    for B in batches:
        q = random_unit(B, D, generator=generator)
        for name, fn in side_ops(q, keys, keys_t, flat).items():
            before = cpu_snapshot()
            timing, _ = time_call(fn, target_s=target_s)
            others = other_cores(before, cpu_snapshot())
            gc.collect()
            rows.append(row(name, B, timing.median_s, timing.reps, others))
            log(f"  side N={N:,} B={B} {name}: {timing.median_s * 1e3:.1f} ms")
        for c in cells:
            run = c.methods["attend"]
            if c.N == N and c.B == B and run.ms_per_call is not None:
                rows.append(
                    row(
                        "attend(q, keys)  (main table)",
                        B,
                        run.ms_per_call / 1e3,
                        run.reps,
                        run.other_cores,
                    )
                )
    return rows  # keys_t goes with this frame; the caller collects


# --------------------------------------------------------------------------- report


def report_text(result: dict[str, Any], cells: list[Cell]) -> None:
    env = result["environment"]
    out(
        f"Attend CPU benchmark: random unit keys, d={D}, k={K}, scale={SCALE:g}; "
        f"torch {env['torch']} ({env['torch_threads']} threads), "
        f"faiss {env['faiss']} ({env['faiss_threads']} OpenMP threads), numpy {env['numpy']}; "
        f"attend's CPU product (measured per batch size): "
        + ", ".join(f"B~{b} {name}" for b, name in env["cpu_blas_by_batch"].items())
        + f"; its softmax passes and rescoring: {env['cpu_passes']}; "
        + ", ".join(f"{k}={v}" for k, v in env["thread_settings"].items())
    )
    load = ", ".join(f"{x:.2f}" for x in env["loadavg_start"])
    load_end = ", ".join(f"{x:.2f}" for x in env["loadavg_end"])
    out(
        f"CPU: {env['cpu']} ({env['cpu_count']} logical CPUs); "
        f"load average at start {load}, at end {load_end}"
    )
    busy = [f"N={c.N:,} B={c.B}" for c in cells if (c.other_cores or 0) > BUSY_CORES]
    out(
        f"others: cores other processes kept busy during the cell (max over its methods); "
        f"{result['other_cores_run'] or 0:.2f} on average over the whole run"
        + (
            f". Above {BUSY_CORES} at {', '.join(busy)}: there every OpenMP region of ours "
            "waited for a descheduled thread, so those cells are slower than on an idle machine"
            if busy
            else ""
        )
    )
    out(
        f"FAISS IndexFlatIP: B=1 {env['faiss_b1']}; B>=16 {env['faiss_batched']}. "
        "q/s = B / median seconds per call (>= 3 timed calls after a warm-up)."
    )
    out()
    out(cell_table(cells))
    out()
    out(
        f"correct: each method's top-{K} vs a float64 reference on the first "
        f"min(B, {result['check_queries']}) queries of the cell, compared by score within "
        "float32 noise ('ties': index set differs only among keys tied within it); "
        "attend/naive weights and attend+V output checked too."
    )
    out()
    mem = result["memory_bandwidth"]
    out(
        f"memory bandwidth (measured, {mem['bytes'] / 1e9:.2f} GB buffer, "
        f"{env['torch_threads']} threads): read {mem['read_gbps']:.1f} GB/s "
        f"(x.sum() {mem['sum_read_gbps']:.1f}, gemv {mem['gemv_read_gbps']:.1f}); "
        f"copy {mem['copy_gbps']:.1f} GB/s (read + write)"
    )
    for bw in result["attend_bandwidth_b1"]:
        out(
            f"attend at B=1, N={bw['N']:,}: reads {bw['bytes'] / 1e6:,.0f} MB of keys per query "
            f"in {bw['ms_per_query']:.2f} ms = {bw['gbps']:.1f} GB/s = "
            f"{bw['percent_of_read']:.0f}% of measured read bandwidth"
            + (" (keys fit in cache)" if bw["bytes"] < 32e6 else "")
        )
    if result["side"]:
        out()
        out(f"side table, N={result['side'][0]['N']:,}:")
        header = ["op", "B", "ms/call", "q/s", "keys GB/s", "others"]
        rows = [
            [
                r["op"],
                str(r["B"]),
                fmt_num(r["ms_per_call"]),
                fmt_num(r["qps"]),
                fmt_num(r["keys_read_gbps"]),
                "-" if r["other_cores"] is None else f"{r['other_cores']:.2f}",
            ]
            for r in result["side"]
        ]
        out(table(header, rows))
    out()
    out(
        f"total wall time {result['wall_s']:.0f} s; peak RSS {result['peak_rss_gb']:.1f} GB; "
        f"correct everywhere: {result['all_correct']}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--quick", action="store_true", help="drop N = 1M (under a minute)")
    parser.add_argument(
        "--target-s", type=float, default=1.0, help="timed seconds per method per cell"
    )
    parser.add_argument(
        "--check-queries", type=int, default=16, help="queries per cell checked in float64"
    )
    parser.add_argument(
        "--faiss-db-block",
        type=int,
        default=65_536,
        help="FAISS distance_compute_blas_database_bs at B >= 16 (0: FAISS's default)",
    )
    parser.add_argument("--no-side", action="store_true", help="skip the side table")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    run_as_the_service()

    t_start = time.perf_counter()
    load_start = os.getloadavg()
    faiss = import_faiss()
    faiss_defaults = (
        int(faiss.cvar.distance_compute_blas_threshold),
        int(faiss.cvar.distance_compute_blas_database_bs),
    )
    threads = torch.get_num_threads()
    grid_n = tuple(n for n in GRID_N if not (args.quick and n >= 1_000_000))
    generator = torch.Generator().manual_seed(args.seed)

    cpu_start = cpu_snapshot()
    log("memory bandwidth ...")
    mem = memory_bandwidth(args.target_s)
    gc.collect()

    cells: list[Cell] = []
    side: list[dict[str, Any]] = []
    faiss_b1 = faiss_batched = ""
    for N in grid_n:
        log(f"N={N:,}: keys, values, FAISS index ...")
        keys = random_unit(N, D, generator=generator)
        values = random_normal(N, D, generator=generator)
        flat = FaissFlat(
            faiss, keys, threads=threads, db_block=args.faiss_db_block, defaults=faiss_defaults
        )
        faiss_b1, faiss_batched = flat.configure(1), flat.configure(16)
        for B in GRID_B:
            cells.append(
                run_cell(
                    N,
                    B,
                    keys=keys,
                    values=values,
                    flat=flat,
                    generator=generator,
                    target_s=args.target_s,
                    check_queries=args.check_queries,
                )
            )
        if grid_n[-1] == N and not args.no_side:
            side = side_table(keys, flat, cells, generator=generator, target_s=args.target_s)
        flat.close()
        del keys, values, flat
        gc.collect()

    bandwidth = []
    for c in cells:
        run = c.methods["attend"]
        if c.B == 1 and run.ms_per_call is not None:
            nbytes = c.N * D * BYTES
            gbps = nbytes / (run.ms_per_call / 1e3) / 1e9
            bandwidth.append(
                {
                    "N": c.N,
                    "bytes": nbytes,
                    "ms_per_query": run.ms_per_call,
                    "gbps": gbps,
                    "percent_of_read": 100 * gbps / mem["read_gbps"],
                }
            )
    result: dict[str, Any] = {
        "benchmark": "core",
        "environment": environment(
            {
                "numpy": np.__version__,
                "faiss": faiss.__version__,
                "faiss_threads": faiss.omp_get_max_threads(),
                "faiss_b1": faiss_b1,
                "faiss_batched": faiss_batched,
                "cpu_blas_by_batch": {str(b): name for b, name in cpu_blas.choices().items()},
                "cpu_passes": cpu_kernels.describe(),
                "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
                "loadavg_start": load_start,
                "loadavg_end": os.getloadavg(),
            }
        ),
        "d": D,
        "k": K,
        "scale": SCALE,
        "target_s": args.target_s,
        "check_queries": args.check_queries,
        "memory_bandwidth": mem,
        "cells": [c.as_dict() for c in cells],
        "attend_bandwidth_b1": bandwidth,
        "side": side,
        "all_correct": all(
            r.check.ok for c in cells for r in c.methods.values() if r.check is not None
        ),
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
        "other_cores_run": other_cores(cpu_start, cpu_snapshot()),
        "wall_s": time.perf_counter() - t_start,
    }
    if args.json:
        dump_json(result)
    else:
        report_text(result, cells)


if __name__ == "__main__":
    main()
