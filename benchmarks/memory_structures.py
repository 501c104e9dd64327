"""What the served index holds, structure by structure, and the server's resident memory over
its keys' bytes: the code here beside another checkout's (the code before), in turns.

    .venv/bin/python -m benchmarks.memory_structures --books 100000
    .venv/bin/python -m benchmarks.memory_structures --books 100000 --versus /tmp/before --rounds 2
    .venv/bin/python -m benchmarks.memory_structures --books 1000000 --versus /tmp/before --no-serve

The catalog is benchmarks/growth_catalog.py's synthetic one (built once into --folder, keys
from the stand-in encoder recorded as the real model's). Per code and round, in a fresh
process: the searcher built as `attend serve` builds it (service/engine/startup.py
`build_searcher`, the real encoder loaded first), one search, then the bytes reachable from each
part of the served index (numpy buffers and torch storages by their bytes, Python objects by
`sys.getsizeof`, each object counted once, in the table's order) and the RSS; then `attend
serve` itself on the same database, its RSS once ready. `--versus DIR` runs DIR's packages
(PYTHONPATH) for the other column: a `git archive` of the code before, say.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run by path as a child (`run_child`): the checkout's packages
    sys.path[0] = os.getcwd()

from benchmarks._common import log, out, table  # noqa: E402
from benchmarks.memory import rss_mib  # noqa: E402


class Sizes:
    """Bytes reachable from objects, each object (and each array buffer) counted once."""

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self._alive: list[Any] = []  # what was measured stays alive: its ids are not reused

    def of(self, root: Any) -> int:
        import numpy as np
        import torch

        self._alive.append(root)
        stack, total = [root], 0
        while stack:
            x = stack.pop()
            if id(x) in self._seen or isinstance(x, type) or (callable(x) and not vars_of(x)):
                continue
            self._seen.add(id(x))
            if isinstance(x, torch.Tensor):
                total += sys.getsizeof(x) + self._buffer(x.untyped_storage().data_ptr(), x)
            elif isinstance(x, np.ndarray):
                base = x
                while isinstance(base.base, np.ndarray):
                    base = base.base
                total += 112 + self._buffer(base.__array_interface__["data"][0], base)
            else:
                total += sys.getsizeof(x)
                stack.extend(_children(x))
        return total

    def _buffer(self, address: int, owner: Any) -> int:
        if address in self._seen:
            return 0
        self._seen.add(address)
        if hasattr(owner, "untyped_storage"):
            return int(owner.untyped_storage().nbytes())
        return int(owner.nbytes) if owner.base is None else 0


def vars_of(x: Any) -> dict[str, Any]:
    try:
        return dict(vars(x))
    except TypeError:
        return {}


def _children(x: Any) -> Iterator[Any]:
    if isinstance(x, (str, bytes, int, float, bool, type(None))):
        return
    if isinstance(x, Mapping):
        for k, v in x.items():
            yield k
            yield v
    elif isinstance(x, (list, tuple, set, frozenset)):
        yield from x
    yield from vars_of(x).values()
    for name in getattr(type(x), "__slots__", ()):
        if hasattr(x, name):
            yield getattr(x, name)


def parts(index: Any) -> Iterator[tuple[str, Any]]:
    """The served index's parts, two levels down (the keys whole): names that hold in the code
    before and after."""
    for name, part in vars(index).items():
        inner = (
            vars_of(part) if name in ("books", "lexical", "like_this", "names", "filters") else {}
        )
        if not inner:
            yield name, part
            continue
        for sub, value in inner.items():
            if name == "names" and sub in ("works", "subjects"):
                for a, v in vars_of(value).items():
                    yield f"names.{sub}.{a}", v
            else:
                yield f"{name}.{sub}", value


def child(url: str) -> dict[str, Any]:
    """In this (fresh) process: the encoder, the searcher `attend serve` builds, one search."""
    import gc

    from indexer.db import create_db_engine
    from service.engine.searcher import SearchOptions
    from service.engine.startup import build_encoder, build_searcher

    try:  # the settings' module moved in issue 31; the code before may have it here
        from service.config.settings import ServiceSettings  # type: ignore[import-not-found]
    except ImportError:
        from service.settings import ServiceSettings

    settings = ServiceSettings(database_url=url, device="cpu")
    encoder = build_encoder(settings)
    encoder.encode(["warm up"])
    model = rss_mib()
    searcher = build_searcher(settings, engine=create_db_engine(url), encoder=encoder)
    searcher.search_now(["a book about the sea"], SearchOptions(k=10))
    gc.collect()
    loaded = rss_mib()
    index = searcher.index
    keys = sum(k.numel() * k.element_size() for k in index.keys.by_field.values())
    sizes = Sizes()
    rows = [(name, sizes.of(part)) for name, part in parts(index)]
    return {"books": len(index), "model_mib": model, "rss_mib": loaded, "keys": keys, "rows": rows}


def run_child(url: str, code: Path) -> dict[str, Any]:
    """This file run by path (so DIR needs none of it) with `code`'s packages first."""
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", url],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def serve_rss(url: str, code: Path, folder: Path) -> float:
    """`attend serve` of `code` on `url`: its RSS (MiB) once ready."""
    from benchmarks.growth import LoggedServer

    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(code)
    try:
        server = LoggedServer(url, folder / f"serve-{code.name}.log")
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    try:
        server.wait_ready()
        time.sleep(1)
        return server.rss_bytes() / 2**20
    finally:
        server.stop()


def build(n: int, folder: Path) -> str:
    """The synthetic catalog of n books indexed into folder (once)."""
    from benchmarks.growth import index
    from benchmarks.growth_catalog import Source, synthetic_books, write_catalog

    db = folder / f"growth-{n}.db"
    url = f"sqlite:///{db}"
    if not db.exists():
        catalog = folder / f"books-{n}.jsonl"
        write_catalog(catalog, synthetic_books(Source.read(), n))
        log(f"indexing {n} books …")
        index(url, catalog)
    return url


def report(runs: dict[str, list[dict[str, Any]]], served: dict[str, list[float]]) -> None:
    codes = list(runs)
    first = {c: runs[c][0] for c in codes}
    n = next(iter(first.values()))["books"]
    names = list(dict.fromkeys(name for c in codes for name, _ in first[c]["rows"]))
    lines = []
    for name in [*names, "total"]:
        cells = []
        for c in codes:
            sizes = dict(first[c]["rows"])
            got = sum(sizes.values()) if name == "total" else sizes.get(name)
            cells += ["-", "-"] if got is None else [f"{got / 2**20:.1f}", f"{got / n:.0f}"]
        if any(c not in ("-", "0.0", "0") for c in cells):  # a lock, a size: no row
            lines.append([name, *cells])
    header = ["structure"] + [f"{c} {unit}" for c in codes for unit in ("MiB", "B/book")]
    out(table(header, lines))
    for c in codes:
        keys = first[c]["keys"] / 2**20
        counted = sum(v for _, v in first[c]["rows"]) / 2**20
        over = [(r["rss_mib"] - r["model_mib"]) / keys for r in runs[c]]
        ratio = [s / keys for s in served[c]]
        serve = (
            f"; attend serve RSS {', '.join(f'{s:.0f}' for s in served[c])} MiB, RSS / keys "
            f"{', '.join(f'{x:.2f}' for x in ratio)}"
            if served[c]
            else ""
        )
        out(
            f"\n{c}: {n:,} books, keys {keys:.0f} MiB; counted {counted:.0f} MiB; in-process "
            f"(RSS − model) / keys {', '.join(f'{x:.2f}' for x in over)} (model "
            f"{first[c]['model_mib']:.0f} MiB){serve}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--books", type=int, default=100_000)
    parser.add_argument("--folder", type=Path, default=ROOT / "benchmarks" / "results" / "memory")
    parser.add_argument("--versus", type=Path, help="another checkout's root: the code before")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--no-serve", action="store_true", help="the in-process table only (a 1M start is minutes)"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.stdout.write(json.dumps(child(args.child)) + "\n")
        return
    args.folder.mkdir(parents=True, exist_ok=True)
    url = build(args.books, args.folder)
    codes = {"after": ROOT} | ({"before": args.versus.resolve()} if args.versus else {})
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in codes}
    served: dict[str, list[float]] = {c: [] for c in codes}
    for r in range(args.rounds):
        for c in list(codes)[:: 1 if r % 2 == 0 else -1]:  # in turns
            log(f"round {r + 1}: {c} …")
            runs[c].append(run_child(url, codes[c]))
            if not args.no_serve:
                served[c].append(serve_rss(url, codes[c], args.folder))
    if args.json:
        sys.stdout.write(json.dumps({"runs": runs, "served_rss_mib": served}) + "\n")
    else:
        report(runs, served)


if __name__ == "__main__":
    main()
