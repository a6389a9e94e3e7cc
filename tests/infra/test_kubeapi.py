"""The program's reader of the API server: the Kubernetes Python client against a stand-in API server
on 127.0.0.1 (plain HTTP), with a kubeconfig given as a path, as contents, and through $KUBECONFIG."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from infra.program.job.kubeapi import KubeConfigError, KubeReader
from infra.program.job.runwatch import ReadError
from tests.jsonhttp import JsonHandler

TOKEN = "t0ken-for-the-stand-in"


class _Api(JsonHandler):
    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        _Api.seen.append((self.path, self.headers.get("Authorization")))
        url = urlsplit(self.path)
        path = url.path + "".join(f"?{k}={v[0]}" for k, v in parse_qs(url.query).items())
        status, body = {
            "/apis/batch/v1/namespaces/ns/jobs/there": (200, {"kind": "Job", "metadata": {"name": "there"}}),
            "/api/v1/namespaces/ns/pods?labelSelector=ddp-mnist.io/job=there": (
                200,
                {"items": [{"a": 1}]},
            ),
            "/apis/batch/v1/namespaces/ns/jobs/broken": (500, {"message": "etcd"}),
        }.get(path, (404, {"kind": "Status", "code": 404}))
        self.answer(status, body)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def kubeconfig(server: str) -> str:
    return f"""apiVersion: v1
kind: Config
clusters:
- name: other
  cluster: {{server: "http://127.0.0.1:9"}}
- name: local
  cluster: {{server: "{server}"}}
users:
- name: deployer
  user: {{token: {TOKEN}}}
contexts:
- name: other
  context: {{cluster: other, user: deployer}}
- name: local
  context: {{cluster: local, user: deployer}}
current-context: other
"""


def test_a_path_and_a_context_reach_that_contexts_server_with_its_credentials(
    server: str, tmp_path: Path
) -> None:
    path = tmp_path / "config"
    path.write_text(kubeconfig(server))
    reader = KubeReader(str(path), "local")
    assert reader.get("/apis/batch/v1/namespaces/ns/jobs/there") == {
        "kind": "Job",
        "metadata": {"name": "there"},
    }
    assert reader.items("/api/v1/namespaces/ns/pods", {"labelSelector": "ddp-mnist.io/job=there"}) == [
        {"a": 1}
    ]
    assert _Api.seen[-1][1] == f"Bearer {TOKEN}"
    assert reader.get("/apis/batch/v1/namespaces/ns/jobs/gone") is None
    with pytest.raises(ReadError, match=r"^GET /apis/batch/v1/namespaces/ns/jobs/broken: 500 "):
        reader.get("/apis/batch/v1/namespaces/ns/jobs/broken")


def test_contents_and_the_kubeconfig_variable_work_as_the_provider_takes_them(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert KubeReader(kubeconfig(server), "local").get("/apis/batch/v1/namespaces/ns/jobs/there") is not None
    path = tmp_path / "config"
    path.write_text(kubeconfig(server).replace("current-context: other", "current-context: local"))
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert KubeReader(None, None).get("/apis/batch/v1/namespaces/ns/jobs/there") is not None


def test_an_unreachable_server_is_a_read_error_and_bad_settings_one_line(server: str, tmp_path: Path) -> None:
    with pytest.raises(ReadError):
        KubeReader(kubeconfig(server), "other").get("/apis/batch/v1/namespaces/ns/jobs/there")
    with pytest.raises(KubeConfigError, match=r"^cannot load the provider's kubeconfig: "):
        KubeReader(str(tmp_path / "missing"), None)
    with pytest.raises(KubeConfigError, match=r"^kubernetes:cluster is set: "):
        KubeReader(kubeconfig(server), "local", cluster="local")
