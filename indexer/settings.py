"""Settings of the indexer (`attend index`, `attend db`), read from ATTEND_* variables and .env."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from indexer.catalog import MAX_ROW_BYTES
from models.defaults import DEFAULT_MODEL, default_onnx_cache_dir, resolve_model

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
        "(sentence-transformers on the device), or auto: the faster for the command, onnx on "
        "the CPU for `attend serve`'s queries (when onnxruntime is installed), torch for "
        "`attend index`'s batches of book texts and on CUDA. Both give the same vectors "
        "(cosine ≥ 0.9999).",
    )
    onnx_cache_dir: str = Field(
        default_factory=lambda: str(default_onnx_cache_dir()),
        description="Folder where the onnx backend exports the model once per user and model "
        "(about 90 MB, and 10 s to a few minutes for all-MiniLM-L6-v2) and reuses it on later "
        "starts, from any working folder. Default: $XDG_CACHE_HOME/attend/onnx, else "
        "~/.cache/attend/onnx; a relative path is taken from the working folder. Delete it to "
        "force a new export; a changed model folder is exported again by itself.",
    )

    # Checked here, when a command starts, before the model loads: each bad value is one
    # sentence naming its variable (service/commands/cli.py), not a traceback minutes later.
    @field_validator("database_url")
    @classmethod
    def _a_database_url(cls, url: str) -> str:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        try:
            make_url(url).get_dialect()
        except (ArgumentError, NoSuchModuleError, ValueError):
            raise ValueError(
                "is not a database URL Attend can use: write sqlite:///PATH or "
                "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE"
            ) from None
        return url

    @field_validator("device")
    @classmethod
    def _a_device(cls, device: str) -> str:
        if re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", device.strip().lower()):
            return device.strip().lower()
        raise ValueError("must be auto, cpu, cuda or cuda:N")

    # what the command encodes: a search's short queries, or batches of book texts (indexing);
    # `auto` picks the faster encoder backend for it
    ENCODES_BATCHES: ClassVar[bool] = False

    def backend(self, device: str) -> Literal["torch", "onnx"]:
        """The encoder backend this command runs on `device` (models.encoder.pick_backend)."""
        from models.device import pick_device
        from models.encoder import pick_backend

        on = pick_device(device).type
        return pick_backend(self.encoder_backend, on, batches=self.ENCODES_BATCHES)

    def check_machine(self) -> None:
        """What depends on this machine, not on the value alone: the GPU, the model's folder,
        the onnx backend's export folder. `SettingError` names the first one wrong. Checked by
        `attend` before a command loads the model (not when settings are made: a compose
        file's ATTEND_DEVICE=cuda is valid on a machine without a GPU)."""
        device = self.device
        on_ray = getattr(self, "engine", "local") == "ray"  # the device is the workers' there
        if device.startswith("cuda") and not on_ray:
            import torch

            if not torch.cuda.is_available():
                raise SettingError(
                    f"ATTEND_DEVICE={device} but torch sees no CUDA GPU on this machine: set it "
                    "to auto or cpu"
                )
        if not (Path(resolve_model(self.model)).expanduser().is_dir() or _in_hf_cache(self.model)):
            raise SettingError(
                f"ATTEND_MODEL={self.model} is neither the packaged {DEFAULT_MODEL}, nor a folder "
                "here, nor a model in the local Hugging Face cache (Attend downloads nothing): "
                "give the folder of a sentence-transformers model, or unset it"
            )
        # whether the encoder will be onnx, told without importing torch (a bad catalog or
        # setting must answer before torch loads): auto's rule of `backend`, an auto device
        # read as the CPU (on a GPU machine the check is then one that cannot hurt)
        onnx = self.encoder_backend == "onnx" or (
            self.encoder_backend == "auto"
            and not self.ENCODES_BATCHES
            and not device.startswith("cuda")
        )
        if onnx and not _writable_folder(Path(self.onnx_cache_dir).expanduser()):
            raise SettingError(
                f"ATTEND_ONNX_CACHE_DIR={self.onnx_cache_dir} is not a folder Attend can write to "
                "(the onnx backend exports the model there): point it at one, or set "
                "ATTEND_ENCODER_BACKEND=torch"
            )


class SettingError(ValueError):
    """A setting this machine cannot honour (`StoreSettings.check_machine`)."""


def _in_hf_cache(name: str) -> bool:
    """Whether the local Hugging Face cache holds model `name` (looked up offline)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, "config.json")
    except Exception:  # not a repository id at all
        return False
    return isinstance(found, str)


def _writable_folder(path: Path) -> bool:
    """Whether `path` is, or could be made as, a folder this process can write to. Tried, not
    asked of `os.access`, which says yes to root for every folder (/proc's included): a
    temporary folder is made and removed in `path`, or in its nearest existing parent."""
    folder = path
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        return False
    try:
        tempfile.TemporaryDirectory(dir=folder).cleanup()
    except OSError:
        return False
    return True


class RaySettings(BaseSettings):
    """For `--engine ray`, which both `attend index` and `attend serve` have."""

    model_config = ATTEND_CONFIG

    engine: Engine = Field(
        "local",
        description="local (this process) or ray (a Ray cluster; needs `pip install "
        "'attend[ray]'`): `attend index` embeds on Ray Data actors, `attend serve` holds the "
        "keys as shards on Ray Serve (ATTEND_SHARDS).",
    )
    ray_address: str | None = Field(
        None,
        description="Address of an existing Ray cluster (e.g. ray://head:10001 or auto) for the "
        "ray engine; unset starts a local Ray on this machine.",
    )


class RunSettings(BaseSettings):
    """What one indexing run writes per transaction, reads and may remove: `attend index`'s, and
    the service's own for its admin re-index (service/config/settings.py inherits them), so an
    admin job runs with the bounds of the app's settings object, not the environment's."""

    model_config = ATTEND_CONFIG

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
    catalog_columns: dict[str, str] = Field(
        default_factory=dict,
        description="Catalog columns to read as a field, as a JSON object of header name → "
        "field (id, title, description, authors, year, language, isbn; subjects or series, "
        "kept as metadata under that name for the subjects and series heads; or metadata to "
        'keep one out of the fields), e.g. {"Writer": "authors"}: over the names exports use; '
        "`attend index --column 'Writer=authors'` adds to it.",
    )
    catalog_encoding: str | None = Field(
        None,
        description="The catalog text's encoding where it is not UTF-8 (latin-1, cp1252, ...): "
        "without it, a catalog that is not UTF-8 is read as the encoding charset-normalizer "
        "finds, and a notice names it. `attend index --encoding NAME` overrides it.",
    )
    max_delete_fraction: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="The largest share of the index's books one `attend index` (or admin "
        "re-index) may remove as a snapshot (10 books always may); a catalog that would remove "
        "more is refused, writing nothing, unless --allow-mass-delete. 1 turns the check off.",
    )


class IndexSettings(StoreSettings, RaySettings, RunSettings):
    """Settings of `attend index`."""

    ENCODES_BATCHES: ClassVar[bool] = True

    ray_workers: int = Field(
        0,
        ge=0,
        le=4096,
        description="`attend index --engine ray`: encoder actors; 0 is one per GPU of the "
        "cluster, or one CPU actor when it has none.",
    )
