"""Settings of the indexer (`attend index`, `attend db`), read from ATTEND_* variables and .env."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from models.encoder import DEFAULT_MODEL


class CommonSettings(BaseSettings):
    """What every runnable of Attend shares: where the index lives and how text is embedded."""

    model_config = SettingsConfigDict(env_prefix="ATTEND_", env_file=".env", extra="ignore")

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


class IndexSettings(CommonSettings):
    """Settings of `attend index`."""

    batch_size: int = Field(
        256, ge=1, le=100_000, description="Books per transaction: a crash loses at most one batch."
    )
