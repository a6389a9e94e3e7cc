"""The dev path's results on the real node, read from what ran (tests/e2e_node/test_tutorial.py checks
them between the tutorial's query and its clean-up): MinIO on the node with the mirror's MNIST in its
bucket, the PyTorchJob's Master and Worker succeeded on the node, rank 0's accuracy from its log read
through the kubelet, the export in MinIO read through its Service with the stack's keys, and a standard
client's answers (tritonclient, binary tensors by default) from the model server through its ClusterIP,
on the 10,000 MNIST test images.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any

import boto3
import numpy as np
import tritonclient.http as triton

from infra.localcluster.node.config import NODE_NAME
from infra.localcluster.node.mirror import FILES
from tests.e2e import live
from tests.e2e_local import scenario
from tests.e2e_node.conftest import MNIST, place_on_the_node
from tests.serve.test_serve import test_images

DEV_NAMESPACE = "ddp-mnist-dev"
STORE_NAMESPACE = "minio"


def pods_on(namespace: str, selector: str = "") -> list[dict[str, Any]]:
    return live.items("pods", namespace, selector)


def service_address(name: str, namespace: str) -> tuple[str, list[dict[str, Any]]]:
    """`clusterIP:port` of a Service (kube-proxy's rules take it to a pod) and the pods it selects."""
    service = live.get("service", name, namespace)
    selector = ",".join(f"{k}={v}" for k, v in service["spec"]["selector"].items())
    address = f"{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}"
    return address, pods_on(namespace, selector)


def bucket_objects(address: str) -> dict[str, bytes]:
    """Every object of the bucket `mnist`, read through MinIO's Service with the stack's keys."""
    s3 = boto3.client(
        "s3",
        endpoint_url=f"http://{address}",
        aws_access_key_id=scenario.KEYS[0],
        aws_secret_access_key=scenario.KEYS[1],
        region_name="us-east-1",
    )
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="mnist").get("Contents", [])]
    return {key: s3.get_object(Bucket="mnist", Key=key)["Body"].read() for key in keys}


def served_accuracy(url: str) -> float:
    """tritonclient, with its defaults, through the Service's ClusterIP: the share of the 10,000 test
    images whose served label is the true one."""
    images, labels = test_images()
    client = triton.InferenceServerClient(url=url)
    assert client.is_server_ready() and client.is_model_ready("mnist")
    served: list[int] = []
    for start in range(0, len(images), 256):
        batch = images[start : start + 256].numpy()
        tensor = triton.InferInput("images", list(batch.shape), "UINT8")
        tensor.set_data_from_numpy(batch)
        result = client.infer("mnist", [tensor], outputs=[triton.InferRequestedOutput("labels")])
        served.extend(result.as_numpy("labels").tolist())
    client.close()
    return float(np.mean(np.array(served) == labels.numpy()))


ACCURACY = re.compile(r"test_acc=(\d+\.\d+)%")


def check_the_prerequisites() -> str:
    """MinIO runs on the real node and its bucket holds the mirror's four files, each as `../shared`
    has it; MinIO's Service address."""
    store, (minio,) = service_address("minio", STORE_NAMESPACE)
    assert minio["spec"]["nodeName"] == NODE_NAME
    filled = bucket_objects(store)
    for name in FILES:
        (key,) = [k for k in filled if k.endswith(name)]
        assert hashlib.sha256(filled[key]).digest() == hashlib.sha256((MNIST / name).read_bytes()).digest()
    return store


def check_the_dev_path(init_image: str) -> None:
    """What the dev stack's `up` produced, read from what ran: the PyTorchJob's Master and Worker
    succeeded on the real node, the Worker's init container (`init_image`, whose user is root) having
    run under the pod's runAsNonRoot as its runAsUser, rank 0 reached 99%, the export is in MinIO, and
    the model server, Ready by its kubelet probes, answers tritonclient through its ClusterIP with 99%
    on the 10,000 test images."""
    store = check_the_prerequisites()
    job_pods = pods_on(DEV_NAMESPACE, "training.kubeflow.org/job-name")
    roles = {p["metadata"]["labels"]["training.kubeflow.org/replica-type"]: p for p in job_pods}
    assert sorted(roles) == ["master", "worker"]
    assert {p["spec"]["nodeName"] for p in job_pods} == {NODE_NAME}
    assert {p["status"]["phase"] for p in job_pods} == {"Succeeded"}
    # The kubelet refuses a root image under runAsNonRoot only when the pod names no runAsUser
    # (kubernetes v1.33.13 pkg/kubelet/kuberuntime/security_context_others.go, verifyRunAsNonRoot).
    worker = roles["worker"]
    assert (
        worker["spec"]["securityContext"]["runAsNonRoot"] and worker["spec"]["securityContext"]["runAsUser"]
    )
    (init,) = worker["status"]["initContainerStatuses"]
    assert init["image"].endswith(init_image.split("@")[1]) or init["imageID"].endswith(
        init_image.split("@")[1]
    )
    assert init["state"]["terminated"]["exitCode"] == 0
    logs = live.kubectl("logs", "-n", DEV_NAMESPACE, roles["master"]["metadata"]["name"], "-c", "pytorch")
    accuracies = [float(a) for a in ACCURACY.findall(logs)]
    assert accuracies and accuracies[-1] >= 99.0, logs[-3000:]

    exported = {k: v for k, v in bucket_objects(store).items() if "/models/" in k}
    (sums,) = [k for k in exported if k.endswith("/SHA256SUMS")]
    (model,) = [k for k in exported if k.endswith("/model.pt")]
    assert f"{hashlib.sha256(exported[model]).hexdigest()}  model.pt" in exported[sums].decode()

    address, (server,) = service_address("mnist-serve", DEV_NAMESPACE)
    assert server["spec"]["nodeName"] == NODE_NAME
    assert {c["type"]: c["status"] for c in server["status"]["conditions"]}["Ready"] == "True"
    accuracy = served_accuracy(address)
    print(f"served accuracy on the 10,000 test images: {accuracy:.4f}")
    assert accuracy >= 0.99


PROBE_NAMESPACE = "node-probe"
SETTLE_S = 10


def connects(namespace: str, address: str, image: str) -> bool:
    """Whether a restricted pod in `namespace`, SETTLE_S after it started, opens a TCP connection to
    `address` (`ip:port`) within 5 s: its bash's exit code, as the kubelet reports it (0 connected; 124
    timed out, 1 refused)."""
    host, port = address.rsplit(":", 1)
    name = f"probe-{host.replace('.', '-')}-{port}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    # After SETTLE_S: the engine writes a new pod's rules after its event (kube-router
                    # syncs on it), so its very first packets may precede them.
                    "command": [
                        "bash",
                        "-c",
                        f"sleep {SETTLE_S}; timeout 5 bash -c '</dev/tcp/{host}/{port}'",
                    ],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }
    live.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    try:
        deadline = time.monotonic() + 90
        while True:
            got = live.get("pod", name, namespace)
            if got.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                break
            assert time.monotonic() < deadline, f"probe {name} did not end in 90 s: {got.get('status')}"
            time.sleep(1)
        assert got["spec"]["nodeName"] == NODE_NAME
        (status,) = got["status"]["containerStatuses"]
        return bool(status["state"]["terminated"]["exitCode"] == 0)
    finally:
        live.kubectl("delete", "pod", name, "-n", namespace, "--ignore-not-found", "--wait=false")


def check_the_network_policies(tools: str) -> None:
    """The dev stacks' NetworkPolicies as the real node's engine (kube-router) enforces them: a pod of
    another namespace does not reach the model server (its policy admits the stack's namespace alone),
    though it reaches MinIO (whose policy admits every namespace's pods on 9000: the probe and the
    network work); a pod of the job's namespace, or of MinIO's, that no policy names reaches nothing,
    MinIO included (each namespace's default deny). The allowed paths (the fill to its mirror and to
    MinIO, seed and server to MinIO, rank to rank, the kubelet's probes) are the dev path's own, which
    succeeded under the same engine."""
    place_on_the_node(PROBE_NAMESPACE)
    try:
        server, _ = service_address("mnist-serve", DEV_NAMESPACE)
        store, _ = service_address("minio", STORE_NAMESPACE)
        assert connects(PROBE_NAMESPACE, store, tools), "a pod of another namespace cannot reach MinIO"
        assert not connects(PROBE_NAMESPACE, server, tools), "the model server admits another namespace"
        assert not connects(DEV_NAMESPACE, store, tools), "the job namespace's default deny lets a pod out"
        assert not connects(STORE_NAMESPACE, store, tools), "MinIO's namespace's default deny lets a pod out"
    finally:
        live.kubectl("delete", "namespace", PROBE_NAMESPACE, "--ignore-not-found", "--wait=false")
