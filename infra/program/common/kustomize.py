"""The kustomize v2 Directory, with the output type its provider really returns.

pulumi-kubernetes' schema declared `kubernetes:kustomize/v2:Directory`'s `resources` output a string
until 4.30.0 (pulumi/pulumi-kubernetes#4295), while the provider returns the list of the objects it
registered; the Python SDK checks outputs against the declared type (pulumi `runtime/rpc.py`,
`resolve_outputs` reads the instance's class), so with the pinned 4.25.0 every `pulumi up` of a
Directory fails after its objects are created ("Unexpected type. Expected 'list' got '<class 'str'>'").
Found by the local cluster tier; the Python SDK takes output types from `type(resource)`, so this
subclass only re-declares that one output. Drop it with a pin at 4.30.0 or later.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s


class Directory(k8s.kustomize.v2.Directory):
    @property
    @pulumi.getter
    def resources(self) -> pulumi.Output[Sequence[Any] | None]:  # type: ignore[override]
        """The objects the Directory registered."""
        return pulumi.get(self, "resources")
