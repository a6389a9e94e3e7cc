"""The server's pods: a Deployment's, and an InferenceService's as KServe v0.20.0 creates them.

Deployment (kubernetes/kubernetes 1.33, `pkg/controller/deployment`): a ReplicaSet `<deployment>-<hash>`
whose pods get generateName `<deployment>-<hash>-` and the label `pod-template-hash`; `spec.replicas`
pods (the hash is shown as `<hash>`).

InferenceService, "Standard" deployment mode (kserve/kserve v0.20.0):
- the controller (`pkg/controller/v1beta1/inferenceservice/components/predictor.go` buildObjectMeta,
  buildPredictorResources) builds the predictor's pod from the predictor's PodSpec fields: labels are
  the InferenceService's, the predictor's, `serving.kserve.io/inferenceservice: <name>` and
  `component: predictor`; annotations are the InferenceService's (less its disallowed list) and the
  predictor's; every container gets `INFERENCE_SERVICE_NAME`;
- `reconcilers/deployment/deployment_reconciler.go` createRawDefaultDeployment names the Deployment
  `<name>-predictor`, adds the label `app: isvc.<name>-predictor` and the defaults of setDefaultPodSpec
  (dnsPolicy, restartPolicy Always, terminationGracePeriodSeconds 30, schedulerName, each container's
  terminationMessagePath/Policy and imagePullPolicy, a TCP readiness probe on `kserve-container` only
  when it has none); replicas are `minReplicas` with `serving.kserve.io/autoscalerClass: none`;
- the pod webhook (`pkg/webhook/admission/pod/mutator.go`) acts only on pods labelled
  `serving.kserve.io/inferenceservice`. Of its mutators, the agent (logger/batcher), the metrics
  aggregator (off in the release ConfigMap), the GKE accelerator selector (an annotation) and modelcar
  (OCI URIs) add nothing to a pod that asks for none of them; the storage initializer
  (`storage_initializer_injector.go` InjectStorageInitializer, `pkg/utils/storage.go`
  CreateInitContainerWithConfig) adds the init container `storage-initializer` (image from the
  ConfigMap, `kserve/storage-initializer` by tag, no securityContext) when the predictor has a storage
  URI (`storageUri`, or a `STORAGE_URI` env on a custom container). That container is modelled here,
  so admission refuses such a pod under "restricted" as the API server would.
"""

from __future__ import annotations

import copy

from infra.review.effective.base import Controllers, Effective, EffectivePod, Obj, deriver, pod_from_template

HASH = "<hash>"
ISVC_LABEL = "serving.kserve.io/inferenceservice"
KSERVE_CONTAINER = "kserve-container"
STORAGE_INITIALIZER_IMAGE = "kserve/storage-initializer:v0.20.0"
MODEL_MOUNT = "/mnt/models"
# The predictor's ComponentExtensionSpec and model fields: not part of the pod.
EXTENSION_FIELDS = {
    "minReplicas",
    "maxReplicas",
    "scaleTarget",
    "scaleMetric",
    "scaleMetricType",
    "containerConcurrency",
    "timeout",
    "canaryTrafficPercent",
    "logger",
    "batcher",
    "labels",
    "annotations",
    "deploymentStrategy",
    "autoScaling",
    "storageUris",
    "storageContainerName",
    "workerSpec",
    "model",
    "name",
    *("sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "huggingface", "pmml"),
    *("lightgbm", "paddle"),
}
# Pulumi's wait annotations on the InferenceService (`infra.program.job.serving.WAIT_ANNOTATIONS`, which a
# test holds this equal to: the policy pack reads predictors with this module, in an environment without the
# program's dependencies).
WAIT_ANNOTATIONS = ("pulumi.com/waitFor", "pulumi.com/timeoutSeconds")
# KServe's own list (pkg/constants/constants.go, ServiceAnnotationDisallowedList), and the wait
# annotations the platform stack appends to it in `inferenceservice-config`
# (infra/program/platform/kserve.py).
DISALLOWED_ANNOTATIONS = {
    "autoscaling.knative.dev/min-scale",
    "autoscaling.knative.dev/max-scale",
    "internal.serving.kserve.io/storage-initializer-sourceuri",
    "kubectl.kubernetes.io/last-applied-configuration",
    "modelFormat",
    *WAIT_ANNOTATIONS,
}


def _replica_pods(owner: str, name: str, namespace: str, template: Obj, replicas: int) -> Effective:
    effective = Effective()
    for index in range(replicas):
        pod = pod_from_template(template, None, namespace, f"{name}-{HASH}-")
        pod["metadata"].setdefault("labels", {})["pod-template-hash"] = HASH
        effective.pods.append(EffectivePod(owner, "Replica", index, 0, pod))
    return effective


@deriver("apps", "Deployment")
def derive_deployment(deployment: Obj, controllers: Controllers) -> Effective:
    del controllers
    meta, spec = deployment["metadata"], deployment["spec"]
    name, replicas = meta["name"], int(spec.get("replicas", 1))
    return _replica_pods(f"Deployment/{name}", name, meta.get("namespace", ""), spec["template"], replicas)


def _storage_uri(predictor: Obj) -> str | None:
    for container in predictor.get("containers", []):
        if container.get("name") == KSERVE_CONTAINER:
            for env in container.get("env", []):
                if env.get("name") == "STORAGE_URI":
                    return str(env.get("value", ""))
    model = predictor.get("model") or {}
    return model.get("storageUri")


def _defaults(spec: Obj) -> None:
    """setDefaultPodSpec of the deployment reconciler."""
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for container in spec["containers"]:
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("imagePullPolicy", "IfNotPresent")
        if container["name"] == KSERVE_CONTAINER and "readinessProbe" not in container:
            port = (container.get("ports") or [{"containerPort": 8080}])[0]["containerPort"]
            container["readinessProbe"] = {
                "tcpSocket": {"port": port},
                "timeoutSeconds": 1,
                "periodSeconds": 10,
                "successThreshold": 1,
                "failureThreshold": 3,
            }


def _storage_initializer(spec: Obj, uri: str) -> None:
    """What the pod webhook adds for a storage URI: upstream's init container, as upstream ships it."""
    spec.setdefault("volumes", []).append({"name": "kserve-provision-location", "emptyDir": {}})
    mount = {"name": "kserve-provision-location", "mountPath": MODEL_MOUNT}
    spec["initContainers"] = [
        *spec.get("initContainers", []),
        {
            "name": "storage-initializer",
            "image": STORAGE_INITIALIZER_IMAGE,
            "args": [uri, MODEL_MOUNT],
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "resources": {
                "limits": {"cpu": "1", "memory": "1Gi"},
                "requests": {"cpu": "100m", "memory": "100Mi"},
            },
            "volumeMounts": [mount],
        },
    ]
    for container in spec["containers"]:
        if container["name"] == KSERVE_CONTAINER:
            container.setdefault("volumeMounts", []).append({**mount, "readOnly": True})


def predictor_template(isvc: Obj) -> tuple[str, Obj]:
    """The predictor Deployment's name and pod template, as KServe's controller and webhook make them."""
    meta, predictor = isvc["metadata"], copy.deepcopy(isvc["spec"]["predictor"])
    name = meta["name"]
    deployment = f"{name}-predictor"
    labels = {
        **(meta.get("labels") or {}),
        **(predictor.get("labels") or {}),
        ISVC_LABEL: name,
        "component": "predictor",
        "app": f"isvc.{deployment}",
    }
    annotations = {
        **{k: v for k, v in (meta.get("annotations") or {}).items() if k not in DISALLOWED_ANNOTATIONS},
        **(predictor.get("annotations") or {}),
    }
    spec = {k: v for k, v in predictor.items() if k not in EXTENSION_FIELDS}
    for container in spec.get("containers", []):
        container["env"] = [*container.get("env", []), {"name": "INFERENCE_SERVICE_NAME", "value": name}]
    _defaults(spec)
    uri = _storage_uri(predictor)
    if uri:
        _storage_initializer(spec, uri)
    return deployment, {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}


@deriver("serving.kserve.io", "InferenceService")
def derive_inference_service(isvc: Obj, controllers: Controllers) -> Effective:
    del controllers
    deployment, template = predictor_template(isvc)
    replicas = int(isvc["spec"]["predictor"].get("minReplicas", 1) or 1)
    owner = f"InferenceService/{isvc['metadata']['name']}"
    return _replica_pods(owner, deployment, isvc["metadata"].get("namespace", ""), template, replicas)
