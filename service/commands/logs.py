"""Logging set-up of the `attend` command: for `attend serve`, plain lines or one JSON object a
line (`ATTEND_LOG_JSON=true`) carrying the request fields the telemetry middleware attaches; for
the other commands, warnings only unless -v."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

# Attributes every LogRecord has; anything else was passed as `extra=` and goes into the JSON.
# (uvicorn's `color_message` is its message again, with terminal escapes.)
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


# alembic's migration context says these once per connection it configures, at INFO: noise
# beside the "Running upgrade" lines, so they are shown at DEBUG only.
_ALEMBIC_CHATTER = ("Context impl ", "Will assume ")


class Threshold(logging.Filter):
    """Lets through records at `level` and above, whatever their logger's own level: bm25s sets
    its logger to DEBUG, so its "Building index from tokens" passed a root logger at INFO.
    A filter, not a handler level, because tqdm's logging redirect copies a handler's filters
    and formatter but not its level."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return False
        return not (
            self.level > logging.DEBUG
            and record.name == "alembic.runtime.migration"
            and record.getMessage().startswith(_ALEMBIC_CHATTER)
        )


def configure_logging(level: str | int, *, json_lines: bool = False) -> None:
    """The root logger at `level`, with one handler on stderr; uvicorn's loggers propagate to it
    (`attend serve` passes uvicorn no logging config of its own). At WARNING and above (a
    command's default) a line is just the level and the message."""
    numeric = level if isinstance(level, int) else logging.getLevelName(level.upper())
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter()
        if json_lines
        else logging.Formatter(
            "%(levelname)s: %(message)s"
            if numeric >= logging.WARNING
            else "%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    )
    handler.addFilter(Threshold(numeric))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    # Alembic names each of its plugins at INFO when it is first imported, which is now lazily,
    # after this (indexer/db.py): a dozen lines of noise before a command's first real one
    logging.getLogger("alembic.runtime.plugins").setLevel(max(numeric, logging.WARNING))


def cli_level(verbosity: int) -> int:
    """The other `attend` commands' log level: warnings only (their result is the one line they
    print), INFO with -v, DEBUG with -vv."""
    return max(logging.DEBUG, logging.WARNING - 10 * verbosity)
