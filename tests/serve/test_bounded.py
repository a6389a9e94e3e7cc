"""The server under attack on 127.0.0.1: concurrent bodies at the limit built to cost the most memory
when parsed, oversized bodies, and slow requests, while a good client keeps asking. Its peak memory
(the kernel's high-water mark of its resident set) stays under the server pod's memory limit, every
good request is answered, and every bad one gets its one-line error."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.serve.conftest import REPO_ROOT, ServeProcess, free_port, start_server, subprocess_env, wait_ready
from tests.serve.test_serve import INFER, good, test_images, uint8_request

pytestmark = pytest.mark.slow  # a real model server process under load

POD_LIMIT_MIB = 1024  # serveMemoryLimit's default, 1Gi
ATTACKERS = 12  # three times the default --max-requests
SLOW_CLIENTS = 30
TIMEOUT_S = 10  # --request-timeout


def peak_mib(pid: int) -> float:
    """VmHWM: the largest resident set the process has had, in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE).group(1)) / 1024  # type: ignore[union-attr]


def body_limit(server: ServeProcess) -> int:
    status, reply = server.raw(
        f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: {1 << 40}\r\n\r\n".encode()
    )
    assert status == 413, reply
    return int(re.search(r"over the limit of (\d+) bytes", reply["error"]).group(1))  # type: ignore[union-attr]


def costly_body(limit: int, item: bytes) -> bytes:
    """A JSON request of exactly `limit` bytes whose data is `item` repeated (empty lists or objects:
    the most Python objects per byte)."""
    head = b'{"inputs":[{"name":"images","datatype":"UINT8","shape":[1,28,28],"data":['
    tail = b"]}]}"
    count = (limit - len(head) - len(tail) + 1) // (len(item) + 1)
    body = head + b",".join([item] * count) + tail
    return body + b" " * (limit - len(body))


def post(port: int, body: bytes, results: list[Any]) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(
            f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
        )
        results.append(read_status(sock))


def read_status(sock: socket.socket) -> int:
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return 0  # closed without a reply
        data += chunk
    return int(data.split(b" ", 2)[1])


def one_reply(sock: socket.socket) -> bytes:
    """One whole HTTP reply, read to its Content-Length (b"" and what came when the server closes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length and (chunk := sock.recv(65536)):
        body += chunk
    return head + b"\r\n\r\n" + body


def trickle(port: int, results: list[Any]) -> None:
    """A body of 1000 bytes sent a byte every half second: far slower than the deadline allows."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        try:
            sock.sendall(f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n".encode())
            for _ in range(1000):
                sock.sendall(b" ")
                sock.settimeout(0.5)
                try:
                    status = read_status(sock)
                    results.append((status, time.monotonic() - start))
                    return
                except TimeoutError:
                    continue
        except OSError:
            results.append((0, time.monotonic() - start))


def test_under_attack_the_server_stays_under_its_memory_limit_and_keeps_answering(trained: Path) -> None:
    server = start_server(str(trained), f"--request-timeout={TIMEOUT_S}")
    try:
        wait_ready(server)
        limit = body_limit(server)
        before = peak_mib(server.process.pid)
        bodies = [costly_body(limit, b"[]"), costly_body(limit, b"{}"), costly_body(limit, b"0.1")]
        attacked: list[int] = []
        slow: list[tuple[int, float]] = []
        threads = [
            threading.Thread(target=post, args=(server.port, bodies[i % len(bodies)], attacked))
            for i in range(ATTACKERS)
        ]
        threads += [threading.Thread(target=trickle, args=(server.port, slow)) for _ in range(SLOW_CLIENTS)]
        for thread in threads:
            thread.start()
        answered = 0
        while any(t.is_alive() for t in threads[:ATTACKERS]):
            good(server)  # 200 with the right labels, or the assertion fails
            answered += 1
        for thread in threads:
            thread.join(timeout=60)
        peak = peak_mib(server.process.pid)
        print(f"limit {limit} B; peak {before:.0f} MiB before, {peak:.0f} MiB under attack; {answered} good")
        assert sorted(set(attacked)) == [400], attacked  # each refused for what it is, none dropped
        assert len(slow) == SLOW_CLIENTS
        # Each trickled request ends at its deadline: 408 once its body is being read, or 503 (with
        # Retry-After) while it still waited for a request slot (a slot is taken before a body is read).
        assert {status for status, _ in slow} <= {408, 503}, slow
        # At its deadline, give or take the CPU the attack's parsing keeps (not after its 500 s of bytes).
        assert max(took for _, took in slow) < 3 * TIMEOUT_S, slow
        assert answered >= 1
        assert peak < POD_LIMIT_MIB, f"peak {peak:.0f} MiB"
        good(server)
    finally:
        code, _, err = server.stop()
    assert code == 0, err


def test_connections_past_the_cap_get_503_and_idle_ones_are_closed_at_their_deadline(trained: Path) -> None:
    server = start_server(str(trained), "--max-connections=2", "--request-timeout=2")
    try:
        wait_ready(server)
        if server.connection is not None:  # the helper's own keep-alive connection would count
            server.connection.close()
            server.connection = None
        time.sleep(0.5)
        idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(2)]
        time.sleep(0.5)  # both accepted and counted
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as third:
            reply = third.recv(4096)
        assert reply.startswith(b"HTTP/1.1 503 "), reply
        assert b"Retry-After: 1" in reply and b'{"error":"too many connections; retry later"}' in reply
        started = time.monotonic()
        for sock in idle:
            assert sock.recv(1) == b""  # closed by the server, nothing sent
            sock.close()
        assert time.monotonic() - started < 4  # at the 2-s deadline, give or take the reaper's 0.5 s
        time.sleep(0.5)
        good(server)
    finally:
        code, _, err = server.stop()
    assert code == 0, err


def test_a_keep_alive_connection_reused_late_in_its_idle_time_has_the_whole_timeout_for_its_request(
    trained: Path,
) -> None:
    """A pooled client (requests, httpx) reuses a connection that sat idle for most of the timeout: the
    request it then sends has the whole timeout from its first byte, not what the idle time left."""
    server = start_server(str(trained), "--request-timeout=2")
    try:
        wait_ready(server)
        body = json.dumps(uint8_request(test_images()[0][:1])).encode()
        head = f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(head + body)
            assert one_reply(sock).startswith(b"HTTP/1.1 200 ")
            time.sleep(1.2)  # idle, within the timeout: the connection stays open
            sock.sendall(head)
            time.sleep(1.2)  # the body 2.4 s after the idle wait began, 1.2 s after its request began
            sock.sendall(body)
            reply = one_reply(sock)
        assert reply.startswith(b"HTTP/1.1 200 "), reply
    finally:
        code, _, err = server.stop()
    assert code == 0, err


def _probe(port: int, path: str) -> bytes:
    """What a kubelet HTTP probe gets: a new connection, one GET, the reply (b"" when closed unanswered)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n".encode())
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
        return reply


def test_clients_holding_every_connection_starve_the_service_port_but_never_the_probes_port(
    trained: Path,
) -> None:
    health_port = free_port()
    server = start_server(
        str(trained), "--max-connections=2", "--request-timeout=30", f"--health-port={health_port}"
    )
    try:
        wait_ready(server)
        if server.connection is not None:
            server.connection.close()
            server.connection = None
        time.sleep(0.5)
        held = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(2)]
        time.sleep(0.5)
        # On the service port a probe is refused: the kubelet would count a failure, and restart the pod.
        assert _probe(server.port, "/v2/health/live").startswith(b"HTTP/1.1 503 ")
        for path, expected in (
            ("/v2/health/live", b'{"live":true}'),
            ("/v2/health/ready", b'{"ready":true}'),
        ):
            reply = _probe(health_port, path)
            assert reply.startswith(b"HTTP/1.0 200 ") and reply.endswith(expected), reply
        assert _probe(health_port, "/v2/models/mnist").startswith(b"HTTP/1.0 404 ")  # probes only
        for sock in held:
            sock.close()
    finally:
        code, _, err = server.stop()
    assert code == 0, err


@pytest.mark.parametrize(
    ("port", "why"),
    [("8080", "8080 must be a port other than --port"), ("70000", "70000 is not a port (1-65535)")],
)
def test_a_bad_health_port_is_one_line_and_exit_2(port: str, why: str) -> None:
    command = [
        sys.executable,
        "-m",
        "trainer.serve",
        "--model-uri=/tmp/m",
        "--port=8080",
        f"--health-port={port}",
    ]
    result = subprocess.run(
        command, cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"trainer.serve: usage: argument --health-port: {why} (see 'python -m trainer.serve --help')"
    )
