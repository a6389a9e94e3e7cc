"""The reaper and a request that arrives as its connection's idle time runs out.

A keep-alive connection is closed once idle past --request-timeout. Its thread, seeing a request's first
byte, claims the connection with a new deadline. The reaper's choice and its close are one step under the
lock that claim takes, so exactly one of them wins: a connection the reaper closed answers nothing (a
reply written to it would fail with a broken pipe, logged as a failed connection), and one its thread
claimed first is not closed under the request. Real sockets on this machine, no server process."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from trainer.serve.connections import Server
from trainer.serve.server import Handler


@pytest.fixture
def server() -> Iterator[Server]:
    server = Server(("127.0.0.1", 0), Handler)
    server.model = SimpleNamespace(config=SimpleNamespace(request_timeout=1.0, max_connections=4))  # type: ignore[assignment]
    try:
        yield server
    finally:
        server.server_close()


# The server's own reaper runs every half second on the real clock: the tests' times lie an hour ahead of
# it, so only their own calls of `reap` can find a connection late.
T = time.monotonic() + 3600


def connected(server: Server, at: float) -> tuple[socket.socket, socket.socket]:
    """A connection as the server's accept registers it at time `at` (its deadline one timeout later),
    with the client's end."""
    ours, theirs = socket.socketpair()
    with server._lock:
        server._deadlines[ours] = at + server.model.config.request_timeout
    return ours, theirs


def closed(ours: socket.socket, theirs: socket.socket) -> bool:
    """The server's end was shut down: the client reads end of file."""
    theirs.settimeout(1)
    try:
        return theirs.recv(1) == b""
    except TimeoutError:
        return False


def test_a_connection_the_reaper_closed_takes_no_request(server: Server) -> None:
    ours, theirs = connected(server, at=T)
    assert server.reap(now=T + 2.0) == [ours]
    assert closed(ours, theirs)
    # Its thread sees the request that came as the idle time ran out: it must not answer on it.
    assert server.awaiting(ours, T + 2.5) is False


def test_a_request_claimed_before_the_reaper_runs_is_not_cut(server: Server) -> None:
    ours, theirs = connected(server, at=T)
    assert server.awaiting(ours, T + 1.9 + 1.0) is True  # its first byte at 1.9 s: due by 2.9 s
    assert server.reap(now=T + 2.0) == []
    assert not closed(ours, theirs)
    with server.answering(ours):  # being answered: no deadline at all
        assert server.reap(now=T + 10.0) == []
    assert not closed(ours, theirs)


def test_a_closed_connections_record_goes_with_it(server: Server) -> None:
    ours, _ = connected(server, at=T)
    server.reap(now=T + 2.0)
    server.shutdown_request(ours)
    assert ours not in server._reaped and ours not in server._deadlines
