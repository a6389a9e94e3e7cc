"""Kueue in the local cluster: its manifests from the pinned module, its controller as a stand-in.

The manifests are `config/default` of the module the `kueue` part builds (what its release manifest is
built from, `make artifacts` upstream), applied as they are but for the on-demand visibility API: its
APIServices are left out (an aggregated API nobody serves stalls namespace deletion) and its server is
off (standins.py). The supervisor runs the controller's Deployment as a local process; `install` returns
once its webhooks answer, since from then on they judge every Job and pod the cluster admits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable

import yaml

from infra.localcluster.build import module_dir
from infra.localcluster.cluster import ClusterError, State
from infra.localcluster.kube import Obj
from infra.localcluster.parts import PARTS
from infra.program.common import yamlio

MODULE = "sigs.k8s.io/kueue"
NAMESPACE = "kueue-system"
LEFT_OUT = frozenset({"APIService"})
READY_TIMEOUT_S = 120
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def manifests() -> list[Obj]:
    """Kueue's objects as `kubectl kustomize config/default` renders them from the pinned module."""
    module = module_dir(PARTS["kueue"].directory, MODULE)
    rendered = _kubectl(["kustomize", str(module / "config" / "default")], None)
    return [d for d in yamlio.load_all(rendered) if d and d["kind"] not in LEFT_OUT]


def _kubectl(args: list[str], kubeconfig: str | None, stdin: str | None = None) -> str:
    if shutil.which("kubectl") is None:
        raise ClusterError("kueue: no kubectl on PATH (it renders and applies Kueue's manifests)")
    env = {**os.environ, **({"KUBECONFIG": kubeconfig} if kubeconfig else {})}
    done = subprocess.run(
        ["kubectl", *args], input=stdin, capture_output=True, text=True, env=env, check=False, timeout=120
    )
    if done.returncode != 0:
        raise ClusterError(f"kueue: kubectl {args[0]} failed: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


def _probe_job() -> Obj:
    """A queued Job that Kueue's webhooks must mutate and validate (created as a server-side dry run)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "kueue-probe", "namespace": "default", "labels": {QUEUE_LABEL: "probe"}},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}],
                }
            }
        },
    }


def install(state: State, say: Callable[[str], None] = print) -> float:
    """Apply Kueue to the running cluster and wait until its webhooks answer; the seconds it took."""
    started = time.monotonic()
    kubeconfig = str(state.kubeconfig)
    objects = manifests()
    _kubectl(
        ["apply", "--server-side", "--field-manager=ddp-mnist-local", "-f", "-"],
        kubeconfig,
        "\n---\n".join(yaml.safe_dump(o) for o in objects),
    )
    deadline = started + READY_TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        try:
            _kubectl(
                ["create", "--dry-run=server", "-o", "name", "-f", "-"],
                kubeconfig,
                yaml.safe_dump(_probe_job()),
            )
            seconds = round(time.monotonic() - started, 1)
            say(f"kueue: {len(objects)} objects applied, webhooks answering in {seconds} s")
            return seconds
        except ClusterError as error:
            last = str(error)
        time.sleep(1)
    log = state.log(f"pod-{NAMESPACE}-kueue-controller-manager")
    raise ClusterError(f"kueue: webhooks not answering after {READY_TIMEOUT_S} s ({last}; see {log})")


def queue_objects(cluster_queue: str, flavor: str, cpu: str, memory: str) -> list[Obj]:
    """One ResourceFlavor and a ClusterQueue open to every namespace, covering cpu and memory."""
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": cpu},
                                    {"name": "memory", "nominalQuota": memory},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    ]
