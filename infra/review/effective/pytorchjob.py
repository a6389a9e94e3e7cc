"""A PyTorchJob's pods and Services as the Kubeflow training operator v1.9.4 creates them.

Upstream (kubeflow/trainer, tag v1.9.4):
- `pkg/controller.v1/common/pod.go` (`createNewPod`): one pod per replica, named `<job>-<type>-<i>`
  (`GenGeneralName`), the template's labels plus `training.kubeflow.org/{operator-name,job-name,
  replica-type,replica-index}` and `job-role=master` on the Master; no hostname or subdomain;
- `pkg/core/pod.go` (`SetRestartPolicy`): replica restartPolicy `ExitCode` becomes pod `Never`;
- `pkg/apis/kubeflow.org/v1/pytorch_defaults.go`: in-memory defaults (restartPolicy OnFailure,
  nprocPerNode "auto", the `pytorchjob-port` 23456 on the `pytorch` container);
- `pkg/controller.v1/pytorch/envvar.go`, `master.go`: env appended to every container of
  `spec.containers` (never init containers): PYTHONUNBUFFERED, and with a Master the MASTER_*/PET_MASTER_*,
  WORLD_SIZE, RANK/PET_NODE_RANK, then PET_NPROC_PER_NODE and PET_NNODES;
- `pkg/controller.v1/pytorch/initcontainer.go`: with a Master, every Worker pod gets the init containers
  of the operator's Go template (`{{.MasterAddr}}` = `<job>-master-0`), appended after its own;
- `pkg/controller.v1/common/service.go`: one headless Service per replica, named like the pod,
  selecting it by the four operator labels, with the `pytorch` container's ports.
Not modelled: elastic policies (this project renders none) and gang-scheduling labels.
"""

from __future__ import annotations

import html
import re
from typing import Any

from infra.program.common import yamlio
from infra.review.effective.base import Controllers, Effective, EffectivePod, Obj, deriver, pod_from_template

CONTAINER = "pytorch"
PORT_NAME = "pytorchjob-port"
DEFAULT_PORT = 23456
LABEL = "training.kubeflow.org/"
REPLICA_ORDER = ("Master", "Worker")

# Upstream's built-in template (initcontainer.go, v1.9.4), used when no template file is mounted.
UPSTREAM_INIT_CONTAINER_TEMPLATE = """
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  command: ['sh', '-c', 'err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}}; then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err']"""
UPSTREAM_INIT_CONTAINER_IMAGE = "alpine:3.10"  # --pytorch-init-container-image default


def render_init_containers(template: str, master_addr: str, image: str, max_tries: int) -> list[Obj]:
    """The operator's `GetInitContainer`: the Go template executed (html/template escapes the values),
    then the YAML list unmarshalled into containers."""
    fields = {"MasterAddr": master_addr, "InitContainerImage": image, "MaxTries": str(max_tries)}

    def value(match: re.Match[str]) -> str:
        text = fields[match.group(1)]
        return html.escape(text, quote=True).replace("&#x27;", "&#39;").replace("+", "&#43;")

    rendered = re.sub(r"\{\{\s*\.(MasterAddr|InitContainerImage|MaxTries)\s*\}\}", value, template)
    containers = yamlio.load(rendered)
    if not isinstance(containers, list):
        raise ValueError("the init container template must be a YAML list of containers")
    return containers


def _nproc(spec: Obj) -> str:
    return str(spec.get("nprocPerNode") or "auto")


def _port(replica: Obj) -> int:
    container = next(c for c in replica["template"]["spec"]["containers"] if c["name"] == CONTAINER)
    return next(
        (int(p["containerPort"]) for p in container.get("ports", []) if p.get("name") == PORT_NAME), 0
    )


def operator_env(job: Obj, replica_type: str, index: int) -> list[Obj]:
    """The env the operator appends to each container of a replica's pod, in its order."""
    spec = job["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    total = sum(int(r.get("replicas", 1)) for r in replicas.values())
    nproc = _nproc(spec)
    env = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
    if "Master" in replicas:
        port = str(_port(replicas["Master"]) or DEFAULT_PORT)
        master = f"{job['metadata']['name']}-master-0"
        rank = str(index if replica_type == "Master" else index + 1)
        env += [
            {"name": "MASTER_PORT", "value": port},
            {"name": "PET_MASTER_PORT", "value": port},
            {"name": "MASTER_ADDR", "value": master},
            {"name": "PET_MASTER_ADDR", "value": master},
            {"name": "WORLD_SIZE", "value": str(total * (int(nproc) if nproc.isdigit() else 1))},
            {"name": "RANK", "value": rank},
            {"name": "PET_NODE_RANK", "value": rank},
        ]
    env += [{"name": "PET_NPROC_PER_NODE", "value": nproc}, {"name": "PET_NNODES", "value": str(total)}]
    return env


def _labels(job_name: str, replica_type: str, index: int) -> dict[str, str]:
    return {
        f"{LABEL}operator-name": "pytorchjob-controller",
        f"{LABEL}job-name": job_name.replace("/", "-"),
        f"{LABEL}replica-type": replica_type.lower(),
        f"{LABEL}replica-index": str(index),
    }


def _with_default_port(template: Obj) -> None:
    containers = template["spec"]["containers"]
    target = next((c for c in containers if c["name"] == CONTAINER), containers[0])
    if not any(p.get("name") == PORT_NAME for p in target.get("ports", [])):
        target.setdefault("ports", []).append({"name": PORT_NAME, "containerPort": DEFAULT_PORT})


def _service(job: Obj, replica_type: str, index: int, replica: Obj) -> Obj:
    name = job["metadata"]["name"]
    labels = _labels(name, replica_type, index)
    container = next(c for c in replica["template"]["spec"]["containers"] if c["name"] == CONTAINER)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{name}-{replica_type.lower()}-{index}",
            "namespace": job["metadata"].get("namespace", ""),
            "labels": labels,
        },
        "spec": {
            "clusterIP": "None",
            "selector": labels,
            "ports": [
                {"name": p["name"], "port": int(p["containerPort"])} for p in container.get("ports", [])
            ],
        },
    }


@deriver("kubeflow.org", "PyTorchJob")
def derive(job: Obj, controllers: Controllers) -> Effective:
    name = job["metadata"]["name"]
    namespace = job["metadata"].get("namespace", "")
    replicas: dict[str, Any] = job["spec"]["pytorchReplicaSpecs"]
    effective = Effective()
    for replica_type in sorted(replicas, key=lambda t: REPLICA_ORDER.index(t) if t in REPLICA_ORDER else 9):
        replica = replicas[replica_type]
        _with_default_port(replica["template"])
        for index in range(int(replica.get("replicas", 1))):
            pod_name = f"{name}-{replica_type.lower()}-{index}"
            pod = pod_from_template(replica["template"], pod_name, namespace)
            labels = pod["metadata"].setdefault("labels", {})
            labels.update(_labels(name, replica_type, index))
            if replica_type == "Master":
                labels[f"{LABEL}job-role"] = "master"
            policy = replica.get("restartPolicy", "OnFailure")
            pod["spec"]["restartPolicy"] = "Never" if policy == "ExitCode" else policy
            env = operator_env(job, replica_type, index)
            for container in pod["spec"]["containers"]:
                container["env"] = [*container.get("env", []), *env]
            if replica_type == "Worker" and "Master" in replicas and controllers.operator_init_template:
                pod["spec"]["initContainers"] = [
                    *pod["spec"].get("initContainers", []),
                    *render_init_containers(
                        controllers.operator_init_template,
                        f"{name}-master-0",
                        controllers.operator_init_image,
                        controllers.operator_max_tries,
                    ),
                ]
            rank = index if replica_type == "Master" else index + 1
            effective.pods.append(EffectivePod(f"PyTorchJob/{name}", replica_type, index, rank, pod))
            effective.services.append(_service(job, replica_type, index, replica))
    return effective
