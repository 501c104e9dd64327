"""The `attend` entry point: process-wide thread settings that only take effect when they are in
the environment before torch and numpy load, then the CLI (service/cli.py).

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
"""

from __future__ import annotations

import os

THREAD_SETTINGS = {"OMP_WAIT_POLICY": "PASSIVE", "OPENBLAS_THREAD_TIMEOUT": "4"}


def main() -> int:
    for name, value in THREAD_SETTINGS.items():
        os.environ.setdefault(name, value)
    from service.cli import main as cli_main  # torch and numpy load here, after the settings

    return cli_main()
