"""The attention core on one CUDA GPU next to FAISS (when it has GPU support) and a naive
full softmax: benchmarks/core.py's grid plus N = 10M, with keys in fp32, fp16 and bf16.

    python benchmarks/gpu.py            # N = 10k, 100k, 1M, 10M × B = 1, 16, 256 × 3 dtypes
    python -m benchmarks.gpu --quick    # without N = 10M
    python benchmarks/gpu.py --json     # one JSON object on stdout instead
    python benchmarks/gpu.py --json-file gpu.json   # the table, and the JSON object in a file

Sized to finish in under 3 minutes on an H200 (--target-s sets the timed seconds per method
and cell). Exits at once with a message where torch sees no CUDA device.

- attend / attend+V: models.attention.attend on the GPU; q is cast to the keys' dtype (as attend
  does), values are stored in the keys' dtype; attend accumulates in fp32.
- faiss: GpuIndexFlatIP (fp32, or fp16 storage for fp16 keys) when `faiss` was built with GPU
  support; bf16 keys and a CPU-only FAISS get "-" with the reason in the notes.
- naive: torch.softmax(q @ keys.T * 20, -1).topk(10) in the keys' dtype.

Timing: torch.cuda.synchronize() before the clock starts and before it stops on every call,
so a call's time includes all its kernels. Bandwidth: at B = 1 attend reads N·d·bytes of keys
per query; next to it, the device-to-device copy bandwidth of this GPU (read + write, CUDA
events around a 4 GiB copy) and a read-only figure (sum of the same buffer).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

if not __package__:  # run as a file (python benchmarks/gpu.py): make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (
    GRID_B,
    GRID_N,
    SCALE,
    Answer,
    Cell,
    D,
    K,
    MethodRun,
    cell_table,
    dump_json,
    environment,
    finite,
    fmt_num,
    log,
    out,
    random_normal,
    random_unit,
    reference,
    run_method,
    tolerances,
)
from models.attention import Attention, attend

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
GPU_GRID_N: tuple[int, ...] = (*GRID_N, 10_000_000)


def require_cuda() -> torch.device:
    if not torch.cuda.is_available():
        sys.exit(
            "benchmarks/gpu.py needs a CUDA GPU, and torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'}). "
            "Run benchmarks/core.py for the CPU."
        )
    return torch.device("cuda", torch.cuda.current_device())


def sync() -> None:
    torch.cuda.synchronize()


# --------------------------------------------------------------------------- FAISS


class GpuFaiss:
    """FAISS's GPU flat inner-product index, if this `faiss` has GPU support."""

    def __init__(self) -> None:
        self.faiss: Any = None
        self.res: Any = None
        self.reason = ""
        try:
            faiss: Any = importlib.import_module("faiss")
        except ImportError:
            self.reason = "faiss is not installed"
            return
        if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() < 1:
            self.reason = f"faiss {faiss.__version__} has no GPU support (CPU-only build)"
            return
        importlib.import_module("faiss.contrib.torch_utils")  # search() takes CUDA tensors
        self.faiss = faiss
        self.res = faiss.StandardGpuResources()
        # FAISS on the legacy default stream, so it orders with torch's default stream.
        self.res.setDefaultNullStreamAllDevices()

    @property
    def version(self) -> str | None:
        return None if self.faiss is None else str(self.faiss.__version__)

    def index(self, keys: Tensor) -> tuple[Any, str]:
        """(an index over `keys`, a note) or (None, why not)."""
        if self.faiss is None:
            return None, self.reason
        if keys.dtype == torch.bfloat16:
            return None, "FAISS's GPU flat index stores fp32 or fp16, not bf16"
        config = self.faiss.GpuIndexFlatConfig()
        config.device = keys.device.index or 0
        config.useFloat16 = keys.dtype == torch.float16
        index = self.faiss.GpuIndexFlatIP(self.res, keys.shape[1], config)
        index.add(keys.float())
        return index, f"GpuIndexFlatIP, {'fp16' if config.useFloat16 else 'fp32'} storage"


# --------------------------------------------------------------------------- measurements


def bandwidth(device: torch.device, gib: float = 4.0, reps: int = 10) -> dict[str, float]:
    """Device-to-device copy (read + write) and read-only (sum) bandwidth, by CUDA events."""
    nbytes = int(gib * 2**30)
    src = torch.zeros(nbytes // 4, device=device)
    dst = torch.empty_like(src)

    def timed(fn: Callable[[], object]) -> float:
        fn()
        sync()
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        times = []
        for _ in range(reps):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return float(sorted(times)[len(times) // 2])

    copy_s = timed(lambda: dst.copy_(src))
    read_s = timed(src.sum)
    return {
        "bytes": float(nbytes),
        "copy_gbps": 2 * nbytes / copy_s / 1e9,
        "read_gbps": nbytes / read_s / 1e9,
    }


def run_cell(
    N: int,
    B: int,
    dtype_name: str,
    *,
    keys: Tensor,
    values: Tensor,
    flat: Any,
    flat_note: str,
    generator: torch.Generator,
    target_s: float,
    check_queries: int,
) -> Cell:
    t_cell = time.perf_counter()
    q = random_unit(B, D, generator=generator, device=keys.device)  # fp32, as a caller has
    ref = reference(q[:check_queries], keys, values, k=K, scale=SCALE, chunk=65_536)
    tols = tolerances(keys.dtype, SCALE)
    qk = q.to(keys.dtype)

    def from_attention(a: object) -> Answer:
        assert isinstance(a, Attention)
        return Answer(indices=a.indices.cpu(), weights=a.weights.cpu(), output=_cpu(a.output))

    def from_faiss(r: object) -> Answer:
        assert isinstance(r, tuple)
        return Answer(indices=r[1].cpu())

    def from_topk(r: object) -> Answer:
        assert isinstance(r, tuple)
        return Answer(indices=r[1].cpu(), weights=r[0].float().cpu())

    def naive() -> tuple[Tensor, Tensor]:
        w = torch.softmax(qk @ keys.T * SCALE, -1)
        top = w.topk(K)
        return top.values, top.indices

    plan: dict[str, tuple[Callable[[], object], Callable[[object], Answer]]] = {
        "attend": (lambda: attend(q, keys, k=K, scale=SCALE), from_attention),
        "attend+V": (lambda: attend(q, keys, values, k=K, scale=SCALE), from_attention),
    }
    if flat is not None:
        plan["faiss"] = (lambda: flat.search(q, K), from_faiss)
    plan["naive"] = (naive, from_topk)
    methods: dict[str, MethodRun] = {}
    for name, (fn, to_answer) in plan.items():
        methods[name] = run_method(
            fn,
            to_answer,
            B=B,
            ref=ref,
            keys=keys,
            target_s=target_s,
            sync=sync,
            tols=tols,
            max_reps=100,
        )
        run = methods[name]
        log(
            f"  {dtype_name} N={N:,} B={B} {name}: {fmt_num(run.qps)} q/s ({run.reps} reps, "
            f"{run.ms_per_call or 0:.3f} ms/call) {run.check.text() if run.check else ''}"
        )
    if flat is None:
        methods["faiss"] = MethodRun(note=flat_note)
    else:
        methods["faiss"].note = flat_note
    gc.collect()
    return Cell(N=N, B=B, dtype=dtype_name, methods=methods, seconds=time.perf_counter() - t_cell)


def _cpu(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.cpu()


# --------------------------------------------------------------------------- main


def run_grid(
    grid_n: tuple[int, ...],
    dtype_names: list[str],
    *,
    device: torch.device,
    gpu_faiss: GpuFaiss,
    generator: torch.Generator,
    target_s: float,
    check_queries: int,
) -> list[Cell]:
    cells: list[Cell] = []
    for N in grid_n:
        log(f"N={N:,}: keys and values ...")
        keys32 = random_unit(N, D, generator=generator, device=device)
        values32 = random_normal(N, D, generator=generator, device=device)
        for dtype_name in dtype_names:
            dtype = DTYPES[dtype_name]
            keys = keys32 if dtype == torch.float32 else keys32.to(dtype)
            values = values32 if dtype == torch.float32 else values32.to(dtype)
            flat, flat_note = gpu_faiss.index(keys)
            for B in GRID_B:
                cells.append(
                    run_cell(
                        N,
                        B,
                        dtype_name,
                        keys=keys,
                        values=values,
                        flat=flat,
                        flat_note=flat_note,
                        generator=generator,
                        target_s=target_s,
                        check_queries=check_queries,
                    )
                )
            del keys, values, flat
            gc.collect()
            torch.cuda.empty_cache()
        del keys32, values32
        gc.collect()
        torch.cuda.empty_cache()
    return cells


def summarise(
    cells: list[Cell],
    mem: dict[str, float],
    *,
    gpu_faiss: GpuFaiss,
    device: torch.device,
    args: argparse.Namespace,
    wall_s: float,
) -> dict[str, Any]:
    bw = []
    for c in cells:
        run = c.methods["attend"]
        if c.B == 1 and run.ms_per_call is not None:
            nbytes = c.N * D * DTYPES[c.dtype].itemsize
            gbps = nbytes / (run.ms_per_call / 1e3) / 1e9
            bw.append(
                {
                    "N": c.N,
                    "dtype": c.dtype,
                    "bytes": nbytes,
                    "ms_per_query": run.ms_per_call,
                    "gbps": gbps,
                    "percent_of_copy": 100 * gbps / mem["copy_gbps"],
                    "percent_of_read": 100 * gbps / mem["read_gbps"],
                }
            )
    props = torch.cuda.get_device_properties(device)
    result: dict[str, Any] = {
        "benchmark": "gpu",
        "environment": environment(
            {
                "gpu": props.name,
                "gpu_memory_gb": props.total_memory / 1e9,
                "compute_capability": f"{props.major}.{props.minor}",
                "cuda": torch.version.cuda,
                "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                "faiss": gpu_faiss.version,
                "faiss_note": gpu_faiss.reason or "GPU FAISS",
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            }
        ),
        "d": D,
        "k": K,
        "scale": SCALE,
        "target_s": args.target_s,
        "check_queries": args.check_queries,
        "bandwidth": mem,
        "cells": [c.as_dict() for c in cells],
        "attend_bandwidth_b1": bw,
        "all_correct": all(
            r.check.ok for c in cells for r in c.methods.values() if r.check is not None
        ),
        "peak_gpu_memory_gb": torch.cuda.max_memory_allocated(device) / 1e9,
        "wall_s": wall_s,
    }
    return result


def report_text(result: dict[str, Any], cells: list[Cell]) -> None:
    env = result["environment"]
    mem = result["bandwidth"]
    out(
        f"Attend GPU benchmark: {env['gpu']} (sm {env['compute_capability']}, "
        f"{env['gpu_memory_gb']:.0f} GB), torch {env['torch']} CUDA {env['cuda']}; "
        f"random unit keys, d={D}, k={K}, scale={SCALE:g}; "
        f"FAISS: {env['faiss'] or '-'} ({env['faiss_note']})"
    )
    out("q/s = B / median seconds per call, torch.cuda.synchronize() around every call.")
    out()
    out(cell_table(cells, with_dtype=True))
    out()
    notes = sorted({r.note for c in cells for r in c.methods.values() if r.note})
    for note in notes:
        out(f"faiss: {note}")
    out(
        f"bandwidth ({mem['bytes'] / 2**30:.0f} GiB buffer, CUDA events): device copy "
        f"{mem['copy_gbps']:,.0f} GB/s (read + write), read (sum) {mem['read_gbps']:,.0f} GB/s"
    )
    for b in result["attend_bandwidth_b1"]:
        out(
            f"attend at B=1, {b['dtype']}, N={b['N']:,}: {b['bytes'] / 1e6:,.0f} MB of keys in "
            f"{b['ms_per_query']:.3f} ms = {b['gbps']:,.0f} GB/s = {b['percent_of_copy']:.0f}% "
            f"of copy, {b['percent_of_read']:.0f}% of read bandwidth"
        )
    out()
    out(
        f"total wall time {result['wall_s']:.0f} s; peak GPU memory "
        f"{result['peak_gpu_memory_gb']:.1f} GB; correct everywhere: {result['all_correct']}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--json-file", type=Path, help="also write the JSON object to this file (keeps the table)"
    )
    parser.add_argument("--quick", action="store_true", help="drop N = 10M")
    parser.add_argument(
        "--dtypes", default="float32,float16,bfloat16", help="comma-separated key dtypes"
    )
    parser.add_argument(
        "--target-s", type=float, default=0.15, help="timed seconds per method per cell"
    )
    parser.add_argument(
        "--check-queries", type=int, default=16, help="queries per cell checked in float64"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    device = require_cuda()

    t_start = time.perf_counter()
    dtype_names = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    unknown = [d for d in dtype_names if d not in DTYPES]
    if unknown:
        parser.error(f"unknown dtype(s) {unknown}; choose from {list(DTYPES)}")
    grid_n = tuple(n for n in GPU_GRID_N if not (args.quick and n >= 10_000_000))
    generator = torch.Generator(device=device).manual_seed(args.seed)
    gpu_faiss = GpuFaiss()

    log("bandwidth ...")
    mem = bandwidth(device)
    torch.cuda.empty_cache()  # the 8 GiB of bandwidth buffers
    cells = run_grid(
        grid_n,
        dtype_names,
        device=device,
        gpu_faiss=gpu_faiss,
        generator=generator,
        target_s=args.target_s,
        check_queries=args.check_queries,
    )
    result = summarise(
        cells,
        mem,
        gpu_faiss=gpu_faiss,
        device=device,
        args=args,
        wall_s=time.perf_counter() - t_start,
    )
    if args.json_file is not None:
        args.json_file.write_text(json.dumps(finite(result), indent=1, allow_nan=False) + "\n")
    if args.json:
        dump_json(result)
    else:
        report_text(result, cells)


if __name__ == "__main__":
    main()
