"""The per-address connection bound is exact (issue 31, item 6: with service/api/connections.py
admitting while `open > limit` instead of `>=`, one address held limit + 1 connections and
tests/test_hostile_server.py, which counts the refused ones against a loose lower bound over a
real server, still passed). The server's `PerClient` itself, as `attend serve` uses it."""

from __future__ import annotations

from service.api.connections import PerClient


def test_an_address_holds_exactly_its_limit_and_a_slot_frees_on_leave() -> None:
    clients = PerClient(3)
    assert [clients.admit("10.0.0.1") for _ in range(4)] == [True, True, True, False]
    assert clients.admit("10.0.0.2")  # another address has its own share
    clients.leave("10.0.0.1")
    assert clients.admit("10.0.0.1") and not clients.admit("10.0.0.1")
    for _ in range(3):
        clients.leave("10.0.0.1")
    clients.leave("10.0.0.2")
    assert clients.open == {}  # only addresses with connections open are held


def test_a_limit_of_one_admits_one() -> None:
    clients = PerClient(1)
    assert clients.admit("::1") and not clients.admit("::1")
