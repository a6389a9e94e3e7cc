"""Composes the stack: namespace (and its budget), storage, credentials, operator (and its post-install
smoke check), the job's identity and network policy, the training job, the model's server (after the
job succeeded), outputs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common import platform_facts as platform
from infra.program.common.config import S3Credentials
from infra.program.common.credentials import ObjectStoreCredentials, ca_bundle_config_map
from infra.program.common.isolation import JobNetworkPolicy, JobServiceAccount, default_deny
from infra.program.common.meta import JOB_LABEL, JobNames, job_names, labels, pod_security_labels
from infra.program.job.budget import NamespaceBudget, has_budget
from infra.program.job.indexedjob import IndexedJob
from infra.program.job.jobs import JobInputs, after_success, training_logs
from infra.program.job.model_server import ModelServer
from infra.program.job.podspec import model_export_uri
from infra.program.job.pytorchjob import PyTorchJob
from infra.program.job.queue import JobQueue
from infra.program.job.seed import DataSeed
from infra.program.job.serving import serve_example
from infra.program.job.tensorboard import TensorBoard
from infra.program.job.trainjob import TrainJob
from infra.program.job.trainjob import status_command as trainjob_status_command
from infra.program.platform.device_plugin import NvidiaDevicePlugin
from infra.program.platform.kserve import KServe
from infra.program.platform.operator_patch import ExistingOperatorPatch
from infra.program.platform.smoke import SmokeCheck
from infra.program.platform.tenancy import TeamTenancy
from infra.program.platform.trainer_v2 import TrainerV2
from infra.program.platform.training_operator import TrainingOperator
from infra.program.settings import PROJECT, Settings

if TYPE_CHECKING:
    from infra.program.job.runwatch import RunWatch


def _namespace(settings: Settings, parent: pulumi.Resource | None = None) -> pulumi.Input[str]:
    if not settings.create_namespace:
        return settings.namespace
    level = settings.namespace_pod_security
    enforce = pod_security_labels(level)
    namespace = k8s.core.v1.Namespace(
        "namespace",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=settings.namespace, labels={**labels(settings, "namespace"), **enforce}
        ),
        # The retained checkpoint claim lives in this namespace, and deleting a namespace deletes
        # everything in it: a destroy that keeps the claim keeps its namespace too.
        opts=pulumi.ResourceOptions(
            parent=parent,
            retain_on_delete=settings.checkpoint_volume_retain,
            import_=settings.namespace if settings.reattach_retained else None,
        ),
    )
    return namespace.metadata.name


def build_platform(
    settings: Settings, parent: pulumi.Resource | None = None
) -> dict[str, pulumi.Input[object]]:
    """A platform stack: the cluster-level parts only (the training operator, Kubeflow Trainer v2, KServe,
    their CRDs), each as configured. `parent`: the component that owns them (infra/component/), none in a
    stack."""
    child = pulumi.ResourceOptions(parent=parent)
    outputs: dict[str, pulumi.Input[object]] = {"stackRole": settings.stack_role}
    operator: TrainingOperator | ExistingOperatorPatch | None = None
    trainer = None
    if settings.operator_install:
        operator = TrainingOperator("training-operator", settings, opts=child)
        outputs["operatorSource"] = operator.source
        outputs["operatorInitContainerImage"] = settings.operator_init_container_image
    elif settings.operator_patch_existing:
        operator = ExistingOperatorPatch("training-operator-patch", settings, opts=child)
        outputs["operatorPatched"] = operator.deployment
        outputs["operatorInitContainerImage"] = settings.operator_init_container_image
    if settings.trainer_install:
        trainer = TrainerV2("trainer-v2", settings, opts=child)
        outputs["trainerSource"] = trainer.source
    if settings.kserve_install:
        outputs["kserveSource"] = KServe("kserve", settings, opts=child).source
    plugin = (
        NvidiaDevicePlugin("gpu-device-plugin", settings, opts=child)
        if settings.gpu_device_plugin == "install"
        else None
    )
    if plugin is not None:
        outputs["gpuDevicePlugin"] = plugin.daemon_set.metadata.name
    smoke = smoke_checks(settings, operator, trainer, plugin, parent)
    outputs.update(smoke)
    priority_classes(settings, parent)
    if settings.team_namespaces or settings.platform_storage_classes or settings.pod_security_label_guard:
        tenancy = TeamTenancy("tenancy", settings, opts=child)
        if tenancy.namespaces:
            outputs["teamNamespaces"] = tenancy.namespaces
        if tenancy.storage_classes:
            outputs["storageClasses"] = tenancy.storage_classes
    outputs[platform.OUTPUT] = facts_after(settings, smoke)
    return outputs


def priority_classes(
    settings: Settings, parent: pulumi.Resource | None = None
) -> list[k8s.scheduling.v1.PriorityClass]:
    """The PriorityClasses a platform (or all) stack creates (priorityClasses), cluster-wide."""
    return [
        k8s.scheduling.v1.PriorityClass(
            f"priority-{name}",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=name, labels=labels(settings, "priority")),
            value=value,
            global_default=False,
            description=f"{PROJECT}: training jobs that name it (jobPriorityClassName)",
            opts=pulumi.ResourceOptions(parent=parent),
        )
        for name, value in settings.priority_class_values.items()
    ]


def facts_after(settings: Settings, smoke: dict[str, pulumi.Input[object]]) -> pulumi.Input[object]:
    """The stack's platform facts (infra/program/common/platform_facts.py), exported only once its smoke
    checks passed: a failed check fails `up` first, so job stacks never read facts of an install that fails
    its check."""
    found = platform.facts(settings)
    if found is None or not smoke:
        return found
    return pulumi.Output.all(*smoke.values()).apply(lambda _: found)


def smoke_checks(
    settings: Settings,
    operator: TrainingOperator | ExistingOperatorPatch | None,
    trainer: TrainerV2 | None,
    gpu_plugin: NvidiaDevicePlugin | None = None,
    parent: pulumi.Resource | None = None,
) -> dict[str, pulumi.Input[object]]:
    """The post-install smoke check of the operators this stack installs or patches (operatorSmokeCheck),
    of NetworkPolicy enforcement (networkPolicySmokeCheck), and of the GPU nodes (gpuSmokeNodeSelector,
    after the device plugin when the stack installs it): its outcomes, exported so that `pulumi up`
    awaits them and fails on a failed check."""
    pytorchjob, trainjob = settings.smoke_checks
    gpu = bool(settings.gpu_smoke_node_selector) and settings.stack_role in ("all", "platform")
    if not (pytorchjob or trainjob or gpu or settings.network_check):
        return {}
    check = SmokeCheck(
        "smoke",
        settings,
        operator if pytorchjob else None,
        trainer if trainjob else None,
        opts=pulumi.ResourceOptions(parent=parent),
        gpu_after=((gpu_plugin.daemon_set,) if gpu_plugin else ()) if gpu else None,
        network=settings.network_check,
    )
    return dict(check.outcomes)


def build(
    settings: Settings,
    credentials: S3Credentials | None,
    watch: RunWatch | None = None,
    parent: pulumi.Resource | None = None,
) -> dict[str, pulumi.Input[object]]:
    """Registers every resource of the stack; returns the stack outputs (no secret among them). `watch`
    is how `pulumi up` waits for the seed and the job (`main` passes one reading the cluster; without,
    as under mocks, the outcomes come from the jobs' recorded status). `parent`: the component that owns
    every resource (infra/component/), none in a stack.

    Long on purpose: the one place that composes the roles, in the order their resources depend on each other;
    each step is one call into a role's package."""
    from infra.program.common.storage import TrainingStorage

    child = pulumi.ResourceOptions(parent=parent)
    if settings.stack_role == "platform":
        return build_platform(settings, parent)
    if settings.stack_role == "prerequisites":
        from infra.program.prerequisites.install import build_prerequisites

        assert credentials is not None  # checks.prerequisites: the stack's MinIO keys are set
        return build_prerequisites(settings, credentials, watch)
    namespace = _namespace(settings, parent)
    # With the job's own policy on (jobNetworkPolicy), the namespace denies by default too.
    deny_all = (default_deny(settings, namespace, opts=child),) if settings.job_network_policy else ()
    if has_budget(settings):
        NamespaceBudget("budget", settings, namespace, opts=child)
    storage = TrainingStorage("storage", settings, namespace, opts=child)
    uses_secret = credentials is not None or bool(settings.minio_existing_secret)
    secret_name = read_secret_name = None
    if uses_secret:
        s3 = ObjectStoreCredentials("s3", settings, credentials, namespace, opts=child)
        # The seed and the server only read: the read-only pair's Secret when there is one.
        secret_name, read_secret_name = s3.secret_name, s3.read_secret_name
    names = job_names(settings)
    identity = JobServiceAccount("identity", settings, names, namespace, opts=child)
    ca = ca_bundle_config_map(settings, namespace, parent)
    after: tuple[pulumi.Resource, ...] = deny_all + ((ca,) if ca is not None else ())
    queue = (
        JobQueue("queue", settings, namespace, opts=child).local_queue if settings.job_queue_name else None
    )
    seed = None
    if settings.seeds_data:
        seed = DataSeed(
            "seed",
            settings,
            namespace,
            storage.data_claim,
            read_secret_name,
            identity.service_account_name,
            queue=queue,  # queued like the training job, once its LocalQueue exists
            watch=watch,
            opts=child,
        )
        after += (seed.job,)  # the Job itself: a component's depends_on does not wait for its children
    operator: TrainingOperator | ExistingOperatorPatch | None = None
    trainer = None
    if settings.operator_install:
        operator = TrainingOperator("training-operator", settings, opts=child)
        after += (operator,)
    elif settings.operator_patch_existing:
        operator = ExistingOperatorPatch("training-operator-patch", settings, opts=child)
        after += (operator,)
    if settings.trainer_install:
        trainer = TrainerV2("trainer-v2", settings, opts=child)
        after += (trainer,)
    plugin = (
        NvidiaDevicePlugin("gpu-device-plugin", settings, opts=child)
        if settings.gpu_device_plugin == "install"
        else None
    )
    if plugin is not None:
        after += (plugin.daemon_set,)  # GPUs advertised before the job
    smoke = smoke_checks(settings, operator, trainer, plugin, parent)
    after += tuple(priority_classes(settings, parent))  # before any pod names one
    if queue is not None:
        after += (queue,)
    if settings.job_network_policy:
        # In place before the first pod starts, so no pod of the job ever runs unrestricted.
        after += (JobNetworkPolicy("network", settings, names, namespace, opts=child),)
    # The training job takes the data claim only from a seed that succeeded: a Failed seed Job fails
    # `pulumi up` and the job is never registered (on an empty volume).
    data_claim = after_success(storage.data_claim, seed.outcome) if seed is not None else storage.data_claim
    inputs = JobInputs(
        names=names,
        data_claim=data_claim,
        checkpoint_claim=storage.checkpoint_claim,
        secret_name=secret_name,
        service_account=identity.service_account_name,
        after=after,
        watch=watch,
    )
    if settings.job_kind == "pytorchjob":
        job: PyTorchJob | IndexedJob | TrainJob = PyTorchJob(
            "trainer", settings, inputs, namespace, opts=child
        )
        kind = "pytorchjob"
    elif settings.job_kind == "trainjob":
        job = TrainJob("trainer", settings, inputs, namespace, opts=child)
        kind = "trainjob"
    else:
        job = IndexedJob("trainer", settings, inputs, namespace, opts=child)
        kind = "job"
    ns = settings.namespace
    board = (
        TensorBoard("tensorboard", settings, namespace, storage.checkpoint_claim, opts=child)
        if settings.tensorboard_deploy
        else None
    )
    kserve = KServe("kserve", settings, opts=child) if settings.kserve_install else None
    served: dict[str, pulumi.Input[object]] = {"kserveSource": kserve.source if kserve else None}
    if settings.serve_kind != "none":
        # Every serving object depends on the job through its outcome: registered only once the training
        # job succeeded, never after a failed one (infra/program/job/serving.py says why not a property).
        server = ModelServer(
            "server",
            settings,
            names,
            namespace,
            after_success(pulumi.Output.from_input(settings.job_run_id), job.outcome),
            storage.checkpoint_claim,
            read_secret_name,
            after=(kserve,) if kserve else (),
            opts=child,
        )
        served |= {
            "serveKind": settings.serve_kind,
            "serveModelVersion": settings.job_run_id,
            # Awaited as an output: a model version that never serves fails `pulumi up` here.
            "serveOutcome": server.outcome,
            "serveUrl": server.url,
            "serveExample": serve_example(settings),
        }
    return {
        "stackRole": settings.stack_role,
        platform.OUTPUT: facts_after(settings, smoke),
        "jobOutcome": job.outcome,
        "seedOutcome": seed.outcome if seed is not None else None,
        "modelExport": model_export_uri(settings, names) if settings.job_model_export else None,
        "namespace": namespace,
        "jobKind": settings.job_kind,
        "jobName": job.job_name,
        "dataClaim": storage.data_claim,
        "checkpointClaim": storage.checkpoint_claim,
        "storageClass": storage.storage_class,
        "dataStorageClass": storage.data_storage_class,
        "s3SecretName": secret_name,
        "s3ReadSecretName": read_secret_name,
        "serviceAccount": identity.service_account_name,
        "checkpointDir": names.checkpoint_dir,
        "curvesDir": f"{names.checkpoint_dir}/tensorboard",
        "tensorboardCommand": board.command if board else None,
        "lineage": lineage_location(settings, names, storage.checkpoint_claim),
        "logsCommand": training_logs(settings, names.job),
        "statusCommand": (
            trainjob_status_command(settings, names.job)
            if kind == "trainjob"
            else f"kubectl -n {ns} get {kind} {names.job} -o wide"
        ),
        "podsCommand": f"kubectl -n {ns} get pods -l {JOB_LABEL}={names.job} -o wide",
        **smoke,
        **served,
    }


def lineage_location(
    settings: Settings, names: JobNames, claim: pulumi.Input[str]
) -> dict[str, pulumi.Input[object]]:
    """Where the run's lineage.json lies (trainer/lineage.py): beside model.pt in the checkpoint dir on
    the checkpoint claim, and in the export when jobModelExport is on."""
    return {
        "claim": claim,
        "path": f"{names.checkpoint_dir}/lineage.json",
        "s3": f"{model_export_uri(settings, names)}/lineage.json" if settings.job_model_export else None,
    }


def main() -> None:
    """The Pulumi program: bad config stops it with one line, before any resource is registered; so do a
    vendored manifest that is not the one infra/manifests/index.yaml records, and a job stack that its
    platform stack (`platformStack`) contradicts."""
    from infra.program.checks import ConfigError
    from infra.program.common import vendored
    from infra.program.common.config import load_settings

    try:
        settings, credentials = load_settings()
        vendored.check(settings)
    except (ConfigError, vendored.ManifestMismatch) as exc:
        raise pulumi.RunError(str(exc)) from None
    if not settings.platform_stack:
        _export(build(settings, credentials, live_watch(settings)))
        return

    async def with_platform() -> None:
        # A read of the platform stack's outputs, in preview too (Pulumi's built-in StackReference). A
        # bare stack name is this stack's organization and project: the CLI would otherwise complete
        # it with the user's default organization, which need not be this stack's.
        name = settings.platform_stack
        if "/" not in name:
            name = f"{pulumi.get_organization()}/{pulumi.get_project()}/{name}"
        reference = pulumi.StackReference("platform-stack", stack_name=name)
        # A stack that cannot be read (never brought up, or no access) fails the engine's read step,
        # which reports it in one line (`unknown stack "<org>/<project>/<name>"`) and stops the program.
        found = (await reference.get_output_details(platform.OUTPUT)).value
        try:
            taken = platform.take(settings, found, pulumi.get_stack(), credentials is not None)
        except platform.PlatformMismatch as exc:
            raise pulumi.RunError(str(exc)) from None
        _export(build(taken, credentials, live_watch(taken)))

    pulumi.run(with_platform)


def live_watch(settings: Settings) -> RunWatch | None:
    """The watch `pulumi up` waits for the seed and the job (or a prerequisites stack's bucket fill) with
    (`infra/program/job/runwatch.py`), reading the cluster with the provider's kubeconfig and context. In a
    preview it only reads once, and a cluster the preview cannot reach (as the provider previews without
    one) leaves the outcomes to the jobs' recorded status."""
    from infra.program.job.kubeapi import KubeConfigError, provider_reader
    from infra.program.job.runwatch import RunWatch

    if settings.stack_role == "platform":
        return None
    if settings.stack_role != "prerequisites" and not (settings.seeds_data or settings.job_wait):
        return None
    previewing = pulumi.runtime.is_dry_run()
    try:
        reader = provider_reader()
    except KubeConfigError as exc:
        if previewing:
            return None
        raise pulumi.RunError(str(exc)) from None
    return RunWatch(reader, wait=not previewing, placement_seconds=settings.job_placement_timeout_seconds)


def _export(outputs: dict[str, pulumi.Input[object]]) -> None:
    for name, value in outputs.items():
        if value is not None:
            pulumi.export(name, value)
