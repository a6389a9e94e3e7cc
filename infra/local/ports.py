"""Free loopback ports for what runs locally: a job's master port, the S3 stand-in's ports, the model
server and its Service (and the tests' own servers).

A port is picked, released, and bound by another process a moment later. A port from the kernel's
ephemeral range (what binding port 0 gives) can be handed in between to any outgoing connection on
the machine, and the process meant to listen on it then fails with "address already in use". So the
pick is made below that range (Linux: ``/proc/sys/net/ipv4/ip_local_port_range``), where only a
listener started on purpose can take it, and at random, so that picks made at the same moment by
processes side by side rarely meet. Where the range is unknown, or nothing below it is free, port 0
decides.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOOPBACK = "127.0.0.1"
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
SPAN = 10_000  # the ports just below the ephemeral range that picks come from
TRIES = 20


def ephemeral_start() -> int | None:
    """The first port of the kernel's ephemeral range, where the system says it."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback TCP port nobody listens on, picked where no outgoing connection will take it."""
    start = ephemeral_start()
    if start is not None and start - SPAN >= 1024:
        for port in random.sample(range(start - SPAN, start), TRIES):
            if _bindable(port):
                return port
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])
