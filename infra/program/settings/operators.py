"""Settings: the training operator v1, its post-install smoke check, and Kubeflow Trainer v2."""

from __future__ import annotations

from pydantic import field_validator

from infra.program.settings.base import (
    OPERATOR_INIT_IMAGE,
    PROJECT,
    SettingsGroup,
    check_pinned_image,
    dns_label,
    dns_subdomain,
    key,
    optional_pinned_image,
    release_tag,
)


class OperatorSettings(SettingsGroup):
    """The Kubeflow training operator v1: whether and what to install."""

    operator_install: bool = key(
        "operatorInstall", True, "Install the Kubeflow training operator; false assumes it is present."
    )
    operator_version: str = key(
        "operatorVersion",
        "v1.9.4",
        "Pinned training-operator release tag (vMAJOR.MINOR.PATCH): the version vendored in "
        "infra/manifests/training-operator, or, with operatorSource, the version that source holds.",
    )
    operator_source: str = key(
        "operatorSource",
        "",
        "Kustomize source of the operator instead of the vendored one: a local path (absolute, or ./ or "
        "../ relative to the directory of Pulumi.yaml) or a git URL with ?ref=<tag or commit>; empty "
        "applies infra/manifests/training-operator (upstream's standalone overlay built from the pinned "
        "module, checked by its sha256; nothing is downloaded). Either way its Namespace is labelled to "
        "enforce Pod Security 'restricted', which the operator's pod meets once the platform configures it.",
    )

    operator_image: str = key(
        "operatorImage",
        "",
        "Image of the operator's controller (a mirror for air-gapped clusters), pinned; empty keeps the "
        "overlay's own image.",
    )
    operator_init_container_image: str = key(
        "operatorInitContainerImage",
        OPERATOR_INIT_IMAGE,
        "Image of the init container the installed operator adds to PyTorchJob Worker pods (it waits "
        "for the master's DNS name; needs sh and getent, as alpine's musl-utils); pinned by digest. "
        "Point it at a mirror on air-gapped clusters.",
    )
    operator_init_container_restricted: bool = key(
        "operatorInitContainerRestricted",
        False,
        "With operatorInstall false: declare that the operator already present configures its PyTorchJob "
        "init container to meet Pod Security 'restricted' (as this project's install, or a platform "
        "stack's operatorPatchExisting, configures it). Required for a multi-node PyTorchJob in a "
        "namespace enforcing 'restricted'.",
    )
    operator_patch_existing: bool = key(
        "operatorPatchExisting",
        False,
        "With operatorInstall false, on a platform or 'all' stack: patch the training operator already "
        "in the cluster (e.g. Kubeflow's, Deployment operatorExistingNamespace/operatorExistingName) with "
        "this project's restricted init container template and operatorInitContainerImage (a "
        "server-side apply of its pod template; destroy takes the patch's fields away, never the "
        "operator). See docs/EXISTING-KUBEFLOW.md.",
    )
    operator_existing_namespace: str = key(
        "operatorExistingNamespace",
        "kubeflow",
        "With operatorPatchExisting: the namespace of the operator's Deployment.",
    )
    operator_existing_name: str = key(
        "operatorExistingName",
        "training-operator",
        "With operatorPatchExisting: the name of the operator's Deployment (its container keeps "
        "upstream's name, training-operator).",
    )

    @field_validator("operator_version")
    @classmethod
    def _operator_release_tag(cls, value: str) -> str:
        return release_tag(value)

    @field_validator("operator_image")
    @classmethod
    def _operator_pinned_image(cls, value: str) -> str:
        return optional_pinned_image(value)

    @field_validator("operator_existing_namespace")
    @classmethod
    def _existing_namespace(cls, value: str) -> str:
        return dns_label(value)

    @field_validator("operator_existing_name")
    @classmethod
    def _existing_name(cls, value: str) -> str:
        return dns_subdomain(value)

    @field_validator("operator_init_container_image")
    @classmethod
    def _digest_pinned_image(cls, value: str) -> str:
        check_pinned_image(value)
        if "@sha256:" not in value:
            raise ValueError("an image pinned by digest, such as registry/alpine:3.20@sha256:<64 hex>")
        return value


# The namespace the post-install smoke check creates, runs its jobs in and deletes
# (infra/program/platform/smoke.py).
SMOKE_NAMESPACE = f"{PROJECT}-smoke"


class SmokeCheckSettings(SettingsGroup):
    """The post-install smoke check (platform and 'all' stacks)."""

    operator_smoke_check: bool = key(
        "operatorSmokeCheck",
        True,
        "After installing (or patching, operatorPatchExisting) the training operator (and Kubeflow "
        "Trainer v2), `pulumi up` runs a tiny "
        "PyTorchJob (a Master and one Worker; and a two-node TrainJob) in the namespace ddp-mnist-smoke, "
        "which it creates enforcing Pod Security 'restricted', and fails with one line naming the cause "
        "unless it succeeds (Worker refused by admission, image not pullable, ...). Needs no GPU; the "
        "pods run operatorInitContainerImage. Ignored by job stacks.",
    )
    network_policy_smoke_check: bool = key(
        "networkPolicySmokeCheck",
        True,
        "On a platform or 'all' stack, `pulumi up` proves that the cluster enforces NetworkPolicy: in "
        "ddp-mnist-smoke, one pod must reach another's port 8080, which a policy opens, and must not "
        "reach its port 8081, which the namespace's default deny closes; it fails with one line naming "
        "the cloud's switch when 8081 answers. The pods run operatorInitContainerImage and need its "
        "`busybox nc` (alpine's has it). false skips the check on a cluster you know enforces none, "
        "where no stack's policy isolates anything.",
    )


class TrainerV2Settings(SettingsGroup):
    """Kubeflow Trainer v2 (TrainJob) and the CRDs either operator may adopt."""

    trainer_install: bool = key(
        "trainerInstall",
        False,
        "Install Kubeflow Trainer v2 (TrainJob, TrainingRuntime) with the JobSet controller it brings, "
        "from upstream's overlay manifests/overlays/manager (vendored, or trainerSource); needed by "
        "jobKind trainjob unless trainerPresent declares it installed.",
    )
    trainer_present: bool = key(
        "trainerPresent",
        False,
        "With trainerInstall false: declare that Kubeflow Trainer v2 and JobSet are already in the "
        "cluster (e.g. installed by the cluster's platform stack), so jobKind trainjob may be used.",
    )
    trainer_version: str = key(
        "trainerVersion",
        "v2.3.0",
        "Pinned Kubeflow Trainer release tag (vMAJOR.MINOR.PATCH): the version vendored in "
        "infra/manifests/kubeflow-trainer, or, with trainerSource, the version that source holds.",
    )
    trainer_source: str = key(
        "trainerSource",
        "",
        "Kustomize source of Trainer v2 instead of the vendored one: a local path (absolute, or ./ or "
        "../ relative to the directory of Pulumi.yaml) or a git URL with ?ref=<tag or commit>; empty "
        "applies infra/manifests/kubeflow-trainer (upstream's manifests/overlays/manager with JobSet's "
        "release manifest, built from the pinned modules, checked by its sha256; nothing is downloaded). "
        "Either way its Namespace is labelled to enforce Pod Security 'restricted', which the vendored "
        "controllers meet.",
    )
    trainer_image: str = key(
        "trainerImage",
        "",
        "Image of the Trainer v2 controller manager (a mirror for air-gapped clusters), pinned; empty "
        "keeps the overlay's own (ghcr.io/kubeflow/trainer/trainer-controller-manager at the tag).",
    )
    trainer_jobset_image: str = key(
        "trainerJobSetImage",
        "",
        "Image of the JobSet controller the Trainer v2 overlay installs (a mirror for air-gapped "
        "clusters), pinned; empty keeps the overlay's own (registry.k8s.io/jobset/jobset:v0.12.0).",
    )
    trainer_progress: bool = key(
        "trainerProgress",
        False,
        "Training progress in each TrainJob's status: with trainerInstall, turns on Trainer v2's alpha "
        "TrainJobStatus feature gate (the controller then serves its status endpoint on port 10443 and "
        "gives the trainer's pods its URL, CA and a token), so rank 0 reports percent, time left and its "
        "metrics into status.trainerStatus, shown by the stack's statusCommand. On a job stack it "
        "declares that the cluster's Trainer has the gate on (taken from platformStack when set) and "
        "lets the job's pods reach the endpoint.",
    )
    allow_both_operators: bool = key(
        "allowBothOperators",
        False,
        "Allow one stack to install both the training operator v1 (operatorInstall) and Kubeflow "
        "Trainer v2 (trainerInstall): two controllers, two webhooks, two sets of CRDs; off by default.",
    )
    operator_adopt_crds: bool = key(
        "operatorAdoptCrds",
        False,
        "With operatorInstall: adopt the training operator's CRDs a destroy left in the cluster (Pulumi "
        "import of each CRD of the overlay) instead of creating them; every CRD must be there.",
    )
    trainer_adopt_crds: bool = key(
        "trainerAdoptCrds",
        False,
        "With trainerInstall: adopt Trainer v2's (and JobSet's) CRDs a destroy left in the cluster "
        "(Pulumi import of each CRD of the overlay) instead of creating them; every CRD must be there.",
    )

    @field_validator("trainer_version")
    @classmethod
    def _trainer_release_tag(cls, value: str) -> str:
        return release_tag(value)

    @field_validator("trainer_image", "trainer_jobset_image")
    @classmethod
    def _trainer_pinned_image(cls, value: str) -> str:
        return optional_pinned_image(value)
