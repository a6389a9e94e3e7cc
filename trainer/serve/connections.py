"""The server's connections: at most --max-connections open (the next answered 503 and closed), each
request due within --request-timeout (a connection idle, or slow to send its request line and headers,
past it is closed), the requests being answered counted (for the stop's drain), and the request
bodies held in memory counted against a budget as their bytes arrive."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trainer.errors import write_line
from trainer.serve.config import PROG
from trainer.serve.protocol import Model

RETRY_AFTER_S = 1
REAP_EVERY_S = 0.5
# Request bodies held in memory at once, in bodies at the limit: four per request slot, so that a burst
# of maximal requests waits for a slot with its body read, while a flood of them is refused (503).
BODY_BUDGET_BODIES = 4


class Server(ThreadingHTTPServer):
    """One thread per connection, at most --max-connections of them; counts the requests being answered,
    so that a stop (SIGTERM: the pod deleted, or replaced by a rollout) answers every request already
    received before the process ends; closes the connections whose request did not arrive in time."""

    daemon_threads = True  # an idle keep-alive connection never holds the process up
    request_queue_size = 128  # the listen backlog (socketserver's default of 5 refuses bursts)
    model: Model
    slots: threading.BoundedSemaphore
    body_budget: int  # bytes of request bodies held at once: BODY_BUDGET_BODIES at the body limit

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._in_flight = 0
        self._idle = threading.Condition()
        # Each open connection's socket -> the time by which its next request must have arrived (None
        # while one is being answered: the body read keeps its own deadline).
        self._deadlines: dict[socket.socket, float | None] = {}
        self._reaped: set[socket.socket] = set()  # closed by the reaper, their thread not yet gone
        self._lock = threading.Lock()
        self._body_bytes = 0  # bytes of request bodies held by the requests being answered
        threading.Thread(target=self._reap, name="reaper", daemon=True).start()

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection, or, when --max-connections are open, 503 and closed at once."""
        with self._lock:
            full = len(self._deadlines) >= self.model.config.max_connections
            if not full:
                self._deadlines[request] = time.monotonic() + self.model.config.request_timeout
        if full:
            refuse(request, "too many connections; retry later")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._deadlines.pop(request, None)
            self._reaped.discard(request)
        super().shutdown_request(request)

    def hold(self, size: int) -> bool:
        """Count `size` more bytes of request body (negative: release them); False, counting nothing, when
        that would pass the budget. Bodies are counted as they arrive, so a slow one holds little."""
        with self._lock:
            if size > 0 and self._body_bytes + size > self.body_budget:
                return False
            self._body_bytes += size
            return True

    def awaiting(self, connection: socket.socket, deadline: float) -> bool:
        """The connection waits for its next request, which must have arrived by `deadline`; False when
        the reaper has closed it already (a request that came as its idle time ran out is not answered:
        the client sees a keep-alive connection closed, as any server's idle timeout gives it)."""
        with self._lock:
            if connection in self._reaped:
                return False
            if connection in self._deadlines:
                self._deadlines[connection] = deadline
            return True

    def _reap(self) -> None:
        """Close the connections that are idle, or slow to send a request line and headers, past their
        deadline (their thread's read then ends; nothing is answered on them)."""
        while True:
            time.sleep(REAP_EVERY_S)
            self.reap(time.monotonic())

    def reap(self, now: float) -> list[socket.socket]:
        """One pass of the reaper: the connections late at `now`, closed. The choice and the close happen
        under the lock that `awaiting` and `answering` take, so a request its thread has begun (a new
        deadline, or none while it is answered) is never cut by a close decided before it began."""
        with self._lock:
            late = [c for c, deadline in self._deadlines.items() if deadline is not None and now > deadline]
            for connection in late:
                self._deadlines[connection] = None
                self._reaped.add(connection)
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
        return late

    @contextlib.contextmanager
    def answering(self, connection: socket.socket | None = None) -> Iterator[None]:
        """Around one request, from its first line read to its reply written."""
        with self._lock:
            if connection in self._deadlines:
                self._deadlines[connection] = None
        with self._idle:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def drain(self, timeout: float) -> int:
        """Wait until no request is being answered (at most `timeout` s); how many still are."""
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout)
            return self._in_flight

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke mid-request (client gone): one line, the server goes on."""
        error = sys.exc_info()[1]
        write_line(f"{PROG}: connection from {client_address[0]} failed: {type(error).__name__}: {error}")


def refuse(connection: socket.socket, message: str) -> None:
    """A 503 written straight to a connection no thread will serve (best effort, a second at most)."""
    payload = json.dumps({"error": message}, separators=(",", ":")).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nRetry-After: {RETRY_AFTER_S}\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        connection.settimeout(1)
        connection.sendall(head.encode("latin-1") + payload)
