"""The bundled demo catalog (demo_books.jsonl), written for Attend."""

from __future__ import annotations

from pathlib import Path

DEMO_CATALOG = Path(__file__).resolve().parent / "demo_books.jsonl"
