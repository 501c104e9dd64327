"""Shared grid, data, timing, correctness and table code for benchmarks/core.py and gpu.py.

Not a benchmark itself: `core.py` (CPU) and `gpu.py` (CUDA) import it as a sibling module
(the scripts' own folder is first on sys.path when they are run as files).

Correctness is judged against a float64 reference computed on a subset of the queries:

- The reference scores the queries exactly as the methods see them (q cast to the keys'
  dtype, then both upcast to float64), so a method is only charged for its own arithmetic.
- Top-k is compared by score, not by index: the k indices a method returns are rescored in
  float64 and must match the reference's k best scores, rank by rank, within a tolerance.
  Two keys whose scores differ by less than float32 (or fp16/bf16) rounding can legally come
  out in either order, or one can push the other out of the top k; comparing indices exactly
  would call that a bug. Such rows count as "ties", not as mismatches. Invalid or repeated
  indices, or a score off by more than the tolerance, count as mismatches.
- Weights (attend, naive) are compared with exp(scale·s − logsumexp) from the reference,
  relatively; the attention output (attend+values) by max |Δ| / max |reference|.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

from models import cpu_blas

D = 384
K = 10
SCALE = 20.0
GRID_N: tuple[int, ...] = (10_000, 100_000, 1_000_000)
GRID_B: tuple[int, ...] = (1, 16, 256)
METHODS: tuple[str, ...] = ("attend", "attend+V", "faiss", "naive")
TORCH_PASSES = "attend-torch"  # attend with torch's passes where the C ones would run

Sync = Callable[[], None]


def run_as_the_service() -> None:
    """Re-run this process with the thread settings the `attend` command gives the service
    (service/commands/threads.py), unless they are set already: they only take effect before
    torch and numpy load, and they decide which CPU BLAS `attend` picks."""
    from service.commands.threads import THREAD_SETTINGS

    missing = {k: v for k, v in THREAD_SETTINGS.items() if k not in os.environ}
    if missing:
        os.environ.update(missing)
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def no_sync() -> None:
    """The CPU's sync: nothing to wait for."""


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def log(text: str) -> None:
    """Progress on stderr, so `--json` keeps stdout to the one JSON object."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------- data


def random_unit(
    n: int,
    d: int,
    *,
    generator: torch.Generator,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    chunk: int = 1 << 18,
) -> Tensor:
    """(n, d) rows drawn uniformly on the unit sphere, made in chunks (bounded temporaries)."""
    return random_normal(
        n, d, generator=generator, device=device, dtype=dtype, chunk=chunk, unit=True
    )


def random_normal(
    n: int,
    d: int,
    *,
    generator: torch.Generator,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    chunk: int = 1 << 18,
    unit: bool = False,
) -> Tensor:
    """(n, d) standard normal entries (the values matrix), or with `unit` each row scaled to
    length 1; made in chunks (bounded temporaries)."""
    result = torch.empty(n, d, device=device, dtype=dtype)
    for start in range(0, n, chunk):
        rows = min(chunk, n - start)
        x = torch.randn(rows, d, generator=generator, device=device)
        if unit:
            x /= x.norm(dim=1, keepdim=True)
        result[start : start + rows] = x.to(dtype)
    return result


# --------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median of `reps` timed calls after one untimed warm-up."""

    median_s: float
    reps: int
    warmup_s: float
    min_s: float
    max_s: float


def time_call(
    fn: Callable[[], object],
    *,
    target_s: float,
    sync: Sync = no_sync,
    min_reps: int = 3,
    max_reps: int = 200,
) -> tuple[Timing, object]:
    """Time `fn`: one warm-up call (whose result is returned, for checking), then timed calls
    until at least `min_reps` ran and together they took `target_s` (or `max_reps` ran).

    `sync` is called before the clock starts and before it stops on every call, so on CUDA
    each timed call is the whole call, kernels included, and nothing queued before it leaks in.
    """
    sync()
    t0 = time.perf_counter()
    result = fn()
    sync()
    warmup = time.perf_counter() - t0
    times: list[float] = []
    while len(times) < max_reps and (len(times) < min_reps or sum(times) < target_s):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return (
        Timing(
            median_s=statistics.median(times),
            reps=len(times),
            warmup_s=warmup,
            min_s=min(times),
            max_s=max(times),
        ),
        result,
    )


@dataclass(frozen=True)
class CpuSnapshot:
    wall_s: float
    machine_busy_s: float  # CPU seconds all processes (and the hypervisor's steal) used
    self_s: float  # CPU seconds this process used, all threads


def cpu_snapshot() -> CpuSnapshot | None:
    """Where the CPU time went so far, from /proc/stat; None off Linux."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    return CpuSnapshot(time.perf_counter(), busy, time.process_time())


def other_cores(before: CpuSnapshot | None, after: CpuSnapshot | None) -> float | None:
    """How many cores other processes (and steal) kept busy, on average, between snapshots.

    This matters on a small shared machine: when another process holds a core, every OpenMP
    parallel region of ours waits at its barrier for a worker thread that is not running, so
    a loop of small torch ops (attend's per-chunk work) slows down many times, while one
    large BLAS call barely notices. Cells measured with this above ~0.25 are not clean.
    """
    if before is None or after is None or after.wall_s <= before.wall_s:
        return None
    others = (after.machine_busy_s - before.machine_busy_s) - (after.self_s - before.self_s)
    return max(0.0, others / (after.wall_s - before.wall_s))


# --------------------------------------------------------------------------- correctness


@dataclass(frozen=True)
class Reference:
    """Float64 ground truth for the first b queries of a cell."""

    q: Tensor  # (b, d) float64, the queries as the methods see them
    indices: Tensor  # (b, k) int64 on the CPU
    scores: Tensor  # (b, k) float64 on the CPU, best first
    lse: Tensor  # (b,) float64 on the CPU: log Σ exp(scale · q·k) over all keys
    output: Tensor | None  # (b, d_v) float64 on the CPU: softmax weights @ values


def reference(
    q: Tensor,
    keys: Tensor,
    values: Tensor | None,
    *,
    k: int,
    scale: float,
    chunk: int = 8192,
) -> Reference:
    """Exact top-k, log-sum-exp and output in float64, streamed over chunks of keys."""
    device = keys.device
    qd = q.to(device=device, dtype=keys.dtype).double()  # (b, d)
    b = qd.shape[0]
    top_s = torch.full((b, 0), -math.inf, device=device, dtype=torch.float64)
    top_i = torch.full((b, 0), -1, device=device, dtype=torch.long)
    m = torch.full((b,), -math.inf, device=device, dtype=torch.float64)
    l = torch.zeros(b, device=device, dtype=torch.float64)
    acc = None if values is None else torch.zeros(b, values.shape[1], device=device).double()
    for start in range(0, keys.shape[0], chunk):
        s = qd @ keys[start : start + chunk].double().T  # (b, C)
        logits = s * scale
        m_new = torch.maximum(m, logits.amax(-1))
        alpha = torch.exp(m - m_new)
        p = torch.exp(logits - m_new[:, None])
        l = l * alpha + p.sum(-1)
        if acc is not None and values is not None:
            acc = acc * alpha[:, None] + p @ values[start : start + chunk].double()
        m = m_new
        cs, ci = s.topk(min(k, s.shape[1]), dim=-1)
        top_s, best = torch.cat([top_s, cs], -1).topk(min(k, top_s.shape[1] + cs.shape[1]), -1)
        top_i = torch.cat([top_i, ci + start], -1).gather(1, best)
    return Reference(
        q=qd,
        indices=top_i.cpu(),
        scores=top_s.cpu(),
        lse=(m + torch.log(l)).cpu(),
        output=None if acc is None else (acc / l[:, None]).cpu(),
    )


def score_tolerance(dtype: torch.dtype) -> float:
    """Absolute tolerance on a score q·k (|q| = |k| = 1) for keys of `dtype`.

    fp32: accumulation error over d = 384 terms is ~1e-6; 1e-5 leaves room. fp16/bf16:
    attend's `q @ kc.T` in a half dtype returns half logits (fp32 accumulation, half
    output), so a score carries a half rounding error: 2 ulps of 1.0.
    """
    if dtype == torch.float32:
        return 1e-5
    return 2 * torch.finfo(dtype).eps


@dataclass(frozen=True)
class Check:
    """How one method's answer for a cell compares with the reference."""

    queries: int  # how many queries were checked
    mismatches: int  # rows with an invalid/repeated index or a score beyond tolerance
    ties: int  # rows whose index set differs from the reference's, within tolerance
    max_score_err: float | None  # max |float64 score of a returned index − reference|
    max_weight_rel_err: float | None  # None when the method gives no weights
    output_rel_err: float | None  # None when the method gives no output
    ok: bool

    def text(self) -> str:
        if self.ok:
            return f"ok ({self.ties} ties)" if self.ties else "ok"
        text = f"{self.mismatches}/{self.queries} bad"
        if self.max_weight_rel_err is not None:
            text += f", weight err {self.max_weight_rel_err:.1e}"
        if self.output_rel_err is not None:
            text += f", output err {self.output_rel_err:.1e}"
        return text


@dataclass(frozen=True)
class Answer:
    """What a method returned for the checked queries, on the CPU."""

    indices: Tensor  # (b, k) int64
    weights: Tensor | None = None  # (b, k) softmax weights, when the method gives them
    output: Tensor | None = None  # (b, d_v), attend with values


def tolerances(dtype: torch.dtype, scale: float) -> tuple[float, float, float]:
    """(score, relative weight, relative output) tolerances for keys of `dtype`.

    A weight is exp(scale·s − lse): a score error e moves it by a factor exp(scale·e), and
    the log-sum-exp can be off the same way, so the weight tolerance is expm1(2·scale·e).
    """
    score_tol = score_tolerance(dtype)
    output_tol = 1e-3 if dtype == torch.float32 else 5e-2
    return score_tol, math.expm1(2 * scale * score_tol), output_tol


def check(
    answer: Answer,
    ref: Reference,
    keys: Tensor,
    *,
    scale: float,
    score_tol: float,
    weight_tol: float,
    output_tol: float,
) -> Check:
    """Compare `answer` (its first b rows) with `ref` as the module docstring explains."""
    b = ref.indices.shape[0]
    idx = answer.indices[:b].to(torch.long).cpu()
    N = keys.shape[0]
    valid = (idx >= 0) & (idx < N)  # (b, k)
    repeated = torch.tensor([len(set(r.tolist())) != r.numel() for r in idx], dtype=torch.bool)
    gathered = keys[idx.clamp(0, N - 1).to(keys.device)].double()  # (b, k, d)
    exact = torch.einsum("bd,bkd->bk", ref.q, gathered).cpu()  # (b, k) float64
    err = (exact - ref.scores).abs().masked_fill(~valid, math.inf)
    bad = (err > score_tol).any(-1) | ~valid.all(-1) | repeated
    same_set = torch.tensor(
        [set(a.tolist()) == set(r.tolist()) for a, r in zip(idx, ref.indices, strict=True)],
        dtype=torch.bool,
    )
    ok = not bool(bad.any())
    weight_err = output_err = None
    if answer.weights is not None:
        expected = torch.exp(exact * scale - ref.lse[:, None])  # (b, k)
        got = answer.weights[:b].double().cpu()
        rel = ((got - expected).abs() / expected.clamp_min(1e-300)).masked_fill(~valid, 0.0)
        weight_err = float(rel.max())
        ok = ok and weight_err <= weight_tol
    if answer.output is not None and ref.output is not None:
        diff = (answer.output[:b].double().cpu() - ref.output).abs().max()
        output_err = float(diff) / (float(ref.output.abs().max()) or 1.0)
        ok = ok and output_err <= output_tol
    finite_err = err[valid]
    return Check(
        queries=b,
        mismatches=int(bad.sum()),
        ties=int((~bad & ~same_set).sum()),
        max_score_err=float(finite_err.max()) if finite_err.numel() else None,
        max_weight_rel_err=weight_err,
        output_rel_err=output_err,
        ok=ok,
    )


# --------------------------------------------------------------------------- cells


@dataclass
class MethodRun:
    """One method in one cell: its timing and its check, or why it was skipped."""

    qps: float | None = None
    ms_per_call: float | None = None  # the median
    min_ms: float | None = None  # the fastest timed call: less disturbed by other processes
    reps: int = 0
    warmup_ms: float | None = None
    check: Check | None = None
    note: str | None = None
    other_cores: float | None = None  # other_cores() over the method's timing


@dataclass
class Cell:
    N: int
    B: int
    dtype: str
    methods: dict[str, MethodRun]
    seconds: float = 0.0  # wall time spent on the cell, setup and checks included

    @property
    def other_cores(self) -> float | None:
        """The most cores other processes held during any of the cell's methods."""
        loads = [r.other_cores for r in self.methods.values() if r.other_cores is not None]
        return max(loads) if loads else None

    def ratio(self, name: str, base: str = "faiss") -> float | None:
        a, b = self.methods.get(name), self.methods.get(base)
        if a is None or b is None or a.qps is None or b.qps is None:
            return None
        return a.qps / b.qps

    def correct_text(self) -> str:
        checks = {n: r.check for n, r in self.methods.items() if r.check is not None}
        if not checks:
            return "-"
        if all(c.ok for c in checks.values()):
            ties = sum(c.ties for c in checks.values())
            return f"ok ({ties} ties)" if ties else "ok"
        return "; ".join(f"{n}: {c.text()}" for n, c in checks.items() if not c.ok)

    def as_dict(self) -> dict[str, Any]:
        return {
            "N": self.N,
            "B": self.B,
            "dtype": self.dtype,
            "seconds": self.seconds,
            "methods": {n: asdict(r) for n, r in self.methods.items()},
            "ratio_to_faiss": {n: self.ratio(n) for n in self.methods if n != "faiss"},
            "correct": self.correct_text(),
            "other_cores": self.other_cores,
        }


def run_method(
    fn: Callable[[], object],
    to_answer: Callable[[object], Answer],
    *,
    B: int,
    ref: Reference,
    keys: Tensor,
    target_s: float,
    sync: Sync = no_sync,
    tols: tuple[float, float, float],
    max_reps: int = 200,
    watch_cpu: bool = False,
) -> MethodRun:
    """Time `fn` (a whole batch of B queries per call) and check its warm-up answer.

    With `watch_cpu`, also record how many cores other processes used meanwhile."""
    before = cpu_snapshot() if watch_cpu else None
    timing, result = time_call(fn, target_s=target_s, sync=sync, max_reps=max_reps)
    after = cpu_snapshot() if watch_cpu else None
    answer = to_answer(result)
    del result
    return MethodRun(
        other_cores=other_cores(before, after),
        qps=B / timing.median_s,
        ms_per_call=timing.median_s * 1e3,
        min_ms=timing.min_s * 1e3,
        reps=timing.reps,
        warmup_ms=timing.warmup_s * 1e3,
        check=check(
            answer,
            ref,
            keys,
            scale=SCALE,
            score_tol=tols[0],
            weight_tol=tols[1],
            output_tol=tols[2],
        ),
    )


def run_in_turns(
    plan: Mapping[str, tuple[Callable[[], object], Callable[[object], Answer]]],
    *,
    B: int,
    ref: Reference,
    keys: Tensor,
    target_s: float,
    tols: tuple[float, float, float],
    min_reps: int = 3,
    max_reps: int = 200,
) -> dict[str, MethodRun]:
    """`run_method` for several methods at once, timed in turns: each method's warm-up call
    (its answer checked), then rounds of one timed call of each, until every method ran
    `min_reps` and the rounds took `target_s` per method. On a machine shared with other
    processes their load comes and goes within seconds; timed one after the other, two
    methods met different loads (a 0.8x ratio one run, 1.3x the next), in turns they meet
    the same."""
    answers, warmups = {}, {}
    for name, (fn, to_answer) in plan.items():
        t0 = time.perf_counter()
        result = fn()
        warmups[name] = time.perf_counter() - t0
        answers[name] = to_answer(result)
        del result
    times: dict[str, list[float]] = {name: [] for name in plan}
    before = cpu_snapshot()
    rounds = 0
    budget = target_s * len(plan)
    while rounds < max_reps and (rounds < min_reps or sum(map(sum, times.values())) < budget):
        for name, (fn, _) in plan.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
        rounds += 1
    others = other_cores(before, cpu_snapshot())
    return {
        name: MethodRun(
            other_cores=others,
            qps=B / statistics.median(times[name]),
            ms_per_call=statistics.median(times[name]) * 1e3,
            min_ms=min(times[name]) * 1e3,
            reps=rounds,
            warmup_ms=warmups[name] * 1e3,
            check=check(
                answers[name],
                ref,
                keys,
                scale=SCALE,
                score_tol=tols[0],
                weight_tol=tols[1],
                output_tol=tols[2],
            ),
        )
        for name in plan
    }


# --------------------------------------------------------------------------- output


def fmt_num(x: float | None, digits: int = 3) -> str:
    """A number with `digits` significant figures, thousands separated; '-' for None."""
    if x is None or math.isnan(x):
        return "-"
    if x == 0 or abs(x) >= 10 ** (digits - 1):
        return f"{x:,.0f}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: first column left-aligned, the rest right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cols: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 or i == len(cols) - 1 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cols, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def cell_table(cells_: Sequence[Cell], *, with_dtype: bool = False) -> str:
    header = ["N", "B"] + (["dtype"] if with_dtype else [])
    # benchmarks.core's attend on torch's passes, where it ran (models/cpu_kernels.py)
    methods = METHODS + tuple(m for m in (TORCH_PASSES,) if any(m in c.methods for c in cells_))
    header += [f"{m} q/s" for m in methods]
    header += [f"{m}/faiss" for m in methods if m != "faiss"]
    watched = any(c.other_cores is not None for c in cells_)
    header += (["others"] if watched else []) + ["correct"]
    rows = []
    for c in cells_:
        row = [f"{c.N:,}", str(c.B)] + ([c.dtype] if with_dtype else [])
        row += [fmt_num(c.methods[m].qps) if m in c.methods else "-" for m in methods]
        row += [fmt_ratio(c.ratio(m)) for m in methods if m != "faiss"]
        row += [f"{c.other_cores:.2f}" if c.other_cores is not None else "-"] if watched else []
        row.append(c.correct_text())
        rows.append(row)
    return table(header, rows)


def environment(extra: Mapping[str, Any]) -> dict[str, Any]:
    """What ran where: versions, threads, CPU; `extra` adds the script's own (load, FAISS)."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line_ in f:
                if line_.startswith("model name"):
                    cpu = line_.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "thread_settings": {
            k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT")
        },
        "cpu_blas": cpu_blas.blas(),  # the product `attend` uses on the CPU (measured)
    }
    env.update(extra)
    return env


def dump_json(obj: Mapping[str, Any]) -> None:
    out(json.dumps(finite(obj), indent=1, allow_nan=False))


def finite(obj: Any) -> Any:
    """`obj` with inf/nan floats replaced by None, so it is strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj
