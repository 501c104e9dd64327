"""`attend search` through a running `attend serve`: the answer in about a second, where loading
the model and the index in the command itself took 23-32 s a call (issue 24).

Without `--url` the command asks the server that `attend serve` (or `attend demo`) of the same
database recorded it listens at (server_record.py), then the one where `attend serve`
would listen with the same settings (ATTEND_HOST, ATTEND_PORT), and only when that server serves
the very index the command was pointed at: its /healthz names the database's identity
(`index_id`, a random id written when the database was made) and the generation it serves, and
both must be the database's own (its index id, its active generation) and the model the
settings name. A server on another database, or one not yet on the newest generation, is never
used silently: the command then searches in this process, and says why in one line. With
`--url` the command asks that server, whatever database it serves, unless `--database-url` is
given too, which it must then serve.

Only the standard library and SQLAlchemy are imported here: no torch, no model, no FastAPI.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, NamedTuple

logger = logging.getLogger("attend")

# A server that answers at all answers /healthz in milliseconds; one that is not there refuses
# the connection at once. The search itself may wait behind other clients' batches.
PROBE_TIMEOUT_S = 2.0
SEARCH_TIMEOUT_S = 60.0


class RemoteSearchError(RuntimeError):
    """The server asked for explicitly (`--url`) cannot be used, or refused the search (its
    4xx detail): the command's error, with what to do."""


class ServerAnswer(NamedTuple):
    """The server's SearchResponse as JSON, or None and why the command searches here (None
    too where the database holds no index: the local search says what is wrong)."""

    body: dict[str, Any] | None
    why_here: str | None = None


@dataclass(frozen=True)
class IndexIdentity:
    """What names an index: its database's id, and the generation that answers."""

    index_id: str | None
    generation: int | None


def local_identity(url: str) -> IndexIdentity | None:
    """The index id and active generation of the database at `url`, or None where it holds no
    index or does not answer (the local search then says what is wrong). A missing SQLite file
    stays missing."""
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.orm import Session

    from indexer import db, store
    from service.commands.command_database import sqlite_file

    file = sqlite_file(url)
    if file is not None and not file.exists():
        return None
    engine = db.create_db_engine(url)
    try:
        with Session(engine) as session:
            index_id = store.index_id(session=session)
            if index_id is None:
                return None
            return IndexIdentity(index_id, store.active_generation_id(session=session))
    except (SQLAlchemyError, db.DatabaseGoneError) as e:
        logger.debug("could not read the index id of the database: %s", e)
        return None
    finally:
        engine.dispose()


def server_url(host: str, port: int) -> str:
    """Where `attend serve` with this host and port answers: a wildcard address is reached on
    loopback."""
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _get(opener: urllib.request.OpenerDirector, url: str, timeout: float) -> tuple[int, Any]:
    """(status, JSON body) of GET `url`; OSError when nothing answers, ValueError for a body
    that is not JSON."""
    try:
        with opener.open(url, timeout=timeout) as response:
            return int(response.status), json.load(response)
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.load(e)


def _opener(explicit: bool) -> urllib.request.OpenerDirector:
    """The environment's HTTP proxies for a `--url` the user gave; none for the loopback
    server guessed from the settings (a proxy cannot reach this machine's 127.0.0.1)."""
    if explicit:
        return urllib.request.build_opener()
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def search_on_server(
    params: dict[str, Any],
    *,
    database_url: str,
    host: str,
    port: int,
    model: str,
    url: str | None = None,
    database_given: bool = False,
) -> ServerAnswer:
    """The server's answer to GET /search with `params`, or why the command should search in
    this process. Raises RemoteSearchError for a `--url` that cannot be used and for a search
    the server refuses (4xx)."""
    explicit = url is not None
    local = local_identity(database_url) if not explicit or database_given else None
    if not explicit and local is None:
        return ServerAnswer(None)  # no index here: the local search says so
    if url is not None:
        bases = [url.rstrip("/")]
    else:
        from service.commands.server_record import recorded_url

        recorded = recorded_url(database_url)
        bases = list(dict.fromkeys(b for b in (recorded, server_url(host, port)) if b))
    reasons = []
    for base in bases:
        body, why = _ask(base, params, local, model, explicit=explicit)
        if body is not None:
            logger.info(
                "asked the server at %s (generation %s): no model loaded here",
                base,
                body.get("generation"),
            )
            return ServerAnswer(body)
        reasons.append(str(why))
    return ServerAnswer(None, "; ".join(reasons))


def _ask(
    base: str, params: dict[str, Any], local: IndexIdentity | None, model: str, *, explicit: bool
) -> tuple[dict[str, Any] | None, str | None]:
    """The answer of the server at `base`, or why it gave none."""
    opener = _opener(explicit)
    try:
        status, health = _get(opener, f"{base}/healthz", PROBE_TIMEOUT_S)
    except (OSError, ValueError) as e:
        if explicit:
            raise RemoteSearchError(
                f"no Attend server answers at {base} ({_reason(e)}): start one with `attend "
                "serve`, or leave out --url to search in this process"
            ) from e
        return None, f"no server answers at {base} ({_reason(e)})"
    problem = _not_the_same(base, status, health, local, model)
    if problem is not None:
        if explicit:
            raise RemoteSearchError(f"{problem}; leave out --url to search this database here")
        return None, problem
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    try:
        status, body = _get(opener, f"{base}/search?{query}", SEARCH_TIMEOUT_S)
    except (OSError, ValueError) as e:
        if explicit:
            raise RemoteSearchError(f"the server at {base} did not answer ({_reason(e)})") from e
        return None, f"the server at {base} did not answer ({_reason(e)})"
    if 400 <= status < 500:
        detail = body.get("detail") if isinstance(body, dict) else None
        raise RemoteSearchError(str(detail or f"the server at {base} answered {status}"))
    if status != 200 or not isinstance(body, dict):
        if explicit:
            raise RemoteSearchError(f"the server at {base} answered {status}: {body}")
        return None, f"the server at {base} answered {status}"
    return body, None


def _not_the_same(
    base: str, status: int, health: Any, local: IndexIdentity | None, model: str
) -> str | None:
    """Why the server at `base` must not answer for the local index, or None."""
    if status != 200 or not isinstance(health, dict) or "generation" not in health:
        return f"the server at {base} is not a ready Attend server (/healthz answered {status})"
    if local is None:
        return None  # --url alone: that server's index is the one asked for
    if health.get("index_id") != local.index_id:
        return (
            f"the server at {base} serves another database (index id {health.get('index_id')}, "
            f"this one's is {local.index_id})"
        )
    if health.get("generation") != local.generation:
        return (
            f"the server at {base} serves generation {health.get('generation')}, the "
            f"database's active one is {local.generation} (it follows within "
            "ATTEND_GENERATION_POLL_S)"
        )
    if health.get("model") != model:
        return f"the server at {base} embeds with {health.get('model')}, not {model}"
    return None


def _reason(e: Exception) -> str:
    """Why a request failed, in words ("Connection refused", not "[Errno 111] …")."""
    if isinstance(e, urllib.error.URLError):
        reason = e.reason
        return reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
    return str(e) or type(e).__name__
