"""A generation's served form: what a start needs of it as files it memory-maps, not rows it
reads back from SQL and parses again.

A start used to read every book from the database, fold every name, tokenize every title and
description for both BM25 indexes and walk every description for the catalog's names: minutes
at a million books. The served form holds the results: the keys ((d, N) float32 a field, the
layout the attention core streams, memory-mapped copy-on-write, so a start copies nothing), the
book columns, the postings of both BM25 indexes, the catalog's names (authors, works, series,
subject headings) and the readers' prior, one `.npy` file an array (numpy's format: a header
and the bytes; nothing is unpickled, `allow_pickle=False`).

A folder per generation, `<root>/<index id>/g<generation>-<model digest>/`, with a
`manifest.json` naming what it belongs to (`Stamp`: the database's identity, the generation,
the model, the books and a fingerprint of the generation's rows as the database holds them)
and each array's dtype, shape and size. It is written in a folder of its own and renamed into
place whole, so a reader sees all of it or none; a start checks the stamp against the
database's and every file against the manifest, and a folder that fails (another database's,
another generation's, a file cut short or changed) is removed and built again from the
database, with a log line that says why. Written at a start that found none and after each
swap; the generations before the one written are removed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from indexer import store
from indexer.schema import Book

logger = logging.getLogger(__name__)

# the layout of the files (3: CJK as bigrams in the postings; 4: the series rows name beside
# their titles'; 5: the books' ISBNs; 6: their average ratings; 7: headings and series as
# written; 8: the boilerplate sentences, left out of the postings; 9: the publishers); another
# is built again
FORMAT = 9
MANIFEST = "manifest.json"
ABANDONED_S = 3600.0  # a folder being written this long ago was left by a crash
_NAME = re.compile(r"[a-z_]+(\.[a-z_]+)*")  # an array's name: "keys.title", "lexical.indptr"


@dataclass(frozen=True)
class Stamp:
    """What a served form belongs to."""

    index_id: str
    generation: int
    model: str
    fingerprint: str  # the generation's book rows: their count, and the sum and largest row id

    @property
    def folder(self) -> str:
        """The form's folder under the root: the generation, and a digest of the model."""
        digest = hashlib.sha256(self.model.encode()).hexdigest()[:12]
        return f"{self.index_id}/g{self.generation}-{digest}"


def stamp_of(session: Session, *, generation: int | None, model: str) -> Stamp | None:
    """The stamp of `generation` as the database holds it now; None without one (no index
    yet, or a database without an identity)."""
    index_id = store.index_id(session=session)
    if generation is None or index_id is None:
        return None
    count, total, top = session.execute(
        select(func.count(), func.sum(Book.row_id), func.max(Book.row_id)).where(
            store.visible_at(generation)
        )
    ).one()
    return Stamp(index_id, generation, model, f"{count}:{total or 0}:{top or 0}")


def read(root: Path, stamp: Stamp) -> dict[str, np.ndarray] | None:
    """The arrays of the served form of `stamp` under `root`, memory-mapped; None when there is
    none, or none that is whole and `stamp`'s (then removed, and the reason logged)."""
    folder = root / stamp.folder
    manifest = folder / MANIFEST
    if not manifest.is_file():
        logger.info("no served form of generation %d at %s: building it", stamp.generation, folder)
        return None
    try:
        arrays = _checked(folder, json.loads(manifest.read_text(encoding="utf-8")), stamp)
    except (OSError, ValueError, KeyError, TypeError) as e:
        discard(root, stamp, str(e))
        return None
    return arrays


def discard(root: Path, stamp: Stamp, why: str) -> None:
    """The served form of `stamp` removed, found not to be it (`why`), and logged."""
    folder = root / stamp.folder
    logger.warning(
        "the served form at %s is not generation %d's as the database holds it (%s): "
        "building it again from the database",
        folder,
        stamp.generation,
        why,
    )
    shutil.rmtree(folder, ignore_errors=True)


def _checked(folder: Path, manifest: dict[str, object], stamp: Stamp) -> dict[str, np.ndarray]:
    if manifest.get("format") != FORMAT:
        raise ValueError(f"format {manifest.get('format')!r}, not {FORMAT}")
    written = Stamp(**manifest["stamp"])  # type: ignore[arg-type]
    if written != stamp:
        what = [f for f in asdict(stamp) if getattr(stamp, f) != getattr(written, f)]
        raise ValueError(f"another {', '.join(what)}")
    arrays = {}
    listed = manifest["arrays"]
    if not isinstance(listed, dict):
        raise ValueError("a manifest without its arrays")
    for name, (dtype, shape, size) in listed.items():
        if not _NAME.fullmatch(name):  # a file of this folder, nothing outside it
            raise ValueError(f"an array named {name!r}")
        path = folder / f"{name}.npy"
        if path.stat().st_size != size:
            raise ValueError(f"{path.name} is {path.stat().st_size} bytes, written {size}")
        # copy-on-write: writable arrays (torch takes them as they are) whose pages stay the
        # file's until written, which serving never does
        array = np.load(path, mmap_mode="c", allow_pickle=False)
        if str(array.dtype) != dtype or list(array.shape) != shape:
            raise ValueError(
                f"{path.name} holds {array.dtype} {array.shape}, written {dtype} {shape}"
            )
        arrays[name] = array
        if name.startswith("keys."):
            _read_ahead(path)
    return arrays


def _read_ahead(path: Path) -> None:
    """The kernel asked to read `path` into the page cache now, in the background: a start on
    a cold cache maps the keys in milliseconds, and the first search would otherwise read
    them from the disk at its first touch."""
    if hasattr(os, "posix_fadvise"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)


def write(root: Path, stamp: Stamp, arrays: Mapping[str, np.ndarray]) -> Path | None:
    """The served form of `stamp` written under `root` (whole or not at all); the forms of the
    database's earlier generations removed. None, logged, where it cannot be written: serving
    goes on, and the next start builds again."""
    t0 = time.perf_counter()
    final = root / stamp.folder
    if (final / MANIFEST).is_file():  # another replica's, since this one's start found none
        logger.info("the served form at %s is written already (by another process)", final)
        return final
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".writing-", dir=final.parent))
        try:
            listed = {}
            for name, array in arrays.items():
                path = staging / f"{name}.npy"
                np.save(path, np.ascontiguousarray(array), allow_pickle=False)
                listed[name] = [str(array.dtype), list(array.shape), path.stat().st_size]
            manifest = {"format": FORMAT, "stamp": asdict(stamp), "arrays": listed}
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
            _sync(staging)
            # one there now is another replica's, written meanwhile (a start removes a form
            # that fails its check before it builds): it stays, whole, for whoever reads it
            if final.exists():
                return final
            os.replace(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as e:
        logger.warning(
            "could not write the served form at %s (%s): the next start builds it", final, e
        )
        return None
    size = sum(f.stat().st_size for f in final.iterdir())
    logger.info(
        "wrote the served form of generation %d (%.0f MiB) at %s in %.2f s",
        stamp.generation,
        size / 2**20,
        final,
        time.perf_counter() - t0,
    )
    _remove_older(final.parent, stamp.generation)
    return final


def _sync(folder: Path) -> None:
    """Every file of `folder` on disk before its rename makes it the form: a crash after the
    rename finds whole files."""
    for path in folder.iterdir():
        with path.open("rb") as f:
            os.fsync(f.fileno())


def _remove_older(index_folder: Path, generation: int) -> None:
    """The forms of the generations before `generation` (a start reads only the form of the
    generation it serves, the active one) and any a crash left half-written (an hour old: a
    younger one may be another replica's, being written)."""
    for other in index_folder.iterdir():
        number = other.name[1:].split("-")[0]
        older = other.name.startswith("g") and number.isdigit() and int(number) < generation
        try:
            abandoned = other.name.startswith(".writing-") and (
                time.time() - other.stat().st_mtime > ABANDONED_S
            )
        except OSError:  # gone meanwhile
            continue
        if older or abandoned:
            shutil.rmtree(other, ignore_errors=True)
