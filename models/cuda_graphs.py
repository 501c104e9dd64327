"""`attend` (models/attention.py) on a GPU, replayed from a captured CUDA graph.

Below a million keys a call's time is its launches, not its bytes: each kernel takes
microseconds on the GPU, and each launch from Python ~5-10 µs on the CPU. A graph launches them
all at once: on an H200, a B = 1 call over 10,000 keys took 0.11 ms replayed against 0.48-0.73
ms launched one by one (benchmarks/gpu.py, attend against attend-fused). A call of a shape
seen before (the same keys, values, B, k, scale, mask shape and chunk) copies q (and the mask)
into the graph's inputs, replays it, and copies its outputs, packed in one buffer, out: three
or four launches. The first call of a shape runs eagerly, the second captures, so a shape
asked for once never pays a capture.

Keys are told apart by address, shape, strides and dtype: the graph reads its keys by address, so
another tensor at the same address with the same layout is read just as correctly (a re-index's
keys freed and allocated again). At most MAX_GRAPHS shapes are kept, the least recently used
dropped first, each holding its own intermediate buffers (B·C fp32 logits at the most
MAX_LOGITS).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

logger = logging.getLogger(__name__)

MAX_GRAPHS = 32
MAX_LOGITS = 1 << 24  # B·C of a graphed call: 64 MiB of fp32 logits, N = 16M keys at B = 1

_state: dict[str, bool] = {"enabled": True}


def set_enabled(enabled: bool) -> None:
    """Replay graphs where they apply (True, the default) or launch every kernel (benchmarks)."""
    _state["enabled"] = enabled


def applies(keys: Tensor, B: int, C: int) -> bool:  # noqa: N803
    """Whether `attend` of B queries in chunks of C over these keys is graphed: CUDA keys, with
    B·C within MAX_LOGITS."""
    return _state["enabled"] and keys.is_cuda and B * C <= MAX_LOGITS


# what a graphed call returns: tensors whose contents the graph writes on each replay
Outputs = list[Tensor | None]
# where each output lies in the packed buffer: dtype, shape, first and past-the-last byte
Layout = list[tuple[torch.dtype, tuple[int, ...], int, int] | None]


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    q: Tensor  # the static input
    mask: Tensor | None
    packed: Tensor  # (bytes,) uint8: every output, widest dtypes first
    layout: Layout
    lock: threading.Lock
    done: torch.cuda.Event  # the last replay's outputs copied out, on its caller's stream
    stream_id: int  # that stream's


_graphs: OrderedDict[tuple[object, ...], _Graph | None] = OrderedDict()
_seen: set[tuple[object, ...]] = set()
_registry_lock = threading.Lock()


def _signature(t: Tensor | None) -> tuple[object, ...] | None:
    if t is None:
        return None
    return (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t.device)


def replay(
    run: Callable[[Tensor, Tensor | None], Outputs],
    q: Tensor,
    keys: Tensor,
    *,
    values: Tensor | None,
    mask: Tensor | None,
    shape_key: tuple[object, ...],
) -> Outputs | None:
    """`run(q, mask)`'s outputs, from a graph of it when this shape was seen before; None on a
    shape's first call (the caller runs it eagerly) and where capture failed once."""
    key = (
        _signature(keys),
        _signature(values),
        (tuple(q.shape), q.dtype),
        None if mask is None else (tuple(mask.shape), mask.dtype),
        shape_key,
    )
    with _registry_lock:
        if key not in _graphs:
            if key not in _seen:
                if len(_seen) >= 4 * MAX_GRAPHS:  # shapes asked for once, forgotten
                    _seen.clear()
                _seen.add(key)
                return None
            _seen.discard(key)
            _graphs[key] = _capture(run, q, keys.device, mask)
            while len(_graphs) > MAX_GRAPHS:
                _graphs.popitem(last=False)
        _graphs.move_to_end(key)
        g = _graphs[key]
    if g is None:
        return None
    with g.lock:  # the graph's inputs and outputs are one set of buffers
        stream = torch.cuda.current_stream(keys.device)
        if stream.stream_id != g.stream_id:  # a caller on another stream may still replay it
            stream.wait_event(g.done)
            g.stream_id = stream.stream_id
        g.q.copy_(q, non_blocking=True)
        if g.mask is not None and mask is not None:
            g.mask.copy_(mask, non_blocking=True)
        g.graph.replay()
        packed = g.packed.clone()  # (bytes,) on the current stream, after the replay
        g.done.record(stream)
    return unpack(packed, g.layout)


def _capture(
    run: Callable[[Tensor, Tensor | None], Outputs],
    q: Tensor,
    device: torch.device,
    mask: Tensor | None,
) -> _Graph | None:
    """A graph of `run` on static copies of q and mask, or None (logged) where capture fails."""
    q_static = q.to(device, copy=True)
    mask_static = None if mask is None else mask.to(device, copy=True)
    side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream(device))
    try:
        with torch.cuda.stream(side):  # lazy per-stream state (cuBLAS workspaces) set up first
            run(q_static, mask_static)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            outs = run(q_static, mask_static)
            packed, layout = pack(outs)
    except RuntimeError:
        logger.warning("attend: CUDA graph capture failed; this shape runs eagerly", exc_info=True)
        return None
    done = torch.cuda.Event()  # type: ignore[no-untyped-call]
    stream = torch.cuda.current_stream(device)
    done.record(stream)
    return _Graph(
        graph, q_static, mask_static, packed, layout, threading.Lock(), done, stream.stream_id
    )


def pack(outs: Outputs) -> tuple[Tensor, Layout]:
    """The outputs' bytes in one uint8 buffer, 8-byte dtypes first so that every part starts
    aligned to its own dtype, and where each part lies."""
    order = sorted(
        (i for i, t in enumerate(outs) if t is not None),
        key=lambda i: -outs[i].element_size(),  # type: ignore[union-attr]
    )
    layout: Layout = [None] * len(outs)
    parts, start = [], 0
    for i in order:
        t = outs[i]
        assert t is not None
        raw = t.contiguous().view(-1).view(torch.uint8)
        layout[i] = (t.dtype, tuple(t.shape), start, start + raw.numel())
        parts.append(raw)
        start += raw.numel()
    parts.append(parts[0].new_zeros(-start % 8))  # whole 8-byte words: seen as any dtype
    return torch.cat(parts), layout


def unpack(packed: Tensor, layout: Layout) -> Outputs:
    """The outputs `pack` put in `packed` (or a copy of it), as views of it: one view of the
    whole buffer per dtype, then a strided view each (two operations fewer an output than
    slicing bytes; a replay's CPU time is a B = 1 call's below 1M keys)."""
    whole: dict[torch.dtype, Tensor] = {}
    outs: Outputs = []
    for part in layout:
        if part is None:
            outs.append(None)
            continue
        dtype, shape, start, _ = part
        if dtype not in whole:
            whole[dtype] = packed.view(dtype)
        size = whole[dtype].element_size()
        outs.append(whole[dtype].as_strided(shape, _contiguous(shape), start // size))
    return outs


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, n = [], 1
    for dim in reversed(shape):
        strides.append(n)
        n *= dim
    return tuple(reversed(strides))


def clear() -> None:
    """Drop every graph (tests; a caller freeing GPU memory)."""
    with _registry_lock:
        _graphs.clear()
        _seen.clear()
