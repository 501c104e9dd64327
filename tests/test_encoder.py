"""The encoder's two backends on the real packaged model: ONNX Runtime gives the PyTorch vectors,
exports once into its cache folder, and keeps the encoder's contract (unit-length float32 rows on
the CPU, an empty batch, several threads)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import torch

from indexer.batches import field_texts
from indexer.catalog import read_catalog
from indexer.data import DEMO_CATALOG
from models.encoder import SentenceTransformerEncoder, pick_backend
from models.onnx_encoder import (
    FORMAT_VERSION,
    MANIFEST_FILE,
    ONNX_FILE,
    Manifest,
    cached_manifest,
    model_slug,
    onnx_available,
    source_fingerprint,
)

QUERIES = [
    "generative AI",
    "machine learning for beginners",
    "a wizard school",
    "space opera empire",
    "history of the second world war",
    "romance in victorian england",
    "cooking italian food",
    "how the brain works",
    "murder mystery detective",
    "relational databases and SQL",
    "children's picture book about animals",
    "Philosophy of Mind",
    "the American Civil War",
    "learning to program in Python",
    "a dragon and a quest",
    "économie des inégalités",
    "poetry",
    "",
    "C++",
    "word " * 600,  # past max_seq_length (256 tokens): truncated the same way
]


def demo_texts() -> list[str]:
    """What the indexer embeds as each demo book's description key (and value)."""
    return [field_texts(record)["description"] for record in read_catalog(DEMO_CATALOG)]


TEXTS = demo_texts() + QUERIES


@pytest.fixture(scope="module")
def onnx_cache() -> Path:
    """The run's shared cache (conftest): one export serves every test that loads the model."""
    return Path(os.environ["ATTEND_ONNX_CACHE_DIR"])


@pytest.fixture(scope="module")
def onnx_encoder(onnx_cache: Path) -> SentenceTransformerEncoder:
    """Exports the model into the cache unless an earlier test already did."""
    return SentenceTransformerEncoder(backend="onnx", cache_dir=onnx_cache, batch_size=64)


@pytest.fixture(scope="module")
def torch_encoder() -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder(backend="torch", device="cpu", batch_size=64)


@pytest.fixture(scope="module")
def torch_vectors(torch_encoder: SentenceTransformerEncoder) -> torch.Tensor:
    return torch_encoder.encode(TEXTS)


@pytest.fixture(scope="module")
def onnx_vectors(onnx_encoder: SentenceTransformerEncoder) -> torch.Tensor:
    return onnx_encoder.encode(TEXTS)


@pytest.mark.model
def test_onnx_gives_the_torch_vectors(
    onnx_vectors: torch.Tensor, torch_vectors: torch.Tensor
) -> None:
    assert len(TEXTS) >= 200
    assert onnx_vectors.shape == torch_vectors.shape == (len(TEXTS), 384)
    cosine = (onnx_vectors * torch_vectors).sum(dim=1)
    worst = int(cosine.argmin())
    assert cosine.min() >= 0.9999, f"row {worst} {TEXTS[worst][:60]!r}: cosine {cosine[worst]}"


@pytest.mark.model
def test_a_batch_gives_the_rows_one_text_at_a_time(
    onnx_encoder: SentenceTransformerEncoder, onnx_vectors: torch.Tensor
) -> None:
    """Sorting by length and padding within a batch do not change a row."""
    for i in (0, 57, len(TEXTS) - 3, len(TEXTS) - 1):
        one = onnx_encoder.encode([TEXTS[i]])
        assert torch.allclose(one[0], onnx_vectors[i], atol=1e-5)


@pytest.mark.model
@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_output_contract(backend: str, request: pytest.FixtureRequest) -> None:
    encoder: SentenceTransformerEncoder = request.getfixturevalue(f"{backend}_encoder")
    vectors: torch.Tensor = request.getfixturevalue(f"{backend}_vectors")
    assert encoder.backend == backend
    assert encoder.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert encoder.dim == 384
    assert vectors.dtype == torch.float32
    assert vectors.device.type == "cpu"
    assert vectors.shape == (len(TEXTS), encoder.dim)
    assert torch.allclose(vectors.norm(dim=1), torch.ones(len(TEXTS)), atol=1e-5)
    empty = encoder.encode([])
    assert empty.shape == (0, encoder.dim)
    assert empty.dtype == torch.float32


@pytest.mark.model
def test_threads_share_one_encoder(
    onnx_encoder: SentenceTransformerEncoder, onnx_vectors: torch.Tensor
) -> None:
    results: dict[int, torch.Tensor] = {}
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            results[k] = onnx_encoder.encode(TEXTS[k * 10 : k * 10 + 10])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k, got in results.items():
        assert torch.allclose(got, onnx_vectors[k * 10 : k * 10 + 10], atol=1e-5)


@pytest.mark.model
def test_second_start_reuses_the_export(
    onnx_encoder: SentenceTransformerEncoder, onnx_vectors: torch.Tensor, onnx_cache: Path
) -> None:
    folder = onnx_cache / model_slug(onnx_encoder.name)
    onnx_file = folder / ONNX_FILE
    before = onnx_file.stat()
    manifest = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    assert manifest["format_version"] == FORMAT_VERSION
    assert manifest["dim"] == 384
    assert manifest["max_seq_length"] == 256

    again = SentenceTransformerEncoder(backend="onnx", cache_dir=onnx_cache)

    after = onnx_file.stat()
    # An export writes a new folder and moves it into place: a new inode and mtime.
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert sorted(p.name for p in onnx_cache.iterdir()) == [folder.name]  # no leftovers
    assert torch.equal(again.encode(TEXTS[:5]), onnx_encoder.encode(TEXTS[:5]))


def test_a_changed_model_folder_makes_the_cache_stale(tmp_path: Path) -> None:
    source = tmp_path / "model"
    source.mkdir()
    (source / "config.json").write_text("{}", encoding="utf-8")
    folder = tmp_path / "cache" / "m"
    folder.mkdir(parents=True)
    (folder / ONNX_FILE).write_bytes(b"not really onnx")
    manifest = Manifest(
        format_version=FORMAT_VERSION,
        model="m",
        source=str(source),
        fingerprint=source_fingerprint(source),
        dim=3,
        max_seq_length=8,
        inputs=["input_ids", "attention_mask"],
        export_seconds=0.0,
    )
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest.__dict__), encoding="utf-8")
    assert cached_manifest(folder, source) == manifest

    (source / "config.json").write_text('{"hidden_size": 8}', encoding="utf-8")
    assert cached_manifest(folder, source) is None  # the model changed: export again

    (source / "config.json").write_text("{}", encoding="utf-8")
    os.utime(source / "config.json", ns=(0, 0))
    assert cached_manifest(folder, source) == manifest  # the same files, touched: still valid
    # the same model installed in another virtual environment: another path, other times
    other = tmp_path / "other-venv" / "model"
    other.mkdir(parents=True)
    (other / "config.json").write_text("{}", encoding="utf-8")
    assert cached_manifest(folder, other) == manifest
    (other / "config.json").write_text('{"hidden_size": 8}', encoding="utf-8")  # same size
    os.utime(other / "config.json", ns=(0, 0))
    assert cached_manifest(folder, other) is None

    (folder / MANIFEST_FILE).write_text("{broken", encoding="utf-8")
    assert cached_manifest(folder, source) is None


def test_model_slug() -> None:
    assert model_slug("sentence-transformers/all-MiniLM-L6-v2") == (
        "sentence-transformers--all-MiniLM-L6-v2"
    )
    assert model_slug("/srv/models/my model") == "srv--models--my-model"
    assert model_slug("..") == "model"


def test_pick_backend() -> None:
    assert onnx_available()  # a dependency of the project
    assert pick_backend("auto", "cpu") == "onnx"
    assert pick_backend("auto", "cuda") == "torch"
    assert pick_backend("auto", "cuda:1") == "torch"
    assert pick_backend("torch", "cpu") == "torch"
    assert pick_backend("torch", "cuda") == "torch"
    assert pick_backend("onnx", "cpu") == "onnx"
    with pytest.raises(ValueError, match="CPU"):
        pick_backend("onnx", "cuda")
    with pytest.raises(ValueError, match="unknown encoder backend"):
        pick_backend("tensorflow", "cpu")


def test_the_constructor_refuses_an_unknown_backend() -> None:
    with pytest.raises(ValueError, match="unknown encoder backend"):
        SentenceTransformerEncoder(backend="auto")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="CPU"):
        SentenceTransformerEncoder(backend="onnx", device="cuda")
