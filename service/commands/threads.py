"""The threads `attend` runs in: process-wide settings that only take effect when they are in the
environment before torch and numpy load (`THREAD_SETTINGS`, which the entry point,
service/launch.py, sets before it imports the CLI), and torch's intra-op threads for
`attend serve` (`apply_serve_threads`).

A search alternates between thread pools: the encoder's (ONNX Runtime), torch's (OpenMP) and
the BLAS's that `attend` multiplies with (models/cpu_blas.py; numpy's OpenBLAS on the AMD EPYC
measured here). By default the OpenMP and OpenBLAS threads spin-wait after each call (OpenBLAS
for about 0.1 s), holding the cores the next pool needs. Measured on the shared catalog, 2 cores,
32 clients (benchmarks/service.py and its server's CPU time):

- OMP_WAIT_POLICY=PASSIVE: server CPU per query unbatched 13.3 → 7.3 ms, batched 3.8 → 3.0 ms;
- OPENBLAS_THREAD_TIMEOUT=4 (2^4 cycles of spinning): with OpenBLAS, batched 5.2 → 3.7 ms,
  unbatched 15.1 → 9.4 ms, q/s 348 → 366-394.

They cost `attend` alone a little latency at B = 1 (threads must be woken); an explicit value
in the environment wins.

`attend serve` then gives torch one intra-op thread when the attention runs on the CPU next to
the onnx encoder under OMP_WAIT_POLICY=PASSIVE (`serve_torch_threads`; without it the product
runs in torch's own threads, and they stay): the product multiplies in OpenBLAS's threads and
the encoder in ONNX Runtime's, and what torch runs per search is a few hundred small
operations, many of which woke a second, sleeping OpenMP thread (50-80 µs each on this 2-core
VM) to share a few thousand elements. Measured with one thread against two:

- one-client p50 on the shared catalog (5,194 books), three alternating pairs of servers:
  8.9 / 9.3 / 8.9 ms against 9.9 / 10.5 / 9.9 ms;
- 32 clients, batched: 246 / 255 against 247 / 286 q/s (within the noise);
- in-process, encoder then ranking, one query at a time: ranking p50 19.3 / 21.3 against
  22.4 / 23.1 ms over 100k synthetic books, and 176 against 166 / 168 ms over 1M, where
  the float64 entropy sweep's passes over (1, N) would use the second thread. Set
  ATTEND_TORCH_THREADS for such catalogs.

The indexer keeps torch's threads: it embeds with torch.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.config.settings import ServiceSettings

logger = logging.getLogger(__name__)

THREAD_SETTINGS = {"OMP_WAIT_POLICY": "PASSIVE", "OPENBLAS_THREAD_TIMEOUT": "4"}


def serve_torch_threads(settings: ServiceSettings) -> int | None:
    """torch's intra-op threads for `attend serve` with `settings`: ATTEND_TORCH_THREADS, else 1
    on the CPU with the onnx encoder, else None (torch's default)."""
    from models.device import pick_device

    if settings.torch_threads is not None:
        return settings.torch_threads
    if os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
        # torch's threads spin there, and the CPU product runs in them (MKL, models/cpu_blas.py)
        return None
    device = pick_device(settings.device)
    if device.type == "cpu" and settings.backend(str(device)) == "onnx":
        return 1
    return None


def apply_serve_threads(settings: ServiceSettings) -> None:
    """Before the app loads its index: its CPU BLAS is measured with the threads it will have
    (models/cpu_blas.py)."""
    import torch

    threads = serve_torch_threads(settings)
    if threads is not None:
        torch.set_num_threads(threads)
        logger.info("torch intra-op threads: %d", threads)
