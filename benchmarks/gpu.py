"""The attention core on one CUDA GPU next to FAISS (when it has GPU support) and a naive
full softmax: benchmarks/core.py's grid plus N = 10M, with keys in fp32, fp16 and bf16.

    python benchmarks/gpu.py            # N = 10k, 100k, 1M, 10M × B = 1, 16, 256 × 3 dtypes
    python -m benchmarks.gpu --quick    # without N = 10M
    python benchmarks/gpu.py --json     # one JSON object on stdout instead
    python benchmarks/gpu.py --json-file gpu.json   # the table, and the JSON object in a file

Sized to finish in under 3 minutes on an H200 (--target-s sets the timed seconds per method
and cell). Exits at once with a message where torch sees no CUDA device.

- attend / attend+V: models.attention.attend on the GPU; q is cast to the keys' dtype (as attend
  does), values are stored in the keys' dtype; attend accumulates in fp32. Its chunks of half
  keys in one Triton kernel (models/cuda_fold.py), its finish in another
  (models/cuda_finish.py), its calls replayed from CUDA graphs (models/cuda_graphs.py).
- attend-topk: the same with torch's top-k passes in place of the one-kernel top-k
  (models/cuda_finish.py's select_blocks); attend-fused: without the graphs; attend-eager:
  without any kernel or graph, torch's passes launched one by one (the code before them all),
  so each part's gain is measured in the same run.
- faiss: GpuIndexFlatIP (fp32, or fp16 storage for fp16 keys) when `faiss` was built with GPU
  support; bf16 keys and a CPU-only FAISS get "-" with the reason in the notes.
- naive: torch.softmax(q @ keys.T * 20, -1).topk(10) in the keys' dtype.

Timing: torch.cuda.synchronize() before the clock starts and before it stops on every call,
so a call's time includes all its kernels. Bandwidth: at B = 1 attend reads N·d·bytes of keys
per query; next to it, the device-to-device copy bandwidth of this GPU (read + write, CUDA
events around a 4 GiB copy) and a read-only figure (sum of the same buffer). A call's fixed
cost: its time at B = 1 less its keys' bytes at the copy bandwidth. Last, the kernel alone at
N = 10M fp16, B = 1, in a few launch configurations and both key layouts ((N, d) and the
service's (d, N)), against the copy bandwidth.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
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
    fmt_ratio,
    log,
    out,
    random_normal,
    random_unit,
    reference,
    run_method,
    table,
    time_call,
    tolerances,
)
from models import cuda_finish, cuda_fold, cuda_graphs
from models.attention import Attention, attend
from models.attention_chunks import BLOCK, whole_blocks
from models.running_softmax import LOG2_E

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


# attend's GPU passes per method: (Triton kernels, CUDA graphs, the one-kernel top-k)
PASSES: dict[str, tuple[bool, bool, bool]] = {
    "attend": (True, True, True),
    "attend-topk": (True, True, False),
    "attend-fused": (True, False, True),
    "attend-eager": (False, False, False),
}


@contextlib.contextmanager
def passes(fused: bool, graphs: bool, select: bool) -> Iterator[None]:
    """attend's GPU passes as given for the block, the defaults after."""
    cuda_fold.set_enabled(fused)
    cuda_graphs.set_enabled(graphs)
    cuda_finish.set_select_enabled(select)
    try:
        yield
    finally:
        cuda_fold.set_enabled(True)
        cuda_graphs.set_enabled(True)
        cuda_finish.set_select_enabled(True)


def with_passes(name: str, fn: Callable[[], object]) -> Callable[[], object]:
    flags = PASSES[name]

    def call() -> object:
        with passes(*flags):
            return fn()

    return call


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
    for name in ("attend-topk", "attend-fused", "attend-eager"):
        plan[name] = (with_passes(name, lambda: attend(q, keys, k=K, scale=SCALE)), from_attention)
    if flat is not None:
        plan["faiss"] = (lambda: flat.search(q, K), from_faiss)
    plan["naive"] = (naive, from_topk)
    methods: dict[str, MethodRun] = {}
    for name, (fn, to_answer) in plan.items():
        # two calls first: attend's first call of a shape runs eagerly and its second captures
        # a graph (models/cuda_graphs.py), so the call checked below is a replay
        fn()
        fn()
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


def kernel_sweep(
    device: torch.device,
    generator: torch.Generator,
    mem: dict[str, float],
    N: int = 10_000_000,
) -> list[dict[str, Any]]:
    """models/cuda_fold.py's kernel alone at N fp16 keys, B = 1, in a few launch
    configurations and both key layouts: what its default is chosen by."""
    if not cuda_fold.available():
        return []
    keys_nd = random_unit(N, D, generator=generator, device=device).half()
    rows = []
    for layout in ("(N, d)", "(d, N)"):
        keys = keys_nd if layout == "(N, d)" else keys_nd.T.contiguous().T
        q = random_unit(1, D, generator=generator, device=device)
        s = torch.empty(1, whole_blocks(N), device=device)
        ref = (q.half().float() @ keys.float().T) * (SCALE * LOG2_E)  # (1, N)
        for bn in (64, 128, 256):
            for num_warps in (4, 8):
                cfg = {"bn": bn, "num_warps": num_warps, "num_stages": 3}

                call = functools.partial(
                    cuda_fold.logits_fold,
                    s,
                    q,
                    keys,
                    scale2=SCALE * LOG2_E,
                    bn=bn,
                    num_warps=num_warps,
                    num_stages=3,
                )
                timing, result = time_call(call, target_s=0.1, sync=sync, max_reps=100)
                assert isinstance(result, tuple)
                err = float((s[:, :N] - ref).abs().max())
                maxima = s.view(1, -1, BLOCK).amax(-1)  # (1, N / BLOCK), −inf past N
                max_ok = bool(torch.equal(result[0], maxima))
                gbps = N * D * 2 / timing.median_s / 1e9
                rows.append(
                    {
                        "N": N,
                        "layout": layout,
                        **cfg,
                        "ms": timing.median_s * 1e3,
                        "gbps": gbps,
                        "percent_of_copy": 100 * gbps / mem["copy_gbps"],
                        "max_abs_err_x": err,
                        "block_max_ok": max_ok,
                    }
                )
                log(
                    f"  kernel {layout} {cfg}: {timing.median_s * 1e3:.3f} ms, "
                    f"{gbps:,.0f} GB/s, err {err:.2e}, block maxima ok {max_ok}"
                )
    gc.collect()
    torch.cuda.empty_cache()
    return rows


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
    sweep: list[dict[str, Any]],
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
    fixed = []
    for c in cells:
        if c.B == 1 and c.N < 1_000_000:
            bytes_ms = c.N * D * DTYPES[c.dtype].itemsize / (mem["copy_gbps"] * 1e9) * 1e3
            row: dict[str, Any] = {"N": c.N, "dtype": c.dtype, "keys_ms": bytes_ms}
            for name in PASSES:
                ms = c.methods[name].ms_per_call if name in c.methods else None
                row[name] = None if ms is None else ms - bytes_ms
            fixed.append(row)
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
                "gpu_passes": cuda_fold.describe(),
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
        "fixed_ms_b1": fixed,
        "kernel_sweep": sweep,
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
        f"FAISS: {env['faiss'] or '-'} ({env['faiss_note']}); attend's passes: "
        f"{env['gpu_passes']}"
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
    out("ms per call, and attend's gain over each of its parts left out:")
    names = [*PASSES, "naive"]
    rows = []
    for c in cells:
        ms = [c.methods[m].ms_per_call if m in c.methods else None for m in names]
        a = ms[0]
        rows.append(
            [f"{c.N:,}", str(c.B), c.dtype]
            + [f"{v:.3f}" if v is not None else "-" for v in ms]
            + [fmt_ratio(None if a is None or v is None else v / a) for v in ms[1:]]
        )
    header = ["N", "B", "dtype"] + [f"{m} ms" for m in names] + [f"{m}/attend" for m in names[1:]]
    out(table(header, rows))
    out()
    for f in result["fixed_ms_b1"]:
        parts = ", ".join(f"{m} {f[m]:.3f}" for m in PASSES if f.get(m) is not None)
        out(
            f"fixed cost a call, B=1, {f['dtype']}, N={f['N']:,} "
            f"(keys {f['keys_ms']:.3f} ms): {parts} ms"
        )
    for r in result["kernel_sweep"]:
        out(
            f"kernel alone, N={r['N']:,} fp16 B=1 keys {r['layout']}, BN={r['bn']} "
            f"warps={r['num_warps']}: {r['ms']:.3f} ms, {r['gbps']:,.0f} GB/s = "
            f"{r['percent_of_copy']:.0f}% of copy; x max error {r['max_abs_err_x']:.1e}, "
            f"block maxima {'ok' if r['block_max_ok'] else 'WRONG'}"
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
    sweep = kernel_sweep(device, generator, mem)
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
        sweep,
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
