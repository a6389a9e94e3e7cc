"""The first-deploy tutorial, run from its page: every shell line of docs/tutorials/first-deploy.md, in
order, against the cluster with the real node, with only the values a reader fills in.

The reader here has a cluster without NFS, without internet and with 2 CPUs, so every variant block the
page offers for those applies and runs. The lines are run by bash in the reader's checkout: a git
repository of the working tree's tracked files (`pulumi stack init` writes into its stack files, and
the page's last lines restore them with git). What stands in for the reader:

- the values they type: the page's `<placeholders>` (VALUES) and the answers to the `--secret` prompts
  (on stdin, as `pulumi config set` reads a value that is not on its command line);
- their "yes" at `pulumi up`'s and `pulumi destroy`'s prompt: PULUMI_SKIP_CONFIRMATIONS (pulumi
  v3.274.1 pkg/cmd/pulumi/operations/up.go and destroy.go: `yes = yes || ... env.SkipConfirmations`);
- their second terminal: the port-forward runs in the background while the page's `curl`s run;
- the lines about kind itself (STAND_INS), which the tier does its own way, each said below;
- their home directory's backend: `pulumi login --local` names `~/.pulumi` of the user's passwd entry
  (pulumi v3.274.1 pkg/backend/diy/backend.go, `user.Current()`, not $HOME), root's own here, so the
  lines run with PULUMI_BACKEND_URL naming a directory of the test's, which every command prefers to the
  login's (pkg/workspace/creds.go). The login still writes its `meta.yaml` into `~/.pulumi`; the test
  removes that directory again when it made it.

Between the query and the clean-up, the dev path's results are read from what ran
(tests/e2e_node/devpath.py): the pods on the real node, rank 0's accuracy, the export in MinIO, a
standard client's accuracy on the 10,000 test images through the server's ClusterIP, and the stack's
NetworkPolicies as the node's engine enforces them.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from infra.localcluster import cluster
from infra.localcluster.node import dockerd as node_images_module
from infra.localcluster.node import node as real_node
from infra.localcluster.node.storage import STORAGE_CLASS
from infra.program.settings import SMOKE_NAMESPACE
from tests.docs.pages import shell_blocks
from tests.e2e import live
from tests.e2e_local import scenario
from tests.e2e_node.conftest import ROOT, failed_logs, place_on_the_node
from tests.e2e_node.devpath import (
    DEV_NAMESPACE,
    STORE_NAMESPACE,
    check_the_dev_path,
    check_the_network_policies,
)

pytestmark = pytest.mark.e2e_node

PAGE = ROOT / "docs" / "tutorials" / "first-deploy.md"
PLACEHOLDER = re.compile(r"<[^<>]+>")
PORT_FORWARD = "kubectl -n ddp-mnist-dev port-forward svc/mnist-serve 8080:8080"
TAG = "docker.io/ddp-mnist/trainer:dev"  # `ddp-mnist/trainer:dev`, as the CRI normalises it
# The lines about kind, and what the tier does instead.
KIND_CREATE = "kind create cluster --image "  # the page pins the node image (tests/docs checks which)
MINIKUBE_START = "minikube start "
STAND_INS = {
    KIND_CREATE: "the session's cluster with its real node, its two namespaces placed on it",
    MINIKUBE_START: "the same cluster: minikube is the page's alternative to kind",
    "make image": "the tier's build of our Dockerfile on its base (the Dockerfile's base is unreachable "
    "here), already in containerd",
    "kind load docker-image ddp-mnist/trainer:dev": f"that build tagged {TAG} in the node's containerd",
    "kind delete cluster": "the session's teardown",
}
SECRET_PROMPTS = {
    "pulumi config set --secret minioAccessKey": scenario.KEYS[0],
    "pulumi config set --secret minioSecretKey": scenario.KEYS[1],
}


def page_lines() -> list[str]:
    """Every command line of the page's shell blocks, in order, comments dropped."""
    lines = []
    for block in shell_blocks(PAGE.read_text()):
        for line in block.splitlines():
            command = line.split(" #", 1)[0].strip()
            if command and not command.startswith("#"):
                lines.append(command)
    return lines


def text_blocks(text: str) -> list[str]:
    """The contents of the page's ```text blocks (what it shows a command printing)."""
    return re.findall(r"^```text\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def shown_matches(shown: str, got: str) -> bool:
    """`got` is what the page shows, each `…` standing for any text."""
    pattern = ".*?".join(re.escape(part) for part in shown.split("…"))
    return re.fullmatch(pattern, got, re.DOTALL) is not None


def mirror_address(url: str) -> str:
    """The mirror's IP address, from its base URL (https://ADDRESS:PORT/)."""
    host = urllib.parse.urlsplit(url).hostname
    assert host is not None, url
    return host


def filled(line: str, values: dict[str, str]) -> str:
    """`line` with each placeholder replaced by the reader's value; a placeholder nobody fills fails."""
    unknown = [p for p in PLACEHOLDER.findall(line) if p not in values]
    assert not unknown, f"the page asks for {unknown}, which this test does not fill: {line}"
    return PLACEHOLDER.sub(lambda m: values[m.group(0)], line)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The reader's checkout: the repository's tracked files as the working tree has them (timestamps
    kept), committed into a git repository of their own."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    copy = tmp_path / "ddp-mnist"
    for name in filter(None, (t.decode() for t in tracked)):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    git = ["git", "-c", "user.name=reader", "-c", "user.email=reader@example.invalid"]
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "checkout"]):
        subprocess.run([*git, *argv], cwd=copy, check=True, capture_output=True)
    return copy


class Reader:
    """Runs the page's lines as a reader at a shell would: in `workspace`, with their environment."""

    def __init__(self, workspace: Path, home: Path, containerd_socket: Path) -> None:
        self.workspace = workspace
        # The session's engine settings but one: the reader's engine checkpoints as it does by default.
        inherited = {key: value for key, value in os.environ.items() if key != "PULUMI_SKIP_CHECKPOINTS"}
        self.env = {
            **inherited,
            "HOME": str(home),
            "PULUMI_SKIP_CONFIRMATIONS": "true",
            "PULUMI_BACKEND_URL": f"file://{home / 'backend'}",
        }
        self.containerd_socket = containerd_socket
        self.background: list[subprocess.Popen[bytes]] = []

    def run(self, line: str, stdin: str = "") -> str:
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            self.env[name] = shlex.split(value)[0]
            return ""
        print(f"$ {line}")
        result = subprocess.run(
            ["bash", "-c", line],
            cwd=self.workspace,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        print(result.stdout[-4000:], result.stderr[-4000:])
        assert result.returncode == 0, f"`{line}` exited {result.returncode}: {result.stderr[-2000:]}"
        return result.stdout

    def start(self, line: str) -> None:
        """A line a reader leaves running in a terminal of its own, until the port answers."""
        print(f"$ {line} &")
        process = subprocess.Popen(
            ["bash", "-c", f"exec {line}"],
            cwd=self.workspace,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.background.append(process)
        deadline = time.monotonic() + 60
        while subprocess.run(["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080"], check=False).returncode:
            assert process.poll() is None, f"`{line}` exited {process.returncode}"
            assert time.monotonic() < deadline, f"`{line}` did not open 127.0.0.1:8080 in 60 s"
            time.sleep(0.5)

    def stop_background(self) -> None:
        for process in self.background:
            process.terminate()
            process.wait(timeout=10)
        self.background.clear()


def tag_the_build(containerd_socket: Path, build: str) -> None:
    """What `kind load docker-image` leaves on a node: the image under the name the page gives it."""
    names = node_images_module.loaded(containerd_socket)
    if TAG in names:
        node_images_module.ctr(containerd_socket, "images", "rm", TAG)
    node_images_module.ctr(containerd_socket, "images", "tag", build, TAG)


def test_the_first_deploy_tutorial_runs_as_written_on_the_real_node(
    node_cluster: cluster.State,
    node_images: dict[str, str],
    mnist_mirror: str,
    workspace: Path,
    tmp_path: Path,
) -> None:
    values = {
        "<a passphrase of yours>": "correct horse battery staple",
        "<your mirror of the MinIO image>": node_images["minio"],
        "<your https mirror of MNIST>": mnist_mirror,
        "<your mirror network, as a CIDR>": f"{mirror_address(mnist_mirror)}/32",
        "<your ReadWriteMany class>": STORAGE_CLASS,
        "<your mirror of the init container image>": node_images["tools"],
    }
    socket = real_node.dirs_of(node_cluster).containerd_socket
    reader = Reader(workspace, tmp_path / "home", socket)
    (tmp_path / "home" / "backend").mkdir(parents=True)
    login_dir = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".pulumi"
    made_login_dir = not login_dir.exists()
    lines = page_lines()
    stood_in = {key for key in STAND_INS for line in lines if line == key or line.startswith(key)}
    assert stood_in == set(STAND_INS), "a line this test stands in for is no longer on the page"
    cleaned_up = False
    ups = 0
    answers: list[str] = []
    try:
        for line in lines:
            if line.startswith(KIND_CREATE):
                # The dev stack's, its store's and its smoke checks' pods all run on the real node.
                for namespace in (STORE_NAMESPACE, DEV_NAMESPACE, SMOKE_NAMESPACE):
                    place_on_the_node(namespace)
            elif line == "kind load docker-image ddp-mnist/trainer:dev":
                tag_the_build(socket, node_images["trainer"])
            elif line in STAND_INS or line.startswith(MINIKUBE_START):
                continue
            elif line == PORT_FORWARD:
                reader.start(line)
            elif line in SECRET_PROMPTS:
                reader.run(line, stdin=SECRET_PROMPTS[line])
            elif line.startswith("curl "):
                answers.append(reader.run(filled(line, values)))
                if "/infer" not in line:
                    continue
                answer = json.loads(answers[-1])
                outputs = {o["name"]: o for o in answer["outputs"]}
                assert (outputs["probabilities"]["datatype"], outputs["probabilities"]["shape"]) == (
                    "FP32",
                    [1, 10],
                )
                assert (outputs["labels"]["datatype"], outputs["labels"]["shape"]) == ("INT64", [1])
            elif line == "pulumi up":
                # The page tells the reader to paste the logs command `up` names while it waits.
                out = reader.run(line)
                waited = re.findall(r"waiting for (\S+ \S+); its logs: (kubectl -n \S+ logs -l \S+)", out)
                assert waited, out[-4000:]
                ups += 1
                expected = (
                    {"Job minio/minio-mnist"}
                    if ups == 1
                    else {
                        f"Job {DEV_NAMESPACE}/ddp-mnist-seed",
                        f"PyTorchJob {DEV_NAMESPACE}/mnist-r1",
                    }
                )
                assert {w for w, _ in waited} >= expected, waited
            elif line == "pulumi destroy --stack dev":
                reader.stop_background()
                # Before the page's clean-up: what the dev path produced, read from what ran.
                check_the_dev_path(node_images["tools"])
                check_the_network_policies(node_images["tools"])
                reader.run(line)
            else:
                reader.run(filled(line, values))
        cleaned_up = True
    except BaseException:
        # The failed containers' logs, before the clean-up below takes their pods.
        print("failed containers' logs:", failed_logs(), sep="\n")
        raise
    else:
        # The answers the page shows after its curls, `…` standing for what differs from run to run.
        (shown,) = [b for b in text_blocks(PAGE.read_text()) if b.startswith('{"name":"mnist","ready"')]
        assert len(answers) == len(shown.splitlines()) == 3
        for expected, got in zip(shown.splitlines(), answers, strict=True):
            assert shown_matches(expected, got.strip()), (expected, got)
    finally:
        reader.stop_background()
        if not cleaned_up:
            for stack in ("dev", "dev-prereqs"):
                subprocess.run(
                    ["pulumi", "destroy", "--stack", stack, "--yes"],
                    cwd=workspace,
                    env=reader.env,
                    check=False,
                )
        for namespace in (DEV_NAMESPACE, STORE_NAMESPACE, SMOKE_NAMESPACE):
            live.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")
        if made_login_dir:
            shutil.rmtree(login_dir, ignore_errors=True)
    left = sorted(p.name for p in (tmp_path / "home" / "backend" / ".pulumi" / "stacks").rglob("*.json"))
    assert left == [], f"the page's clean-up left stacks {left}"
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=workspace,
        capture_output=True,
        text=True,
    )
    assert changed.stdout == "", f"the page's clean-up left the checkout changed: {changed.stdout}"
