"""The real node's ReadWriteMany storage: Rancher's local-path-provisioner v0.0.30 (parts/local-path-
provisioner) as a pod, and its StorageClass STORAGE_CLASS.

It runs with a `sharedFileSystemPath` (upstream's provisioner.go, `isSharedFilesystem`): every volume is
a directory under one host path, made by a helper pod, with no node affinity and any access mode, which
is what a file store's export looks like from a single node. (This kernel has no NFS client, so
csi-driver-nfs, the dev stack's provisioner, cannot mount here.) The helper pods run the tools image
(`mkdir -m 0777`, `rm -rf`, upstream's scripts) on this node alone; the StorageClass binds at once
(`Immediate`), so a claim is Bound before any pod of a stack's needs it.

Like CoreDNS (addons.py), the provisioner reaches the API server through the node's relay with a
kubeconfig of its own identity, `system:local-path-provisioner`, with upstream's rights
(deploy/local-path-storage.yaml).
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from infra.localcluster.cluster import State
from infra.localcluster.kube import Client, Obj
from infra.localcluster.node.addons import (
    add_on_deployment,
    apply_and_wait,
    kubeconfig_secret,
    user_role,
)
from infra.localcluster.node.config import NODE_LABEL

NAMESPACE = "local-path-storage"
NAME = "local-path-provisioner"
USER = "system:local-path-provisioner"
PROVISIONER = "ddp-mnist.local/local-path"
STORAGE_CLASS = "local-path-shared"
CONFIG = "local-path-config"

SETUP = '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n'
TEARDOWN = '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n'


def _helper_pod(tools: str) -> Obj:
    """The helper pod's template: on this node only (the provisioner adds a toleration of every taint,
    and KWOK's nodes would run nothing), root in the tools image (the volumes' parent is root's). The
    image is the template's: v0.0.30 keeps `--helper-image` but never reads it (provisioner.go)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "helper-pod"},
        "spec": {
            "nodeSelector": {NODE_LABEL[0]: NODE_LABEL[1]},
            "automountServiceAccountToken": False,
            "containers": [{"name": "helper-pod", "image": tools, "imagePullPolicy": "IfNotPresent"}],
        },
    }


def _rbac() -> list[tuple[str, Obj]]:
    cluster_rules = [
        {
            "apiGroups": [""],
            "resources": ["nodes", "persistentvolumeclaims", "configmaps", "pods", "pods/log"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": [""],
            "resources": ["persistentvolumes"],
            "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list", "watch"]},
    ]
    pod_rules = [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
        }
    ]
    return user_role(USER, cluster_rules) + user_role(USER, pod_rules, NAMESPACE)


def _deployment(image: str, tools: str) -> Obj:
    args = [
        "--debug",
        "start",
        "--kubeconfig=/etc/local-path/kubeconfig",
        "--config=/etc/local-path/config.json",
        f"--namespace={NAMESPACE}",
        f"--provisioner-name={PROVISIONER}",
        f"--helper-image={tools}",
        f"--service-account-name={NAME}",
        f"--configmap-name={CONFIG}",
    ]
    pod = {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": NAME,
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "args": args,
                "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "config", "mountPath": "/etc/local-path", "readOnly": True}],
            }
        ],
        "volumes": [
            {
                "name": "config",
                "projected": {
                    "sources": [
                        {
                            "configMap": {
                                "name": CONFIG,
                                "items": [{"key": "config.json", "path": "config.json"}],
                            }
                        },
                        {"secret": {"name": f"{NAME}-kubeconfig"}},
                    ]
                },
            }
        ],
    }
    return add_on_deployment(NAMESPACE, NAME, {"app": NAME}, pod)


def objects(state: State, image: str, tools: str, shared: Path) -> list[tuple[str, Obj]]:
    """(collection path, object) of the provisioner, its helper pods' template and its StorageClass,
    in the order they are applied; its volumes are directories under `shared`."""
    ns = f"/api/v1/namespaces/{NAMESPACE}"
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG, "namespace": NAMESPACE},
        "data": {
            "config.json": json.dumps({"sharedFileSystemPath": str(shared)}),
            "setup": SETUP,
            "teardown": TEARDOWN,
            "helperPod.yaml": yaml.safe_dump(_helper_pod(tools)),
        },
    }
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
    }
    return [
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        *_rbac(),
        (f"{ns}/serviceaccounts", account),
        (f"{ns}/configmaps", config_map),
        (f"{ns}/secrets", kubeconfig_secret(state, USER, f"{NAME}-kubeconfig", NAMESPACE)),
        (f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments", _deployment(image, tools)),
        ("/apis/storage.k8s.io/v1/storageclasses", storage_class),
    ]


def install(state: State, client: Client, image: str, tools: str, shared: Path) -> float:
    """Apply the provisioner and wait until its pod is ready; the seconds it took."""
    shared.mkdir(parents=True, exist_ok=True)
    return apply_and_wait(client, objects(state, image, tools, shared), "the volume provisioner")
