"""The components: the platform and the training job, each built by the code the stacks run.

`TrainingPlatform` is a platform stack (stackRole platform) and `TrainingJob` a job stack (stackRole
job) as components: `infra.program.stack.build` registers the same objects, each a child of the
component, and the component's outputs are that stack's outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from infra.program.settings import PROJECT, Settings

from .inputs import read_inputs


class _StackComponent(pulumi.ComponentResource):
    """A stack role as a component: its inputs read as that stack's config, its outputs that stack's."""

    ROLE = ""
    outputs: dict[str, pulumi.Input[object]]
    settings: Settings

    def __init__(
        self,
        name: str,
        inputs: Mapping[str, Any],
        opts: pulumi.ResourceOptions | None = None,
        *,
        watched: bool = True,
    ) -> None:
        """`watched`: `pulumi up` waits for the seed and the job reading the cluster, as a stack does
        (`infra.program.stack.live_watch`); without, as offline, their outcomes come from their status."""
        from infra.program.common import vendored
        from infra.program.stack import build, live_watch

        kind = type(self).__name__
        # Checked before anything is registered: a bad input leaves no component behind.
        settings, credentials = read_inputs(kind, self.ROLE, inputs)
        vendored.check(settings)
        super().__init__(token(kind), name, {}, opts)
        self.settings = settings
        built = build(settings, credentials, live_watch(settings) if watched else None, parent=self)
        self.outputs = {key: value for key, value in built.items() if value is not None}
        self.register_outputs(self.outputs)


class TrainingPlatform(_StackComponent):
    """The cluster-level parts: the training operator, Kubeflow Trainer v2, KServe, the GPU device plugin,
    team namespaces, PriorityClasses, each as its inputs say (a platform stack)."""

    ROLE = "platform"


class TrainingJob(_StackComponent):
    """One environment: namespace, storage, S3 credentials, the training job, its seed and its model server
    (a job stack); the operators come from a TrainingPlatform or the cluster."""

    ROLE = "job"


COMPONENTS: dict[str, type[_StackComponent]] = {cls.__name__: cls for cls in (TrainingPlatform, TrainingJob)}


def token(kind: str) -> str:
    """The component's type token: `ddp-mnist:index:TrainingJob`."""
    return f"{PROJECT}:index:{kind}"
