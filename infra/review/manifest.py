"""Runs the real program under Pulumi's mock runtime and turns what it registered into manifests."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulumi
import yaml
from pulumi.runtime import resource as sdk_resource
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.proto import source_pb2

from infra.program.settings import PROJECT, PROJECT_ROOT, Settings
from infra.review.registration import Options, Registration
from infra.review.upstream import Install, install_yaml, installs, source_of
from infra.stackconfig import STAND_IN_DIGEST, StackConfig, platform_facts

if TYPE_CHECKING:
    from infra.program.common.config import S3Credentials
    from infra.program.job.runwatch import RunWatch

    Instrument = Callable[[Settings, S3Credentials | None], tuple[Settings, S3Credentials | None]]

REDACTED = "[redacted]"
SET_BY_API_SERVER = "<set by the API server>"
_SECRET_SIG = "4dabf18193072939515e22adb298388d"  # Pulumi's marker of a serialized secret
_KIND_ORDER = [
    "Namespace",
    "ResourceQuota",
    "LimitRange",
    "StorageClass",
    "PersistentVolumeClaim",
    "Secret",
    "ServiceAccount",
    "NetworkPolicy",
    "Service",
    "LocalQueue",
    "Job",
    "PyTorchJob",
    "TrainingRuntime",
    "TrainJob",
    "PodDisruptionBudget",
    "Deployment",
    "InferenceService",
]


class RecordingMocks(pulumi.runtime.Mocks):
    """Mocks that record every registration and echo inputs back as outputs, like a dry run."""

    def __init__(self) -> None:
        self.registrations: list[Registration] = []
        self._options: dict[str, Options] = {}
        self._reads: set[str] = set()  # logical names of reads (an import also carries an id)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        if args.name in self._reads:  # `Resource.get`: the existing object, as far as its id tells
            read_id = args.resource_id or ""
            self.registrations.append(Registration(args.typ, args.name, {}, True, read_id=read_id))
            return read_id, _read_state(read_id)
        options = self._options.pop(args.name, Options())
        self.registrations.append(
            Registration(
                args.typ, args.name, dict(args.inputs), bool(args.custom), options, tuple(args.transforms)
            )
        )
        state = dict(args.inputs)
        metadata = state.get("metadata")
        if args.typ.startswith("kubernetes:") and isinstance(metadata, dict):
            # What only the API server sets, for inputs that read it (MinIO's restart annotation).
            state["metadata"] = {**metadata, "resourceVersion": SET_BY_API_SERVER}
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None


def _read_state(resource_id: str) -> dict[str, Any]:
    """A Kubernetes object read by id (`namespace/name`, or `name` for a cluster-scoped one): its
    metadata; a dry run has no cluster to read the rest from."""
    namespace, _, name = resource_id.rpartition("/")
    return {"metadata": {"name": name, **({"namespace": namespace} if namespace else {})}}


class _RecordingMonitor(MockMonitor):
    """Also keeps the resource options the mocks API leaves out (retainOnDelete, dependencies, parent,
    replaceOnChanges, deleteBeforeReplace, import, replaceWith, ignoreChanges)."""

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self._recording = mocks

    def ReadResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        self._recording._reads.add(request.name)
        return super().ReadResource(request)

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        deps = tuple(sorted(urn.rsplit("::", 1)[-1] for urn in request.dependencies))
        stack_level = not request.parent or "::pulumi:pulumi:Stack::" in request.parent
        parent = "" if stack_level else request.parent.rsplit("::", 1)[-1]
        self._recording._options[request.name] = Options(
            retain_on_delete=bool(request.retainOnDelete),
            dependencies=deps,
            parent=parent,
            replace_on_changes=tuple(request.replaceOnChanges),
            delete_before_replace=bool(request.deleteBeforeReplace),
            import_id=request.importId,
            replace_with=tuple(sorted(urn.rsplit("::", 1)[-1] for urn in request.replace_with)),
            ignore_changes=tuple(request.ignoreChanges),
            property_dependencies=tuple(
                sorted(
                    (key, tuple(sorted(urn.rsplit("::", 1)[-1] for urn in deps.urns)))
                    for key, deps in request.propertyDependencies.items()
                    if deps.urns
                )
            ),
        )
        return super().RegisterResource(request)


@dataclass
class Rendering:
    stack: str
    objects: list[dict[str, Any]]
    outputs: dict[str, Any]
    settings: Settings
    registrations: list[Registration] = field(default_factory=list)

    @property
    def external(self) -> list[Registration]:
        """Remote components applied by the provider itself (the operator's and Trainer v2's kustomize
        overlays, KServe's release manifest, csi-driver-nfs's Helm chart), by name: the mock runtime
        registers a program's resources in no fixed order."""
        found = [
            r
            for r in self.registrations
            if r.type.startswith(("kubernetes:kustomize", "kubernetes:yaml", "kubernetes:helm.sh"))
        ]
        return sorted(found, key=lambda r: r.name)

    @property
    def upstream(self) -> list[Install]:
        """The components applied from vendored manifests (infra/manifests), object by object as the
        stack applies them (infra/review/upstream.py)."""
        return installs(self.external)


def normalise(value: Any) -> Any:
    """Inputs as a manifest: secrets redacted, integral floats as ints, unset fields dropped."""
    if isinstance(value, dict):
        if _SECRET_SIG in value:  # a secret map keeps its keys, so a reviewer sees what it holds
            inner = value.get("value")
            return {k: REDACTED for k in inner} if isinstance(inner, dict) else REDACTED
        return {k: normalise(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _as_object(registration: Registration) -> dict[str, Any]:
    obj = normalise(registration.inputs)
    if obj.get("kind") == "Secret":
        for section in ("data", "stringData"):
            if isinstance(obj.get(section), dict):
                obj[section] = {k: REDACTED for k in obj[section]}
    return obj


def _sort_key(obj: dict[str, Any]) -> tuple[int, str, str]:
    kind = obj.get("kind", "")
    order = _KIND_ORDER.index(kind) if kind in _KIND_ORDER else len(_KIND_ORDER)
    meta = obj.get("metadata", {})
    return order, meta.get("namespace", ""), meta.get("name", "")


def _ensure_event_loop() -> None:
    """The mock runtime registers resources on the main thread's event loop (`asyncio.get_event_loop`),
    which an earlier `asyncio.run` in the same process leaves unset: a fresh one then. Its exception
    handler is :func:`_drop_unretrieved`."""
    try:
        loop = asyncio.get_event_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    loop.set_exception_handler(_drop_unretrieved)


UNRETRIEVED = ("Future exception was never retrieved", "Task exception was never retrieved")


def _drop_unretrieved(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio's handler, less its report of a future whose error nobody awaited.

    A program that fails leaves Outputs whose futures hold the same error, freed at some later garbage
    collection, when asyncio reports each one with its traceback (`asyncio/futures.py`, `__del__`). The
    error has reached the caller already. Formatting its traceback again is worse than noise on Python
    3.11: `traceback` calls `ast.parse` for its caret anchors, and a collection that runs inside
    another `ast.parse` makes that one raise "SystemError: AST constructor recursion depth mismatch"."""
    if context.get("message") in UNRETRIEVED:
        return
    loop.default_exception_handler(context)


@contextlib.contextmanager
def _no_stack_traces() -> Iterator[None]:
    """Resources registered meanwhile carry no stack trace and no source position.

    The SDK builds both for every resource from the whole Python stack, a file URI per frame (pulumi
    3.272.0 `pulumi/runtime/resource.py`, `_get_stack_trace`), for the engine to show where a resource
    was declared. Under mocks nothing reads them, and the stack is the caller's too (pytest's, in a
    test): dropping them took the render-heavy test files from 21-24 s to 20 s
    (docs/BENCHMARKS.md, "the offline render without stack traces")."""
    built = sdk_resource._get_stack_trace
    sdk_resource._get_stack_trace = source_pb2.StackTrace
    try:
        yield
    finally:
        sdk_resource._get_stack_trace = built


def run_program(
    stack: StackConfig,
    mocks: RecordingMocks | None = None,
    watch: RunWatch | None = None,
    instrument: Instrument | None = None,
) -> tuple[RecordingMocks, dict[str, Any]]:
    """Runs `infra.program.stack` for a stack under mocks. Raises ConfigError before registering anything.
    `watch`: how the program waits for the runs (none: the outcomes come from the mocked status).
    `instrument`: given the validated settings and credentials, returns what the program goes on with
    (the platform's facts taken, then built; infra.reference.reads records the keys read)."""
    from infra.program.common.config import load_settings
    from infra.program.stack import build

    outputs: dict[str, Any] = {}

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        settings, credentials = load_settings()
        if instrument is not None:
            settings, credentials = instrument(settings, credentials)
        settings = with_offline_platform(settings, stack.name, credentials is not None)
        result = {
            k: pulumi.Output.from_input(v)
            for k, v in build(settings, credentials, watch).items()
            if v is not None
        }
        return pulumi.Output.all(**result).apply(outputs.update)

    with _no_stack_traces():
        mocks = _mocked(stack, mocks)
        program()
    return mocks, outputs


def _mocked(stack: StackConfig, mocks: RecordingMocks | None) -> RecordingMocks:
    """Pulumi's mock runtime, recording into `mocks`, with the stack's name and config."""
    mocks = mocks or RecordingMocks()
    _ensure_event_loop()
    pulumi.runtime.set_mocks(
        mocks, project=PROJECT, stack=stack.name, preview=False, monitor=_RecordingMonitor(mocks)
    )
    pulumi.runtime.set_all_config(dict(stack.values), sorted(stack.secret_keys))
    return mocks


def render_component(kind: str, inputs: dict[str, Any], name: str = "test") -> Rendering:
    """The objects and outputs of one component of the package (infra/component/) built from `inputs`
    under mocks, in a stack of its own with no config. Raises what the component raises for bad inputs."""
    from infra.component.resources import COMPONENTS

    outputs: dict[str, Any] = {}
    built: list[Any] = []

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        component = COMPONENTS[kind](name, inputs, watched=False)
        built.append(component)
        return pulumi.Output.all(**component.outputs).apply(outputs.update)

    with _no_stack_traces():
        mocks = _mocked(StackConfig(name=name, values={}, secret_keys=frozenset()), None)
        program()
    return Rendering(
        stack=name,
        objects=created_objects(mocks.registrations),
        outputs=outputs,
        settings=built[0].settings,
        registrations=mocks.registrations,
    )


def with_offline_platform(settings: Settings, stack: str, has_keys: bool) -> Settings:
    """`settings` with its platform stack's facts taken, read from that stack's file in stacks/ (what
    its `platform` output would hold once it is up); as is without `platformStack`."""
    from infra.program.common import platform_facts as platform

    if not settings.platform_stack:
        return settings
    return platform.take(settings, platform_facts(settings.platform_stack), stack, has_keys)


def is_patch(registration: Registration) -> bool:
    """A server-side apply patch of an object the stack does not create (`*Patch` types): a partial
    object, left out of the rendered objects and named in the header instead."""
    return registration.type.startswith("kubernetes:") and registration.type.endswith("Patch")


def created_objects(registrations: list[Registration]) -> list[dict[str, Any]]:
    """The Kubernetes objects the registrations create (patches left out), in the rendering's order."""
    objects = [
        _as_object(r)
        for r in registrations
        if r.custom and r.type.startswith("kubernetes:") and "kind" in r.inputs and not is_patch(r)
    ]
    return sorted(objects, key=_sort_key)


def render(
    stack: StackConfig, mocks: RecordingMocks | None = None, instrument: Instrument | None = None
) -> Rendering:
    """The stack's objects and outputs under mocks (`instrument`: as `run_program` takes it)."""
    from infra.program.common.config import settings_from_raw

    mocks, outputs = run_program(stack, mocks, instrument=instrument)
    settings, has_keys = settings_from_raw(stack.values, set(stack.secret_keys))
    return Rendering(
        stack=stack.name,
        objects=created_objects(mocks.registrations),
        outputs=outputs,
        settings=with_offline_platform(settings, stack.name, has_keys),
        registrations=mocks.registrations,
    )


def to_yaml(rendering: Rendering) -> str:
    """Sorted, deterministic multi-document YAML, with a header naming what is applied from elsewhere."""
    header = [
        f"# Stack '{rendering.stack}': every object `pulumi up` creates, rendered offline.",
        "# Secret values are redacted.",
    ]
    if rendering.settings.job_image.endswith(STAND_IN_DIGEST):
        header.append(
            f"# jobImage's digest stands in ({STAND_IN_DIGEST[:15]}...): the stack requires the digest its "
            "release names (jobImageDigestRequired)."
        )
    upstream = rendering.upstream
    vendored = {install.registration.name: install.vendored for install in upstream}
    for reg in rendering.external:
        source = source_of(reg)
        if reg.name in vendored:
            source = f"{vendored[reg.name].shown} (vendored {vendored[reg.name].version}, objects below)"
        if reg.type.startswith("kubernetes:helm.sh"):
            chart = str(reg.inputs.get("chart")).removeprefix(f"{PROJECT_ROOT}/")  # a vendored archive
            header.append(f"# Also applied (Helm chart, server-side): {chart}")
            header.append(
                f"#   into namespace {reg.inputs.get('namespace')} with values "
                f"{json.dumps(reg.inputs.get('values'), sort_keys=True)} "
                "(see infra/program/prerequisites/install.py)"
            )
            continue
        if reg.type.startswith("kubernetes:yaml"):
            header.append(f"# Also applied (manifest, server-side): {source}")
            header.append(
                "#   its CRDs kept on destroy, its default deployment mode Standard "
                "(see infra/program/platform/kserve.py)"
            )
            continue
        header.append(f"# Also applied (kustomize, server-side): {source}")
        if reg.transforms and reg.parent == "trainer-v2":
            header.append(
                "#   its CRDs kept on destroy, its controllers' images as configured by this stack "
                "(see infra/program/platform/trainer_v2.py)"
            )
        elif reg.transforms:
            header.append(
                "#   with its operator Deployment configured by this stack (init container template and "
                "images; see infra/program/platform/training_operator.py)"
            )
    for reg in rendering.registrations:
        if is_patch(reg):
            meta = reg.inputs.get("metadata", {})
            header.append(
                f"# Also patched (server-side apply, existing object): {reg.inputs.get('kind')} "
                f"{meta.get('namespace')}/{meta.get('name')} (see infra/program/platform/operator_patch.py)"
            )
    body = yaml.safe_dump_all(
        rendering.objects, sort_keys=True, default_flow_style=False, explicit_start=True, width=120
    )
    return "\n".join(header) + "\n" + body + "".join(install_yaml(install) for install in upstream)
