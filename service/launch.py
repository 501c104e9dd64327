"""The `attend` entry point: the process-wide thread settings (service/commands/threads.py says
why and what they measured), which only take effect when they are in the environment before torch
and numpy load, then the CLI (service/commands/cli.py).

Data flow: catalog.jsonl → indexer.catalog → indexer.pipeline.run() → models.encoder (B, d) →
indexer.store → tables → [attend serve] the engine loads the keys (service/engine/startup.py)
→ GET /search (service/api): encode(query) (1, d) → weights (1, N) → top-k → SearchResponse.
"""

from __future__ import annotations

import os


def main() -> int:
    from service.commands.threads import THREAD_SETTINGS  # the standard library only

    for name, value in THREAD_SETTINGS.items():
        os.environ.setdefault(name, value)
    from service.commands.cli import main as cli_main  # torch and numpy load here, after them

    return cli_main()
