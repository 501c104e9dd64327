"""`make demo`'s first step: is the port `attend demo` will serve on free? Run before the
install (`python3 -m service.commands.port_check`, the standard library only, no venv yet),
so a port in use fails in a second, naming it, and not after minutes of installing (issue 33:
the check ran in `attend demo` only, 6 minutes in).

The host and port are read as the settings read them: ATTEND_HOST / ATTEND_PORT from the
environment, else from a `.env` file in the working folder, else 127.0.0.1:8000. `attend demo`
binds the port again itself (service/api/server.py), so this is the early answer, not the
guard. Exit status 0 when the port is free (or the settings are not this check's to judge:
`attend demo` names a bad value), 2 with one line on stderr when it is not.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
from pathlib import Path

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000


def dotenv(path: Path) -> dict[str, str]:
    """The KEY=VALUE lines of a `.env` file (quotes removed), as pydantic-settings reads them."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    values = {}
    for line in text.splitlines():
        key, sep, value = line.strip().removeprefix("export ").partition("=")
        if sep and key.strip() and not key.lstrip().startswith("#"):
            values[key.strip()] = value.strip().strip("'\"")
    return values


def setting(name: str, file: dict[str, str], default: str) -> str:
    """A setting's value: the environment's (case-insensitive, as pydantic-settings'), else the
    .env file's, else `default`."""
    for source in (os.environ, file):
        for key, value in source.items():
            if key.upper() == name:
                return value
    return default


def problem(host: str, port: int) -> str | None:
    """Why `attend demo` could not listen on host:port now, or None."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return None  # not an address: `attend demo` says so, with what to give
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as `attend serve` binds
        try:
            sock.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return f"port {port} is already in use on {host} (another `attend serve`?)"
            return f"cannot listen on {host}:{port} ({e.strerror})"
    return None


def main() -> int:
    file = dotenv(Path(".env"))
    host = setting("ATTEND_HOST", file, DEFAULT_HOST)
    try:
        port = int(setting("ATTEND_PORT", file, str(DEFAULT_PORT)))
    except ValueError:
        return 0  # `attend demo` names the bad value
    if not 0 < port < 65536:
        return 0
    if (why := problem(host, port)) is None:
        return 0
    sys.stderr.write(
        f"make demo: {why}: stop what listens there, or serve the demo on another port: "
        "ATTEND_PORT=8080 make demo (nothing was installed)\n"
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
