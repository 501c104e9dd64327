"""A real `attend serve` against hostile clients over loopback sockets (issue 16, finding 1), on
the local engine and on `--engine ray` (issue 25, finding 4): huge or numerous headers are
refused, clients too slow with their headers or body are cut off, connections past the bound are
closed at once, one address cannot hold them all (issue 25, finding 5), a client that never
reads its answers is cut (issue 50, item 4), and the service answers everyone else meanwhile.
Other clients come from other addresses of 127.0.0.0/8, which Linux routes to lo.

Every wait here is bounded: a socket timeout a few seconds past the server's deadline, so a
server without the deadline fails the test instead of hanging it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from conftest import ATTEND, attend_index, free_port
from indexer.data import DEMO_CATALOG

pytestmark = pytest.mark.model

HEADER_TIMEOUT_S = 1.5
BODY_TIMEOUT_S = 1.5
MAX_CONNECTIONS = 40
PER_CLIENT = 10  # ATTEND_MAX_CONNECTIONS_PER_CLIENT
MAX_HEADER_BYTES = 65_536
SEND_TIMEOUT_S = 2.0
GRACE_S = 3.0  # a deadline is met when the server acts within this of it


@pytest.fixture(scope="module", params=["local", "ray"])
def server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[str, int]]:
    """(host, port) of `attend serve` over the demo catalog (SQLite, the real model), on each
    engine: with `--engine ray` the same server fronts the router, so the same bounds hold."""
    engine = ["--engine", "ray", "--shards", "2"] if request.param == "ray" else []
    if engine:
        pytest.importorskip("ray", reason="the ray engine is an extra: pip install 'attend[ray]'")
    folder = tmp_path_factory.mktemp("hostile")
    env = {
        **os.environ,
        "ATTEND_DATABASE_URL": f"sqlite:///{folder / 'attend.db'}",
        "ATTEND_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
        "ATTEND_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "ATTEND_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
        "ATTEND_MAX_CONNECTIONS_PER_CLIENT": str(PER_CLIENT),
        "ATTEND_MAX_HEADER_BYTES": str(MAX_HEADER_BYTES),
        "ATTEND_SEND_TIMEOUT_S": str(SEND_TIMEOUT_S),
        "ATTEND_GENERATION_POLL_S": "0",
        "HF_HUB_OFFLINE": "1",
    }
    attend_index(DEMO_CATALOG, env, folder)
    port = free_port()
    proc = subprocess.Popen(
        [ATTEND, "serve", "--port", str(port), *engine],
        env=env,
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 150  # Ray's start and two shards': 30-60 s here
        while True:
            assert proc.poll() is None, "attend serve exited during start-up"
            assert time.monotonic() < deadline, "attend serve did not become ready"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        yield "127.0.0.1", port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def _connect(address: tuple[str, int], timeout: float, source: str = "127.0.0.1") -> socket.socket:
    s = socket.create_connection(address, timeout=timeout, source_address=(source, 0))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _closed_within(s: socket.socket, seconds: float, trickle: bytes = b"") -> float | None:
    """Seconds until the server closes `s` (EOF or reset), sending `trickle` a byte each 0.3 s
    meanwhile; None if it is still open after `seconds`."""
    t0 = time.monotonic()
    s.settimeout(0.3)
    sent = 0
    while time.monotonic() - t0 < seconds:
        try:
            if s.recv(65_536) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            pass
        except ConnectionError:
            return time.monotonic() - t0
        if sent < len(trickle):
            try:
                s.sendall(trickle[sent : sent + 1])
            except ConnectionError:
                return time.monotonic() - t0
            sent += 1
    return None


def _response_status(s: socket.socket) -> int:
    head = b""
    while b"\r\n" not in head:
        chunk = s.recv(4096)
        assert chunk, f"closed without a status line: {head!r}"
        head += chunk
    return int(head.split(b" ", 2)[1])


def _healthy(address: tuple[str, int]) -> None:
    """GET /healthz answers 200 within GRACE_S, asked on new connections until it does (a
    connection closed at once because the server has yet to see a hostile client leave is
    asked again). This file's three calls took 25-26 ms here on the local engine and 31-57 ms
    on the ray engine; GRACE_S, the margin every deadline of this file gets, is 50 times the
    slowest, which a loaded 2-core machine keeps. A server still busy with the hostile client
    (reading its 150 MiB) or holding its slots after the clients left (a leak) does not answer
    within it."""
    deadline = time.monotonic() + GRACE_S
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"GET /healthz got no answer within {GRACE_S} s"
        try:
            r = httpx.get(f"http://{address[0]}:{address[1]}/healthz", timeout=left)
        except httpx.TransportError:
            time.sleep(0.05)
            continue
        assert r.status_code == 200
        return


def test_a_header_past_the_bound_is_refused_with_431(server: tuple[str, int]) -> None:
    # 2 × the bound, without the blank line that ends the headers: only a size check answers
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (2 * MAX_HEADER_BYTES)
    with _connect(server, timeout=GRACE_S) as s:
        s.sendall(big)
        assert _response_status(s) == 431
    _healthy(server)


def _response(s: socket.socket) -> tuple[int, dict[str, object]]:
    """(status, JSON body) of the response on `s`, which the server closes after it."""
    raw = b""
    with contextlib.suppress(ConnectionResetError):  # a reset after the answer: it was read
        while chunk := s.recv(65_536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


@pytest.mark.parametrize(
    ("request_bytes", "status", "detail"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", 400, "not valid HTTP/1.1"),
        # just past the bound and unfinished, so the server has read it all when it answers
        (b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"a" * (MAX_HEADER_BYTES + 100), 431, "larger"),
    ],
    ids=["garbage", "big-header"],
)
def test_refusals_before_the_app_are_json_like_every_error(
    server: tuple[str, int], request_bytes: bytes, status: int, detail: str
) -> None:
    with _connect(server, timeout=GRACE_S) as s:
        s.sendall(request_bytes)
        got, body = _response(s)
    assert got == status
    assert detail in str(body["detail"])


def test_a_150_mib_header_does_not_stall_other_clients(server: tuple[str, int]) -> None:
    t0 = time.monotonic()
    with _connect(server, timeout=GRACE_S) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
        chunk, sent = b"a" * (1 << 20), 0
        try:
            while sent < 150 << 20:
                s.sendall(chunk)
                sent += len(chunk)
        except ConnectionError:
            pass  # refused: the server stopped reading and closed (a stall times out, failing)
    # the server stopped after the bound, not after 150 MiB, and answers others at once
    assert sent < 150 << 20
    assert time.monotonic() - t0 < GRACE_S + 1
    _healthy(server)


def test_more_headers_than_the_bound_are_refused(server: tuple[str, int]) -> None:
    headers = "".join(f"X-H{i}: {i}\r\n" for i in range(150))  # 1.9 KB, well under the size
    with _connect(server, timeout=GRACE_S + 5) as s:
        s.sendall(f"GET /healthz HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
        assert _response_status(s) == 431


@pytest.mark.parametrize(
    "trickle",
    [b"", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100],
    ids=["idle", "one-header-byte-at-a-time"],
)
def test_a_client_slow_with_its_headers_is_cut_off(server: tuple[str, int], trickle: bytes) -> None:
    with _connect(server, timeout=GRACE_S) as s:
        waited = _closed_within(s, HEADER_TIMEOUT_S + GRACE_S, trickle)
    assert waited is not None, "the connection was still open past the header deadline"
    assert waited >= HEADER_TIMEOUT_S - 0.2


def test_a_client_slow_with_its_body_is_cut_off(server: tuple[str, int]) -> None:
    head = (
        b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 400\r\n\r\n"
    )
    with _connect(server, timeout=GRACE_S) as s:
        s.sendall(head)
        waited = _closed_within(s, BODY_TIMEOUT_S + GRACE_S, b'{"queries": ["' + b"a" * 300)
    assert waited is not None, "the connection was still open past the body deadline"
    assert waited >= BODY_TIMEOUT_S - 0.2


def test_a_keep_alive_connection_gets_a_fresh_header_deadline(server: tuple[str, int]) -> None:
    """A slow client is cut off on its second request too, and a prompt one is served on the
    same connection past the first deadline."""
    with _connect(server, timeout=GRACE_S) as s:
        for _ in range(2):
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _response_status(s) == 200
            _drain(s)
            time.sleep(HEADER_TIMEOUT_S * 0.6)  # 1.2 × the deadline over both requests
        waited = _closed_within(s, HEADER_TIMEOUT_S + GRACE_S, b"GET /healthz HTTP/1.1\r\nX: ")
    assert waited is not None


def _drain(s: socket.socket) -> None:
    s.settimeout(0.2)
    try:
        while s.recv(65_536):
            pass
    except TimeoutError:
        pass
    s.settimeout(GRACE_S)


def test_connections_past_the_bound_are_closed_at_once(server: tuple[str, int]) -> None:
    # from 12 addresses, PER_CLIENT each: past the bound in all, within each address's share
    sources = [f"127.0.0.{1 + i // PER_CLIENT}" for i in range(3 * MAX_CONNECTIONS)]
    opened = [_connect(server, GRACE_S, source) for source in sources]
    try:
        time.sleep(0.5)
        closed = [s for s in opened if _closed_within(s, 0.05) is not None]
        # the first MAX_CONNECTIONS stay (until their header deadline), the rest are closed
        assert 2 * MAX_CONNECTIONS - 2 <= len(closed) < 3 * MAX_CONNECTIONS
    finally:
        for s in opened:
            s.close()
    _healthy(server)  # the slots are free again once their clients leave


def test_one_address_cannot_hold_every_connection(server: tuple[str, int]) -> None:
    """127.0.0.1 opens every connection there is: past its share they are closed at once, and
    another address still connects and is answered (before, it was closed as soon as it was
    accepted, like every connection past the bound)."""
    opened = [_connect(server, timeout=GRACE_S) for _ in range(MAX_CONNECTIONS)]
    try:
        other = _connect(server, GRACE_S, source="127.0.0.2")
        with other:
            other.sendall(b"GET /healthz HTTP/1.1\r\nHost: attend\r\n\r\n")
            assert _response_status(other) == 200
        # the first PER_CLIENT stay (until their header deadline), the rest were closed
        closed = [s for s in opened if _closed_within(s, 0.05) is not None]
        assert len(closed) >= MAX_CONNECTIONS - PER_CLIENT
    finally:
        for s in opened:
            s.close()


def test_a_client_that_never_reads_its_answers_is_cut(server: tuple[str, int]) -> None:
    """Four answers of 3.4 MB asked at once on one connection (pipelined) by a client with a
    small receive window that then reads nothing: past the kernel's buffers (4 MiB here) the
    server's own buffer fills, and SEND_TIMEOUT_S later it cuts the connection, freeing what it
    held; the client gets a part of the answers, not all of them."""
    body = json.dumps({"queries": [f"dragons and wizards {i}" for i in range(64)], "k": 100})
    request = (
        b"POST /search HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
    )
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    s.settimeout(60)
    with contextlib.closing(s):
        s.connect(server)
        s.sendall(request * 4)
        time.sleep(4 * SEND_TIMEOUT_S + GRACE_S)  # answers made, nothing read
        got = b""
        with contextlib.suppress(ConnectionError):
            while chunk := s.recv(1 << 20):
                got += chunk
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
    head = got.partition(b"\r\n\r\n")[0].lower()
    length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
    assert length > 3_000_000
    assert len(got) < 3 * length, len(got)  # cut: the last answers were never sent whole
    _healthy(server)
