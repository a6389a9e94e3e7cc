"""The real parts the local cluster tier runs, each built from one pinned wrapper Go module.

A wrapper (`parts/<name>/go.mod` + `go.sum`, committed) pins one upstream release and every module it
builds with, so the parts' Kubernetes libraries never mix. Each binary lands in a cache outside the
repository under a key of everything that decides it (the wrapper's files, this spec, the Go version),
so it is rebuilt only when its pin changes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PARTS_DIR = Path(__file__).resolve().parent / "parts"

KUBERNETES_VERSION = "v1.33.13"
PULUMI_VERSION = "3.274.1"
# The provider plugin's version must equal the pulumi-kubernetes Python package's (it asks for exactly
# that plugin): pyproject.toml pins pulumi-kubernetes==KUBERNETES_PROVIDER_VERSION.
KUBERNETES_PROVIDER_VERSION = "4.25.0"


@dataclass(frozen=True)
class Part:
    """One wrapper module and the binaries it builds."""

    name: str
    binaries: dict[str, str]  # output file name -> Go package
    tags: str = ""
    ldflags: tuple[str, ...] = ()
    # Files the build writes into its copy of the wrapper before `go build` (path -> text), from the
    # module cache directory of a required module (see `module_files`).
    generated: Callable[[Callable[[str], Path]], dict[str, bytes]] | None = None
    # Files copied from a required module's directory next to the binaries: (module, path in it, name).
    companions: tuple[tuple[str, str, str], ...] = field(default_factory=tuple)
    # The wrapper directory under parts/, when another part's wrapper pins these binaries too.
    wrapper: str = ""
    # "node": built only for the real node (`make e2e-node`), never by the control plane's tier.
    tier: str = "cluster"

    @property
    def directory(self) -> Path:
        return PARTS_DIR / (self.wrapper or self.name)


def _kubernetes_ldflags() -> tuple[str, ...]:
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    flags = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={KUBERNETES_VERSION}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
        ]
    return tuple(flags)


PROVIDER_MAIN = """\
// The Kubernetes provider plugin's main package (upstream cmd/pulumi-resource-kubernetes/main.go serves the
// same): its schema and Terraform mapping are embedded, written at build time from the module's copies.
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema-embed.json
var pulumiSchema []byte

//go:embed terraform-mapping-embed.json
var terraformMapping []byte

func main() {
	provider.Serve("kubernetes", version.Version, pulumiSchema, terraformMapping)
}
"""

PROVIDER_MODULE = "github.com/pulumi/pulumi-kubernetes/provider/v4"


def _provider_files(module_dir: Callable[[str], Path]) -> dict[str, bytes]:
    """upstream's `go generate` (cmd/pulumi-resource-kubernetes/generate.go): the schema with the
    release's version set, and the Terraform mapping, both compacted."""
    source = module_dir(PROVIDER_MODULE) / "cmd" / "pulumi-resource-kubernetes"
    schema = json.loads((source / "schema.json").read_text())
    schema["version"] = KUBERNETES_PROVIDER_VERSION
    mapping = json.loads((source / "terraform-mapping.json").read_text())
    return {
        "cmd/pulumi-resource-kubernetes/main.go": PROVIDER_MAIN.encode(),
        "cmd/pulumi-resource-kubernetes/schema-embed.json": json.dumps(
            schema, separators=(",", ":")
        ).encode(),
        "cmd/pulumi-resource-kubernetes/terraform-mapping-embed.json": json.dumps(
            mapping, separators=(",", ":")
        ).encode(),
    }


PARTS: dict[str, Part] = {
    part.name: part
    for part in (
        Part("etcd", {"etcd": "go.etcd.io/etcd/server/v3"}),
        Part(
            "kubernetes",
            {
                name: f"k8s.io/kubernetes/cmd/{name}"
                for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
            },
            tags="selinux,notest",
            ldflags=_kubernetes_ldflags(),
        ),
        # The real node's kubelet and kube-proxy, from the control plane's wrapper (one Kubernetes pin).
        Part(
            "kubernetes-node",
            {name: f"k8s.io/kubernetes/cmd/{name}" for name in ("kubelet", "kube-proxy")},
            tags="selinux,notest",
            ldflags=_kubernetes_ldflags(),
            wrapper="kubernetes",
            tier="node",
        ),
        # crictl: the node's teardown removes the pod sandboxes through the CRI (CNI DEL runs).
        Part(
            "cri-tools",
            {"crictl": "sigs.k8s.io/cri-tools/cmd/crictl"},
            ldflags=("-X sigs.k8s.io/cri-tools/pkg/version.Version=v1.34.0",),
            tier="node",
        ),
        # The cluster DNS of the real node, run there as a pod (node/addons.py).
        Part("coredns", {"coredns": "github.com/coredns/coredns"}, tier="node"),
        # The real node's ReadWriteMany claims: volumes as directories under one host path (node/addons.py).
        Part(
            "local-path-provisioner",
            {"local-path-provisioner": "github.com/rancher/local-path-provisioner"},
            ldflags=("-X main.VERSION=v0.0.30",),
            tier="node",
        ),
        # The prerequisites stack's MinIO, run on the real node from an image of this binary. The module
        # proxy refuses the release the stack pins (RELEASE.2025-09-07T16-13-09Z); this is the nearest
        # commit it serves (parts/minio/go.mod).
        Part("minio", {"minio": "github.com/minio/minio"}, tier="node"),
        # The real node's NetworkPolicy engine: kube-router's policy controller alone (node/netpol.py).
        Part(
            "kube-router",
            {"kube-router": "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"},
            ldflags=("-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=v2.10.0",),
            tier="node",
        ),
        Part("kwok", {"kwok": "sigs.k8s.io/kwok/cmd/kwok"}),
        Part(
            "training-operator",
            {"training-operator": "github.com/kubeflow/training-operator/cmd/training-operator.v1"},
        ),
        Part(
            "pulumi",
            {
                "pulumi": "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi",
                "pulumi-language-python": "./language-python",
                "pulumi-language-go": "./language-go",
                "pulumi-language-nodejs": "./language-nodejs",
            },
            tags="osusergo,grpcnotrace",
            ldflags=(
                f"-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v{PULUMI_VERSION}",
                f"-X main.version={PULUMI_VERSION}",
            ),
            companions=(
                (
                    "github.com/pulumi/pulumi/sdk/v3",
                    "python/cmd/pulumi-language-python-exec",
                    "pulumi-language-python-exec",
                ),
            ),
        ),
        # The YAML language host: Pulumi YAML programs, such as the component package's YAML example
        # (docs/how-to/components.md): pulumi-yaml v1.38.3, the newest release the module proxy serves,
        # built with the CLI's module versions (parts/pulumi-yaml).
        Part(
            "pulumi-yaml",
            {"pulumi-language-yaml": "github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml"},
            tags="osusergo,grpcnotrace",
            ldflags=("-X github.com/pulumi/pulumi-yaml/pkg/version.Version=v1.38.3",),
        ),
        Part("kueue", {"kueue": "sigs.k8s.io/kueue/cmd/kueue"}),
        Part("jobset", {"jobset": "sigs.k8s.io/jobset"}),
        Part(
            "trainer",
            {"trainer-controller-manager": "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"},
        ),
        # Built and pinned; not run yet: its webhooks' certificate comes from cert-manager, whose
        # binaries the module proxy does not serve (their modules are nested: cmd/controller).
        Part("kserve", {"kserve-manager": "github.com/kserve/kserve/cmd/manager"}),
        Part(
            "kubernetes-provider",
            {"pulumi-resource-kubernetes": "./cmd/pulumi-resource-kubernetes"},
            ldflags=(f"-X {PROVIDER_MODULE}/pkg/version.Version={KUBERNETES_PROVIDER_VERSION}",),
            generated=_provider_files,
        ),
    )
}


def tier_parts(*tiers: str) -> list[str]:
    """The names of the parts a tier builds: "cluster" (the control plane's tier), "node" (the real node)."""
    return [name for name, part in PARTS.items() if part.tier in tiers]
