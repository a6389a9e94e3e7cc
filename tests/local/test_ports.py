"""Ports picked for local listeners (a job's master, the S3 stand-in, the model server): below the
kernel's ephemeral range, where no outgoing connection can take them before their process binds them."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from infra.local import ports


@pytest.fixture
def ephemeral_from_40000(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("40000\t60999\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", range_file)


def _listenable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
    return True


def test_picks_come_from_just_below_the_ephemeral_range(ephemeral_from_40000: None) -> None:
    picked = {ports.free_port() for _ in range(20)}
    assert all(40000 - ports.SPAN <= port < 40000 and _listenable(port) for port in picked)
    assert len(picked) > 1  # at random, so that parallel picks rarely meet


def test_a_port_someone_listens_on_is_never_picked(ephemeral_from_40000: None, monkeypatch) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        held = taken.getsockname()[1]
        monkeypatch.setattr(ports.random, "sample", lambda population, k: [held] * k)
        port = ports.free_port()  # every candidate taken: the kernel's pick instead
        assert port != held and _listenable(port)


def test_without_a_known_range_the_kernel_picks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", tmp_path / "absent")
    assert ports.ephemeral_start() is None
    assert _listenable(ports.free_port())


def test_this_machine_s_range_is_read_where_it_has_one() -> None:
    start = ports.ephemeral_start()
    assert (start is not None) == Path("/proc/sys/net/ipv4/ip_local_port_range").exists()
    assert start is None or ports.free_port() < start
