"""The ONNX Runtime backend of the sentence encoder.

The sentence-transformers model (transformer, pooling, then L2 normalisation) is exported once with
`torch.onnx.export` into `cache_dir/<model slug>/`, next to the tokenizer it was exported with and a
`manifest.json`; later starts load that folder without torch running the model, whichever
virtual environment installed the model (the manifest names it by the hash of its files'
contents, not by its path). The export checks itself against the PyTorch model before it is
kept. sentence-transformers' own `backend="onnx"` needs optimum-onnx, which does not support
transformers 5, hence this module.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

logger = logging.getLogger(__name__)

# Bump when the exported graph or the folder layout changes: older cache folders are re-exported.
FORMAT_VERSION = 1
ONNX_FILE = "model.onnx"
MANIFEST_FILE = "manifest.json"
FINGERPRINTS_FILE = "fingerprints.json"  # in the export's folder: the model installs' hashes
_MEMO_ENTRIES = 64  # model installs remembered (one per venv and model)
_TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# Texts the export is checked on: mixed case, accents, punctuation, and one past max_seq_length.
_CHECK_TEXTS = [
    "generative AI",
    "Deep Learning\nA textbook on neural networks, from linear algebra to generative models.",
    "Les Misérables — Victor Hugo's novel of post-Napoleonic France!",
    "",
    "word " * 600,
]
_MIN_CHECK_COSINE = 0.9999


def onnx_available() -> bool:
    """Whether ONNX Runtime and the exporter's packages (onnx, onnxscript) are installed."""
    return all(
        importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx", "onnxscript")
    )


@dataclass(frozen=True)
class Manifest:
    """What `manifest.json` records of an exported model."""

    format_version: int
    model: str  # the name the model was asked for
    source: str  # the folder it was exported from
    fingerprint: str  # of the files in `source`: a changed model is exported again
    dim: int
    max_seq_length: int | None  # None: the tokenizer's own limit
    inputs: list[str]  # the ONNX graph's inputs, as the tokenizer names them
    export_seconds: float

    @classmethod
    def read(cls, folder: Path) -> Manifest | None:
        try:
            data = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None


def model_slug(name: str) -> str:
    """A folder name for `name`: `org/model` → `org--model`."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name.replace("/", "--")).strip("-.")
    return slug or "model"


def source_fingerprint(source: Path, memo_dir: Path | None = None) -> str:
    """A hash of the model folder's file names and contents: the same model installed in another
    virtual environment (another path, other modification times) finds the same export, and a
    changed file does not. Hashing the 92 MB took 0.12 s here, so the hash is remembered in
    `memo_dir` (the export's folder, so it goes with it) under the files' paths, sizes and
    modification times, and only computed again when one of those changes."""
    files = sorted(p for p in source.rglob("*") if p.is_file())
    stats = hashlib.sha256(str(source.resolve()).encode())
    for f in files:
        st = f.stat()
        stats.update(
            f"{f.relative_to(source).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode()
        )
    memo = memo_dir / FINGERPRINTS_FILE if memo_dir is not None else None
    known = _read_memo(memo)
    if (found := known.get(stats.hexdigest())) is not None:
        return found
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(source).as_posix()}\0".encode())
        with f.open("rb") as data:
            while chunk := data.read(1024 * 1024):
                h.update(chunk)
    fingerprint = h.hexdigest()[:16]
    if memo is not None:
        _write_memo(memo, {**known, stats.hexdigest(): fingerprint})
    return fingerprint


def _read_memo(memo: Path | None) -> dict[str, str]:
    if memo is None:
        return {}
    try:
        data = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _write_memo(memo: Path, known: dict[str, str]) -> None:
    """Best effort, atomically (a reader sees the old memo or the new): a cache that cannot be
    written only costs the hash again."""
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{memo.name}.", dir=memo.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(dict(list(known.items())[-_MEMO_ENTRIES:]), f)
        os.replace(tmp, memo)
    except OSError as e:
        logger.debug("could not remember the model's fingerprint in %s: %s", memo, e)


def cached_manifest(folder: Path, source: Path) -> Manifest | None:
    """The manifest of `folder` if it holds a complete export of `source` in this format."""
    manifest = Manifest.read(folder)
    if (
        manifest is None
        or manifest.format_version != FORMAT_VERSION
        or manifest.fingerprint != source_fingerprint(source, folder)
        or not (folder / ONNX_FILE).is_file()
    ):
        return None
    return manifest


class OnnxSentenceModel:
    """An exported folder run by ONNX Runtime on the CPU: texts → unit-length float32 (N, d).

    Not thread-safe on its own (the fast tokenizer is not): callers hold a lock.
    """

    def __init__(self, folder: Path, manifest: Manifest, *, batch_size: int = 64):
        import onnxruntime as ort  # type: ignore[import-untyped]
        from transformers import AutoTokenizer

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only
        # ORT's threads spin between the graph's operators, and stop when the run ends: left
        # spinning after it, they stole the cores from the attention call that follows (a
        # search's attend took 2.7-3.2 ms, 1.15 ms not); never spinning, each operator waited
        # for sleeping threads (one query 3.8 ms against 2.5, and encoder plus two attend calls
        # 6.0 ms against 4.8, measured side by side here).
        options.add_session_config_entry("session.intra_op.allow_spinning", "1")
        options.add_session_config_entry("session.force_spinning_stop", "1")
        self._session = ort.InferenceSession(
            str(folder / ONNX_FILE), options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.folder = folder
        self._inputs = list(manifest.inputs)
        self.max_seq_length = manifest.max_seq_length
        self.dim = manifest.dim
        self.batch_size = batch_size

    def encode(self, texts: list[str]) -> Tensor:
        if not texts:
            return torch.empty(0, self.dim)
        # Longest first, as sentence-transformers does, so a batch pads to similar lengths.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            out[rows] = self._run([texts[i] for i in rows])
        return torch.from_numpy(out)

    def _run(self, batch: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        tokens = self._tokenizer(
            batch,
            padding=True,
            truncation="longest_first",
            max_length=self.max_seq_length,
            return_tensors="np",
        )
        feed = {name: np.asarray(tokens[name], dtype=np.int64) for name in self._inputs}
        (vecs,) = self._session.run(None, feed)
        return np.asarray(vecs, dtype=np.float32)


def load_or_export(
    name: str, source: Path, cache_dir: Path, *, batch_size: int = 64
) -> tuple[OnnxSentenceModel, bool]:
    """The ONNX model of `source` from `cache_dir/<slug>`, exported there first when missing or
    stale. Returns the model and whether this call exported it."""
    folder = cache_dir / model_slug(name)
    manifest = cached_manifest(folder, source)
    exported = manifest is None
    if manifest is None:
        manifest = _export_into(folder, name=name, source=source)
    return OnnxSentenceModel(folder, manifest, batch_size=batch_size), exported


def _export_into(folder: Path, *, name: str, source: Path) -> Manifest:
    """Export into a fresh folder beside `folder`, check it, then move it into place, so a crash
    or a concurrent start never leaves a half-written cache behind."""
    # a warning, so that `attend search` (quiet but for warnings) says why it is silent so long
    logger.warning(
        "exporting %s to ONNX into %s: once per user and model, 10 s to a few minutes; later "
        "runs reuse it",
        name,
        folder,
    )
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    tmp.chmod(0o755)  # mkdtemp's 0700 would hide the cache from a service run as another user
    try:
        manifest = _export(tmp, name=name, source=source)
        old = folder.with_name(f".{folder.name}.old.{os.getpid()}")
        if folder.exists():
            folder.rename(old)
        try:
            tmp.rename(folder)
        except OSError:
            # Another process put a folder there meanwhile; use it when it is complete.
            theirs = cached_manifest(folder, source)
            if theirs is None:
                raise
            return theirs
        return manifest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for stale in folder.parent.glob(f".{folder.name}.old.*"):
            shutil.rmtree(stale, ignore_errors=True)


class _Exportable(torch.nn.Module):
    """The sentence-transformers modules plus normalisation, with tensors in and out."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None
    ) -> Tensor:
        features = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            features["token_type_ids"] = token_type_ids
        emb: Tensor = self.model(features)["sentence_embedding"]
        return torch.nn.functional.normalize(emb, p=2, dim=1)


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """The exporter's warnings and log lines (tracing internals, optional torchvision ops, one INFO
    line per deduplicated weight) say nothing actionable about a one-time, checked export."""
    quieted = {
        "torch.onnx": logging.ERROR,
        "onnx_ir": logging.WARNING,
        "onnxscript": logging.WARNING,
    }
    levels = {name: logging.getLogger(name).level for name in quieted}
    for name, level in quieted.items():
        logging.getLogger(name).setLevel(level)
    try:
        with warnings.catch_warnings():
            for category in (UserWarning, FutureWarning, DeprecationWarning):
                warnings.simplefilter("ignore", category)
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _export(folder: Path, *, name: str, source: Path) -> Manifest:
    from sentence_transformers import SentenceTransformer

    t0 = time.perf_counter()
    st_model = SentenceTransformer(str(source), device="cpu")
    st_model.eval()
    max_seq_length = st_model.max_seq_length
    tokenizer = st_model.tokenizer
    sample = tokenizer(
        ["a sample sentence", "another one"], padding=True, truncation=True, return_tensors="pt"
    )
    inputs = [k for k in _TOKEN_INPUTS if k in sample]
    if inputs[:2] != ["input_ids", "attention_mask"]:
        raise RuntimeError(f"model {name!r}: the tokenizer gives {sorted(sample)}, not input_ids")
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    with _quiet_exporter(), torch.inference_mode(False), torch.no_grad():
        torch.onnx.export(
            _Exportable(st_model).eval(),
            tuple(sample[k] for k in inputs),
            str(folder / ONNX_FILE),
            input_names=inputs,
            output_names=["sentence_embedding"],
            dynamic_shapes={k: {0: batch, 1: seq} for k in inputs},
            dynamo=True,
            external_data=False,
            verbose=False,
        )
    tokenizer.save_pretrained(str(folder))
    ref = st_model.encode(
        _CHECK_TEXTS, convert_to_tensor=True, normalize_embeddings=True, show_progress_bar=False
    ).cpu()
    manifest = Manifest(
        format_version=FORMAT_VERSION,
        model=name,
        source=str(source),
        fingerprint=source_fingerprint(source, folder),
        dim=int(ref.shape[1]),
        max_seq_length=max_seq_length,
        inputs=inputs,
        export_seconds=round(time.perf_counter() - t0, 1),
    )
    got = OnnxSentenceModel(folder, manifest).encode(_CHECK_TEXTS)
    worst = float((got * ref).sum(dim=1).min())
    if worst < _MIN_CHECK_COSINE:
        raise RuntimeError(f"ONNX export of {name!r} does not match PyTorch (cosine {worst:.6f})")
    (folder / MANIFEST_FILE).write_text(json.dumps(asdict(manifest), indent=2), encoding="utf-8")
    logger.info(
        "exported %s to ONNX in %.1f s (check cosine %.6f)", name, manifest.export_seconds, worst
    )
    return manifest
