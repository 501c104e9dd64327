"""What `attend serve`, `attend demo` and `attend search` do (cli_parser.py parses the command
line, cli.py calls these; heavy modules are imported when a command runs)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import socket
import sys
from typing import Any, NoReturn

from service.commands.command_database import no_lock_file_left, open_index, overrides
from service.commands.index_commands import cmd_index

logger = logging.getLogger("attend")
NO_STRONG_MATCH_BELOW = 0.55  # the engine's (service/engine/mixing.py), not imported: torch


SERVE_OPTIONS = (
    "database_url",
    "host",
    "port",
    "engine",
    "shards",
    "shard_replicas",
    "ray_address",
)


def cmd_serve(args: argparse.Namespace, sock: socket.socket | None = None) -> int:
    """`attend serve`; `sock`: the port `attend demo` bound before it indexed."""
    from service.api.server import PortUnavailableError

    try:
        return _serve(args, sock)
    except PortUnavailableError as e:
        sys.stderr.write(f"attend {args.command}: {e}\n")
        return 2


def _serve(args: argparse.Namespace, sock: socket.socket | None) -> int:
    from service.commands.logs import configure_logging
    from service.config.settings import ServiceSettings

    settings = ServiceSettings(**overrides(args, SERVE_OPTIONS))
    # a server's log is its lifecycle and its requests: ATTEND_LOG_LEVEL (INFO), DEBUG at -vv
    level = "DEBUG" if args.verbose > 1 else settings.log_level
    configure_logging(level, json_lines=settings.log_json)
    if settings.engine != "ray" and settings.shards > 1:
        sys.stderr.write("attend serve: --shards needs --engine ray\n")
        return 2
    from service.api import server

    # a clear message here beats a traceback from inside uvicorn's start-up
    open_index(settings.database_url).dispose()
    # before the index and the model load (and Ray's start), which take seconds to a minute: a
    # port in use fails now, with what to do
    sock = sock or server.bind(settings.host, settings.port)
    try:
        # torch, FastAPI and the engine: seconds of imports, after the port is ours
        from service.api.main import create_app
        from service.commands.remote_search import server_url
        from service.commands.server_record import recorded
        from service.commands.threads import apply_serve_threads

        apply_serve_threads(settings)
        # an admin re-index (POST /admin/reindex) takes the writer's lock too; `attend search`
        # of this database finds this server by its record, whatever ATTEND_PORT it is given
        url = server_url(settings.host, sock.getsockname()[1])
        with no_lock_file_left(settings.database_url), recorded(settings.database_url, url):
            if settings.engine == "ray":
                status = _serve_on_ray(settings, sock)
            else:
                server.serve(create_app(settings), settings, sock)  # uvicorn + h11 (server.py)
                status = 0
    finally:
        sock.close()
    exit_now(status)  # served and shut down: nothing is left to do but the interpreter's teardown


def exit_now(status: int) -> NoReturn:
    """End the process with `status` now, once `attend serve` has shut down: its lifespan ran
    (the searcher, the watcher and the database closed), its lock file and server record are
    gone, Ray's shutdown ran. What is left is the interpreter's teardown of torch, the model and
    the index, and the work still queued on the engine's threads, which concurrent.futures runs
    to the end at exit: the process went on 5-20 s after uvicorn's "Finished server process"
    line under load (issue 32, finding 5), which an orchestrator's stop timeout counts.
    Logging and the standard streams are flushed first; nothing else is left to clean up."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe has nothing left to say
            stream.flush()
    os._exit(status)


def _serve_on_ray(settings: Any, sock: socket.socket) -> int:
    """The shards on Ray Serve, HTTP on `sock` by this process's server, as the local engine."""
    try:
        from service.cluster import ray_serve
    except ImportError as e:
        sys.stderr.write(f"attend serve: the ray engine needs pip install 'attend[ray]' ({e})\n")
        return 2
    ray_serve.serve_forever(settings, sock)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Index the bundled demo catalog (a no-op when it already is), then serve it; the port is
    bound first, so that one in use fails before the indexing, not after."""
    from indexer.data import DEMO_CATALOG
    from service.api import server
    from service.config.settings import ServiceSettings

    settings = ServiceSettings(**overrides(args, SERVE_OPTIONS))
    try:
        sock = server.bind(settings.host, settings.port)
    except server.PortUnavailableError as e:
        sys.stderr.write(f"attend {args.command}: {e}\n")
        return 2
    try:
        args.path, args.skip_invalid, args.batch_size = str(DEMO_CATALOG), False, None
        args.keep_missing = False
        return cmd_index(args) or cmd_serve(args, sock)
    finally:
        sock.close()


def cmd_search(args: argparse.Namespace) -> int:
    """The ranking from the running server when one serves this database (or the one at
    --url), else from the model and the index loaded here (service/commands/remote_search.py)."""
    from service.commands.remote_search import RemoteSearchError, search_on_server
    from service.config.settings import ServiceSettings

    settings = ServiceSettings(**overrides(args, ("database_url",)))
    params = {
        "q": args.query,
        "k": args.k,
        "offset": args.offset,
        "author": args.author,
        "year_min": args.year_min,
        "year_max": args.year_max,
        "language": args.language,
        "heads": args.heads,
    }
    response = None
    if not args.here:
        try:
            response, why_here = search_on_server(
                params,
                database_url=settings.database_url,
                host=settings.host,
                port=settings.port,
                model=settings.model,
                url=args.url,
                database_given=args.database_url is not None,
            )
        except RemoteSearchError as e:
            sys.stderr.write(f"attend search: {e}\n")
            return 2
        if why_here is not None:  # one line, -v or not: the seconds that follow are explained
            sys.stderr.write(
                f"attend search: {why_here}: searching here, loading the model and the index "
                "(`attend serve` of this database answers in about a second)\n"
            )
    if response is None:
        response = _search_here(settings, params)
    sys.stdout.write(
        json.dumps(response, indent=2, ensure_ascii=False) + "\n" if args.json else table(response)
    )
    return 0


def _search_here(settings: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The response of a search in this process: the model and the index loaded (seconds)."""
    from service.api.search_schemas import SearchParams, search_response
    from service.engine.startup import build_searcher

    logger.info("loading the model and the index here")
    query = SearchParams(**{k: v for k, v in params.items() if v is not None})
    engine = open_index(settings.database_url)
    try:
        searcher = build_searcher(settings, engine=engine)
    finally:
        engine.dispose()
    (result,) = searcher.search_now([query.q], query.options())
    return search_response(result).model_dump(mode="json")


def table(response: dict[str, Any]) -> str:
    """The ranking as `attend search` prints it, from the API's JSON response (the server's or
    this process's): a header with what it says of the whole query (matched, heads, match
    strength), then one line per result."""
    heads = ",".join(
        f"{name}:{head['weight']:.3g}{' (abstained)' if head.get('abstained') else ''}"
        for name, head in response["heads"].items()
    )
    lines = [
        f"{response['query']!r}: {response['matched']} of {response['catalog_size']} books "
        f"matched; heads {heads}; match strength {response['match_strength']:.2f}",
    ]
    if (like := response.get("like")) is not None:
        lines.append(f"books like {like['title']!r} ({like['id']}): its similar books")
    if response["no_strong_match"]:
        lines.append(f"no strong match: {_why_weak(response)}, so these are weak answers")
    lines.append(f"{'rank':>4}  {'weight':>7}  {'score':>6}  title")
    for hit in response["results"]:
        names = hit["authors"]
        authors = ", ".join(names[:2]) + (" et al." if len(names) > 2 else "")
        year = f", {hit['year']}" if hit.get("year") is not None else ""
        lines.append(
            f"{hit['rank']:>4}  {hit['weight']:>7.4f}  {hit['score']:>6.3f}  {hit['title']} "
            f"({authors}{year})"
        )
    return "\n".join(lines) + "\n"


def _why_weak(response: dict[str, Any]) -> str:
    """Which of the flag's causes holds (service/api/search_schemas.py): a strength of 1.00
    printed above "under 0.55" was a contradiction (issue 33), as "no word" would be for a
    query whose words occur but whose nearest book is far from it."""
    if response["match_strength"] < NO_STRONG_MATCH_BELOW:
        return (
            "the best book weighs little more than under a uniform weight (match strength "
            "under 0.55)"
        )
    lexical = response["heads"].get("lexical") or {}
    if not lexical.get("abstained") and response.get("nearest") is not None:
        return f"no book is close to it (the nearest book's cosine is {response['nearest']:.2f})"
    return "no word of the query occurs in any book"
