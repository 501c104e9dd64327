"""The `attend` entry point: process-wide runtime settings that only take effect when they are in
the environment before torch is loaded, then the CLI (service/cli.py).

OMP_WAIT_POLICY=PASSIVE: torch's OpenMP threads otherwise spin after every parallel operation,
and in a search the next operation is often the encoder (ONNX Runtime's own threads) or the
event loop, which then wait for the cores the spinners hold. Measured on the shared catalog,
2 cores, 32 clients (benchmarks/service.py): unbatched server CPU per query 13.3 → 7.3 ms,
batched 3.8 → 3.0 ms; `attend` at N=1M lost 2-4%. An explicit setting in the environment wins.
"""

from __future__ import annotations

import os


def main() -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from service.cli import main as cli_main  # torch loads here, after the setting

    return cli_main()
