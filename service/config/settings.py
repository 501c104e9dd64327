"""Settings of the service (`attend serve`, `attend search`), from ATTEND_* variables and .env."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from indexer.settings import RaySettings, RunSettings, StoreSettings
from service.config.ranking_settings import RankingSettings

MIN_CHUNK = 64
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class ServiceSettings(StoreSettings, RaySettings, RunSettings, RankingSettings):
    # A refused value is never repeated in the error: a too-short ATTEND_ADMIN_TOKEN (or a
    # database URL with its password) would otherwise be printed to stderr and the logs. The
    # message still names the variable and the reason.
    model_config = SettingsConfigDict(hide_input_in_errors=True)

    host: str = Field("127.0.0.1", description="Interface `attend serve` binds.")
    port: int = Field(8000, ge=1, le=65535, description="Port `attend serve` listens on.")
    scale: float = Field(
        20.0,
        gt=0,
        le=1000,
        description="Softmax scale (inverse temperature) of an explanation's attention over a "
        "book's words (unit-length embeddings): 20 is the temperature 0.05 the model was "
        "trained with.",
    )
    min_match_cosine: float = Field(
        0.4,
        ge=-1.0,
        le=1.0,
        description="A search whose nearest book (the highest title or description cosine "
        "of any the filters keep) is below this, and which names no author of the catalog, is "
        "flagged no_strong_match: its words may occur with nothing about them. 0.4 for the "
        "bundled all-MiniLM-L6-v2; another model has its own range of cosines.",
    )
    key_dtype: Literal["auto", "float32", "float16", "bfloat16"] = Field(
        "auto",
        description="Keys in memory: auto is float32 on every device; float16 and bfloat16 "
        "halve their bytes at a cost in exactness (docs/configuration.md).",
    )
    chunk_size: int | None = Field(
        None,
        ge=MIN_CHUNK,
        le=1 << 30,
        description=f"Keys per chunk of the attention core, at least {MIN_CHUNK} (each chunk "
        "costs a few operations per head: 1 made a search of 180 books take 3.5 s); memory is "
        "O(B·chunk). Unset: "
        "sized per batch so a chunk's logits take at most 64 MiB on the CPU and 1 GiB on a GPU "
        "(models.attention.chunk_for).",
    )
    torch_threads: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="torch's intra-op threads in `attend serve`. Unset: 1 when the attention "
        "runs on the CPU next to the onnx encoder under OMP_WAIT_POLICY=PASSIVE, which `attend` "
        "sets (the product runs in the BLAS's own threads, "
        "the encoder in ONNX Runtime's, and torch's many small operations per search ran "
        "faster on one thread than waking a second), else torch's default "
        "(service/commands/threads.py).",
    )
    batch_window_ms: float = Field(
        2.0,
        ge=0,
        le=1000,
        description="Under load, how long a batch waits for more searches to share its encoder "
        "and attention call; a lone search on an idle service never waits.",
    )
    max_batch: int = Field(64, ge=1, le=4096, description="Most queries in one batch.")
    batch_budget_ms: float = Field(
        20.0,
        ge=0,
        le=60_000,
        description="While small requests (≤ 4 queries) are about, they get batches of their "
        "own, alternating with batches whose part of bigger requests is cut to about this much "
        "worker time (at the measured cost per query, at least 4 queries); 0: batches sized "
        "by ATTEND_MAX_BATCH alone. Either way a batch with big work is encoded a few queries "
        "at a time, the small requests that arrive meanwhile answered between those calls "
        "(service/engine/batching.py).",
    )
    query_cache_size: int = Field(
        4096,
        ge=1,
        le=10_000_000,
        description="Query embeddings kept (LRU): a repeated query skips the encoder.",
    )
    max_body_bytes: int = Field(
        1_048_576,
        ge=1,
        description="Largest request body accepted; a larger one is refused with 413 before it "
        "is read. 64 queries of 512 characters fit many times over.",
    )
    max_upload_bytes: int = Field(
        268_435_456,
        ge=1,
        description="Largest request body under /admin/ (catalog uploads, behind the admin "
        "token), and the most a gzip upload may hold decompressed; everywhere else "
        "ATTEND_MAX_BODY_BYTES applies.",
    )
    max_header_bytes: int = Field(
        65_536,
        ge=1024,
        le=16_777_216,
        description="Largest request line plus headers `attend serve` reads; a larger one is "
        "refused with 431 (service/api/bounded_h11.py).",
    )
    max_headers: int = Field(
        100, ge=8, le=10_000, description="Most header fields in a request; more: 431."
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="A request's line and headers must arrive within this many seconds of the "
        "connection (or of the previous response on it), else the connection is closed.",
    )
    body_timeout_s: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description="A request's body must arrive within this many seconds of its headers, else "
        "the connection is closed. Raise it for large catalog uploads over slow links.",
    )
    keep_alive_s: int = Field(
        5, ge=1, le=3600, description="An idle keep-alive connection is closed after this long."
    )
    send_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="A client must take some of its answer within this many seconds once the "
        "connection's output buffer is full, else the connection is cut and the buffer freed "
        "(a client that never reads held its whole answer in memory).",
    )
    shutdown_s: int = Field(
        8,
        ge=1,
        le=3600,
        description="At SIGTERM or SIGINT, requests in progress may finish for this long; the "
        "rest are answered 503 and the service stops (docker's stop waits 10 s, then kills).",
    )
    max_connections: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        description="Most client connections open at once; past it a new one is closed as soon "
        "as it is accepted. The file limit is raised to fit, or this lowered to fit it.",
    )
    max_connections_per_client: int = Field(
        100,
        ge=1,
        le=1_000_000,
        description="Most connections one client address may hold open at once (at most "
        "ATTEND_MAX_CONNECTIONS); past it its new one is closed as soon as it is accepted, so "
        "one client cannot hold them all. Behind a proxy every client has the proxy's address: "
        "raise it to ATTEND_MAX_CONNECTIONS there and bound clients at the proxy "
        "(deploy/nginx.conf).",
    )
    book_query_concurrency: int = Field(
        2,
        ge=1,
        le=1024,
        description="Similar-book, recommend and explain requests given to the engine at once "
        "(they rank one at a time on the searcher's worker, in turn with search batches: 2 keeps "
        "it fed); "
        "ATTEND_BOOK_QUERY_QUEUE more wait, and past those a request is answered 429 with "
        "Retry-After.",
    )
    book_query_queue: int = Field(
        8,
        ge=0,
        le=100_000,
        description="Similar-book, recommend and explain requests that may wait for a turn beside "
        "the ATTEND_BOOK_QUERY_CONCURRENCY being ranked; a waiting request holds no thread.",
    )
    book_query_budget: int = Field(
        12_000,
        ge=1,
        le=10_000_000,
        description="Most liked books × k × heads (those with a weight) a recommend request "
        "may ask for, else 422 naming it: every result says how much each liked book gave it "
        "through each head. One liked book always fits, as a similar-books request does.",
    )
    log_level: str = Field(
        "INFO", description=f"Python logging level: {', '.join(_LOG_LEVELS)} (any case)."
    )
    log_json: bool = Field(
        False, description="`attend serve` logs one JSON object a line instead of plain text."
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Origins allowed to call the API from a browser: comma-separated "
        '(https://a.example,https://b.example, or *) or a JSON list (["https://a.example"]). '
        "Empty, the default: no CORS headers at all.",
    )
    shards: int = Field(
        1,
        ge=1,
        le=1024,
        description="With the ray engine: how many shards split the keys (one Ray Serve "
        "deployment each; the answers are merged exactly).",
    )
    shard_replicas: int = Field(
        1, ge=1, le=1024, description="With the ray engine: replicas of every shard, for load."
    )
    shard_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="With the ray engine: a shard's reply must come within this many seconds, "
        "else the request is answered 503 with Retry-After (a stopped or frozen shard fails "
        "searches fast instead of hanging them).",
    )

    @field_validator("log_level")
    @classmethod
    def _a_log_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in _LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)}")
        return level

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _origins(cls, value: Any) -> Any:
        """A plain value is comma-separated origins; one starting with `[` a JSON list."""
        if not isinstance(value, str):
            return value
        if value.lstrip().startswith("["):
            try:
                return json.loads(value)
            except json.JSONDecodeError:
                raise ValueError(
                    'is not a JSON list: write ["https://a.example"] or https://a.example'
                ) from None
        return [origin.strip() for origin in value.split(",") if origin.strip()]

    @field_validator("cors_origins")
    @classmethod
    def _an_origin_each(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ValueError(
                    f"{origin!r} is not an origin: write scheme://host[:port], such as "
                    "https://a.example, or *"
                )
        return origins

    served_dir: str | None = Field(
        None,
        description="Folder of the served forms: each generation's keys, book columns, BM25 "
        "postings and names as files a start memory-maps instead of reading every row "
        "(service/engine/served_form.py). Default: beside a SQLite database file "
        "(`<file>.served`), else `served/` in Attend's cache folder; empty: none, every start "
        "reads the database.",
    )
    generation_poll_s: float = Field(
        2.0,
        ge=0,
        le=3600,
        description="How often the service checks for a newly activated index generation and "
        "swaps it in (0: never; it then serves the generation it started with).",
    )
    admin_token: SecretStr | None = Field(
        None,
        description="Bearer token of the admin API (POST /admin/reindex, GET /admin/jobs/{id}); "
        "at least 16 characters. Unset: the admin endpoints do not exist (404).",
    )

    @field_validator("admin_token")
    @classmethod
    def _long_enough(cls, token: SecretStr | None) -> SecretStr | None:
        if token is not None and len(token.get_secret_value()) < 16:
            raise ValueError("ATTEND_ADMIN_TOKEN must be at least 16 characters long")
        return token
