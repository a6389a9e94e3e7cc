"""A new pod's first connections may be refused until the cluster's network policy agent admits it
(kube-router on the real node: about a second). The S3 client waits for the endpoint, once per process,
before its first request; sockets on loopback stand in for the endpoint."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from infra.local.ports import free_port
from trainer import s3


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr(s3, "_WAITED", set())


def test_an_endpoint_that_opens_late_is_waited_for_then_not_again():
    port = free_port()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def open_later() -> None:
        time.sleep(0.8)
        listener.bind(("127.0.0.1", port))
        listener.listen()

    opener = threading.Thread(target=open_later)
    opener.start()
    try:
        waited = s3.wait_for_endpoint(f"http://127.0.0.1:{port}", seconds=5)
        assert 0.7 < waited < 3, waited
        assert s3.wait_for_endpoint(f"http://127.0.0.1:{port}", seconds=5) == 0.0  # once per endpoint
    finally:
        opener.join()
        listener.close()


def test_an_endpoint_that_never_opens_is_given_up_on_after_the_wait():
    port = free_port()
    started = time.monotonic()
    waited = s3.wait_for_endpoint(f"http://127.0.0.1:{port}", seconds=0.6)
    assert 0.6 <= waited < 2 and time.monotonic() - started < 2


@pytest.mark.parametrize("url", [None, "", "not a url", "http://127.0.0.1:notaport"])
def test_no_endpoint_or_a_malformed_one_is_left_to_the_client(url):
    assert s3.wait_for_endpoint(url, seconds=5) == 0.0


def test_the_client_waits_for_the_endpoint_of_the_environment(monkeypatch):
    asked: list[str | None] = []
    monkeypatch.setattr(s3, "wait_for_endpoint", lambda url: asked.append(url) or 0.0)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://minio.minio.svc.cluster.local:9000")
    s3.make_client()
    assert asked == ["http://minio.minio.svc.cluster.local:9000"]
