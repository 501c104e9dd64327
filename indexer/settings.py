"""Settings of the indexer (`attend index`, `attend db`), read from ATTEND_* variables and .env."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from indexer.catalog import MAX_ROW_BYTES
from models.defaults import DEFAULT_MODEL, default_onnx_cache_dir

EncoderBackend = Literal["auto", "torch", "onnx"]
Engine = Literal["local", "ray"]


# every runnable's: ATTEND_* variables, then a .env file in the working folder
ATTEND_CONFIG = SettingsConfigDict(env_prefix="ATTEND_", env_file=".env", extra="ignore")


class StoreSettings(BaseSettings):
    """Where the index lives and what embeds its text: what `attend index`, `attend serve` and the
    migrations must agree on. Each runnable's own settings add to these."""

    model_config = ATTEND_CONFIG

    database_url: str = Field(
        "sqlite:///attend.db",
        description="SQLAlchemy URL; the default is a SQLite file in the working folder.",
    )
    model: str = Field(
        DEFAULT_MODEL,
        description="sentence-transformers model: its name (the default is the packaged "
        "all-MiniLM-L6-v2) or a local folder.",
    )
    device: str = Field("auto", description="auto (CUDA when available, else CPU), cpu or cuda.")
    encode_batch_size: int = Field(64, ge=1, le=4096, description="Texts per encoder call.")
    encoder_backend: EncoderBackend = Field(
        "auto",
        description="What runs the encoder: onnx (ONNX Runtime, CPU only), torch "
        "(sentence-transformers on the device), or auto (onnx on the CPU when onnxruntime is "
        "installed, torch on CUDA). Both give the same vectors (cosine ≥ 0.9999).",
    )
    onnx_cache_dir: str = Field(
        default_factory=lambda: str(default_onnx_cache_dir()),
        description="Folder where the onnx backend exports the model once per user and model "
        "(about 90 MB, and 10 s to a few minutes for all-MiniLM-L6-v2) and reuses it on later "
        "starts, from any working folder. Default: $XDG_CACHE_HOME/attend/onnx, else "
        "~/.cache/attend/onnx; a relative path is taken from the working folder. Delete it to "
        "force a new export; a changed model folder is exported again by itself.",
    )


class RaySettings(BaseSettings):
    """For `--engine ray`, which both `attend index` and `attend serve` have."""

    model_config = ATTEND_CONFIG

    ray_address: str | None = Field(
        None,
        description="Address of an existing Ray cluster (e.g. ray://head:10001 or auto) for the "
        "ray engine; unset starts a local Ray on this machine.",
    )


class IndexSettings(StoreSettings, RaySettings):
    """Settings of `attend index`."""

    encoder_backend: EncoderBackend = Field(
        "torch",
        description="As for the service, but torch by default: on batches of book texts it "
        "embedded faster than onnx here (63 against 56 texts/s; 36.2 against 28.9 books/s "
        "indexing the shared catalog), while onnx wins on the single short queries of a search.",
    )
    batch_size: int = Field(
        256, ge=1, le=100_000, description="Books per transaction: a crash loses at most one batch."
    )
    max_row_bytes: int = Field(
        MAX_ROW_BYTES,
        ge=1024,
        le=1024**3,
        description="Longest catalog row read (a JSONL line, a CSV record): a longer one is "
        "rejected with its line number, so memory stays bounded per row whatever the file.",
    )
    ray_workers: int = Field(
        0,
        ge=0,
        le=4096,
        description="`attend index --engine ray`: encoder actors; 0 is one per GPU of the "
        "cluster, or one CPU actor when it has none.",
    )
    engine: Engine = Field(
        "local",
        description="local (this process) or ray (a Ray cluster; needs `pip install "
        "'attend[ray]'`): embedding on Ray Data actors.",
    )
