"""The Kubeflow training operator, installed from its vendored overlay build (or assumed present, or
patched in place: operator_patch.py).

By default the component applies `infra/manifests/training-operator`: upstream's
`manifests/overlays/standalone` at the pinned version, built from the pinned module and checked by its
sha256 before it is applied (`infra/program/common/vendored.py`); `operatorSource` names another kustomize
source instead. Either way it is a kustomize Directory named `training-operator-manifests`, so its
children keep their names (`training-operator-manifests:<namespace>/<name>`) and a stack that installed
the operator from upstream's git URL updates nothing but the Directory's `directory` input.

Upstream v1.9.4 appends an init container `init-pytorch` to every PyTorchJob Worker pod
(`pkg/controller.v1/pytorch/initcontainer.go`): image `alpine:3.10` by tag, no securityContext, so a
namespace enforcing Pod Security "restricted" refuses every Worker pod. The operator reads that
container's Go template from `/etc/config/initContainer.yaml` (`--pytorch-init-container-template-file`,
read once, at the first Worker pod) and its image from `--pytorch-init-container-image`; the standalone
overlay sets neither.

Our change is a Pulumi transform on the overlay's Deployment rather than a kustomize overlay in the
repository: the template and images come from stack config (a kustomize file cannot read it), and the
template travels in the Deployment itself (a pod annotation projected to `/etc/config/initContainer.yaml`
by a downwardAPI volume), so it is applied with the operator in one step, needs no object in the
`kubeflow` namespace the overlay creates, and editing it rolls the operator.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pulumi

from infra.program.common.kustomize import Directory
from infra.program.common.meta import pod_security_labels
from infra.program.common.vendored import TRAINING_OPERATOR, vendored
from infra.program.platform import operator_ingress
from infra.program.settings import PROJECT, PROJECT_ROOT, Settings

OPERATOR_DEPLOYMENT = "training-operator"  # name of the Deployment and of its container upstream
TEMPLATE_ANNOTATION = f"{PROJECT}.io/pytorch-init-container-template"
TEMPLATE_DIR = "/etc/config"
TEMPLATE_FILE = "initContainer.yaml"
CRD_TYPE = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
SECRET_TYPE = "kubernetes:core/v1:Secret"
# The overlay's empty Secret that the operator's cert-controller fills (its `--webhook-secret-name` default).
WEBHOOK_CERT_SECRET = "training-operator-webhook-cert"
MAX_TRIES = 100  # upstream's --pytorch-init-container-max-tries default, kept

# Upstream's template (same loop, resources and pull policy), plus a securityContext that meets
# Pod Security "restricted": a fixed non-root uid (alpine's `nobody`, since the image runs as root by
# default), no privilege escalation, no capabilities, RuntimeDefault seccomp, read-only root.
# Fields: {{.InitContainerImage}}, {{.MaxTries}}, {{.MasterAddr}} (the Master's Service name).
#
# The lookup is `getent hosts`, not upstream's `nslookup`. Upstream's alpine:3.10 ran busybox 1.30;
# alpine 3.20 runs busybox 1.36.1, whose nslookup (mirror/busybox tag 1_36_1 `networking/nslookup.c`:
# `add_query_with_search`, `G.exitcode`) sends a query for the short name under every search domain of
# resolv.conf at once and exits 1 when any reply is an error: in a pod (`search <ns>.svc.cluster.local
# svc.cluster.local cluster.local`) the Master's name resolves under the first and is NXDOMAIN under
# the others, so it exits 1 even when the name resolves and the Worker loops until MaxTries and fails.
# `getent hosts NAME` is musl-utils' getent (alpinelinux/aports `main/musl/getent.c`; the alpine image
# has it: `scripts/mkimg.minirootfs.sh` installs libc-utils, which depends on musl-utils): it calls
# gethostbyname2 (AF_INET6, then AF_INET) and exits 0 on an answer, 2 on none. musl 1.2.5 (alpine 3.20)
# `src/network/lookup_name.c` `name_from_dns_search` tries the search domains in order (names with
# fewer dots than ndots), stops at the first that answers and moves on past NXDOMAIN, then the name as
# given: the exit status says whether the name resolves, as the resolver the trainer uses would.
RESTRICTED_INIT_CONTAINER_TEMPLATE = """\
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
  securityContext:
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
    readOnlyRootFilesystem: true
    runAsNonRoot: true
    runAsUser: 65534
    runAsGroup: 65534
    seccompProfile:
      type: RuntimeDefault
  command: ['sh', '-c', 'err=1;for i in $(seq {{.MaxTries}}); do if getent hosts {{.MasterAddr}}; then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err']
"""


# Relative paths are read from PROJECT_ROOT, the directory holding Pulumi.yaml. `main: infra/` makes
# infra/ the working directory of the program and of the providers Pulumi starts for it
# (pulumi/pulumi `getPwdMain`: a `main` directory becomes the pwd), and the Kubernetes provider hands
# `directory` to kustomize on the local filesystem as is (pulumi/pulumi-kubernetes v4.32.0
# `provider/pkg/provider/kustomize/v2/directory.go`: `k.Run(kfilesys.MakeFsOnDisk(), directory)`),
# so a relative path would be read from infra/.


def kustomize_source(source: str) -> str:
    """A kustomize source as the provider must get it: a local path written relative to the project
    root (`./...`, `../...`) made absolute; an absolute path or a git URL unchanged."""
    if source.startswith(("./", "../")) and "?ref=" not in source:
        return os.path.normpath(PROJECT_ROOT / source)
    return source


def operator_source(settings: Settings) -> str:
    """Where the operator's manifests come from: the override, else the vendored build (checked)."""
    return kustomize_source(settings.operator_source) or vendored(TRAINING_OPERATOR).verified()


TEMPLATE_VOLUME = "pytorch-init-container-template"


def restricted_template(image: str | None = None) -> str:
    """The restricted init container template; with `image`, that image written in place of
    `{{.InitContainerImage}}`, for an operator whose `--pytorch-init-container-image` this project
    does not set (upstream's default is alpine:3.10: v1.9.4 `pkg/config/config.go`)."""
    if image is None:
        return RESTRICTED_INIT_CONTAINER_TEMPLATE
    return RESTRICTED_INIT_CONTAINER_TEMPLATE.replace("{{.InitContainerImage}}", image)


def template_volume() -> dict[str, Any]:
    """The pod volume projecting the template annotation to `initContainer.yaml` (downward API)."""
    field = f"metadata.annotations['{TEMPLATE_ANNOTATION}']"
    return {
        "name": TEMPLATE_VOLUME,
        "downwardAPI": {"items": [{"path": TEMPLATE_FILE, "fieldRef": {"fieldPath": field}}]},
    }


def template_mount() -> dict[str, Any]:
    """The operator container's mount of `template_volume` at `/etc/config`, where upstream's
    `--pytorch-init-container-template-file` looks by default (v1.9.4 `pkg/config/config.go`)."""
    return {"name": TEMPLATE_VOLUME, "mountPath": TEMPLATE_DIR, "readOnly": True}


def configure_deployment(props: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The operator Deployment with our init container template and images (a new dict)."""
    import copy

    deployment = copy.deepcopy(props)
    template = deployment["spec"]["template"]
    template.setdefault("metadata", {}).setdefault("annotations", {})[TEMPLATE_ANNOTATION] = (
        restricted_template()
    )
    pod = template["spec"]
    pod.setdefault("volumes", []).append(template_volume())
    container = next(c for c in pod["containers"] if c["name"] == OPERATOR_DEPLOYMENT)
    container.setdefault("volumeMounts", []).append(template_mount())
    container["args"] = [
        *container.get("args", []),
        f"--pytorch-init-container-image={settings.operator_init_container_image}",
        f"--pytorch-init-container-template-file={TEMPLATE_DIR}/{TEMPLATE_FILE}",
        # PyTorchJob alone: the other kinds' controllers (MPIJob's exec into pods, creates Roles,
        # RoleBindings and ServiceAccounts) do not start, and their rights are dropped (`narrowed_role`).
        "--enable-scheme=pytorchjob",
    ]
    if settings.operator_image:
        container["image"] = settings.operator_image
    restrict(pod, container)
    return deployment


# The operator's image is distroless/static (v1.9.4 `build/images/training-operator/Dockerfile`), which
# runs as root unless told: distroless's `nonroot` uid, a static binary that reads its mounted
# certificates (mode 0644) and the template, and writes nothing on disk.
OPERATOR_UID = 65532
OPERATOR_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}}


def restrict(pod: dict[str, Any], container: dict[str, Any]) -> None:
    """The operator's pod and container brought to Pod Security "restricted" (upstream sets only
    allowPrivilegeEscalation: false), with requests and a memory limit (upstream sets none)."""
    pod["securityContext"] = {
        **pod.get("securityContext", {}),
        "runAsNonRoot": True,
        "runAsUser": OPERATOR_UID,
        "runAsGroup": OPERATOR_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container["securityContext"] = {
        **container.get("securityContext", {}),
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    container.setdefault("resources", OPERATOR_RESOURCES)


# What only the other kinds' controllers use (v1.9.4 `pkg/controller.v1/mpi/mpijob_controller.go`: exec
# into the launcher, its Role, RoleBinding and ServiceAccount) and the other kinds themselves.
OTHER_KINDS = ("tfjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs")
UNUSED_RESOURCES = frozenset(
    {"pods/exec", "roles", "rolebindings", "serviceaccounts"}
    | {f"{kind}{sub}" for kind in OTHER_KINDS for sub in ("", "/status", "/finalizers")}
)


def narrowed_role(props: dict[str, Any]) -> dict[str, Any]:
    """The operator's ClusterRole without the rules only the disabled kinds' controllers use."""
    rules = []
    for rule in props.get("rules") or []:
        kept = [r for r in rule.get("resources") or [] if r not in UNUSED_RESOURCES]
        if kept:
            rules.append({**rule, "resources": kept})
    return {**props, "rules": rules}


def restricted_namespace(props: dict[str, Any]) -> dict[str, Any]:
    """The overlay's namespace labelled to enforce (warn, audit) Pod Security "restricted", which the
    operator's pod now meets."""
    labels = pod_security_labels("restricted")
    metadata = dict(props.get("metadata") or {})
    metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
    return {**props, "metadata": metadata}


def kept_crd(args: pulumi.ResourceTransformArgs, adopt: bool) -> pulumi.ResourceTransformResult:
    """A CRD of an overlay: kept when the stack is destroyed, and with `adopt` imported by its name.

    The overlay's objects are children of the kustomize component (pulumi-kubernetes
    `provider/pkg/provider/kustomize/v2`, registered under the Directory, URN
    `...training-operator-manifests:<crd name>`), so a top-level `pulumi import` would make another
    resource; setting `import` in the transform adopts the kept CRD as that very child. The Python SDK
    carries a transform's `import_` back to the engine (`pulumi/runtime/_callbacks.py`,
    TransformResourceOptions `import`), and the import reads the CRD by its name (cluster-scoped).
    An import is followed by an ordinary diff and update (pulumi 3.174 and later), which applies the
    overlay's CRD over the kept one; a later `pulumi up` with the switch still on imports nothing
    again (the state's import ID is the same). (Read at pulumi-kubernetes v4.32.0, pulumi v3.259.0 and
    the Python SDK 3.272.0; see docs/ENGINE.md.)
    """
    props: dict[str, Any] = dict(args.props)
    name = (props.get("metadata") or {}).get("name")
    adopt_opts = pulumi.ResourceOptions(retain_on_delete=True, import_=name if adopt and name else None)
    return pulumi.ResourceTransformResult(
        props=props, opts=pulumi.ResourceOptions.merge(args.opts, adopt_opts)
    )


def cert_secret(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult:
    """The webhook certificate Secret: the overlay creates it empty and the operator's cert-controller
    writes its data (v1.9.4 `pkg/cert/cert.go`), so the stack leaves `data` alone. Without this, every
    `pulumi up` of the pinned provider replaced the Secret (its live data differs from the overlay's), which
    deletes the certificates the running webhook serves with (found by the local cluster tier; see
    docs/ENGINE.md)."""
    return pulumi.ResourceTransformResult(
        props=args.props,
        opts=pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(ignore_changes=["data"])),
    )


def operator_transform(
    settings: Settings,
) -> Callable[[pulumi.ResourceTransformArgs], pulumi.ResourceTransformResult | None]:
    """A transform for the overlay's children: rewrites the operator Deployment, and keeps the CRDs when
    the stack is destroyed (deleting a CRD deletes every object of its kind in the cluster, every
    team's PyTorchJobs included) or adopts kept ones (`operatorAdoptCrds`), and leaves the webhook
    certificate's data to the operator. Everything else passes unchanged."""

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        props: dict[str, Any] = dict(args.props)
        if args.type_ == CRD_TYPE:
            return kept_crd(args, settings.operator_adopt_crds)
        if args.type_ == SECRET_TYPE and (props.get("metadata") or {}).get("name") == WEBHOOK_CERT_SECRET:
            return cert_secret(args)
        if args.type_ == "kubernetes:core/v1:Namespace":
            return pulumi.ResourceTransformResult(props=restricted_namespace(props), opts=args.opts)
        name = (props.get("metadata") or {}).get("name")
        if (
            args.type_ == "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
            and name == OPERATOR_DEPLOYMENT
        ):
            return pulumi.ResourceTransformResult(props=narrowed_role(props), opts=args.opts)
        if args.type_ != "kubernetes:apps/v1:Deployment":
            return None
        if (props.get("metadata") or {}).get("name") != OPERATOR_DEPLOYMENT:
            return None
        return pulumi.ResourceTransformResult(props=configure_deployment(props, settings), opts=args.opts)

    return transform


class TrainingOperator(pulumi.ComponentResource):
    """Applies the operator's standalone overlay (CRDs, controller, webhook) with the caller's provider,
    its Deployment configured by `operator_transform`.

    The Kubernetes provider applies server-side by default, as the upstream install instructions ask.
    Everything that creates a PyTorchJob depends on this component, so the CRD exists first.
    """

    def __init__(self, name: str, settings: Settings, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PROJECT}:operator:TrainingOperator", name, {}, opts)
        self.source = operator_source(settings)
        manifests = Directory(
            f"{name}-manifests",
            directory=self.source,
            opts=pulumi.ResourceOptions(parent=self, transforms=[operator_transform(settings)]),
        )
        if settings.operator_source:
            operator_ingress.not_read("operatorSource", settings.operator_source, "the training operator")
        else:
            operator_ingress.apply(
                name,
                settings,
                "operator",
                operator_ingress.read_objects(str(vendored(TRAINING_OPERATOR).manifest)),
                pulumi.ResourceOptions(parent=self, depends_on=[manifests]),
            )
        self.register_outputs({"source": self.source})
