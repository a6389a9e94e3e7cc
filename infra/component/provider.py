"""The component provider: serves TrainingPlatform and TrainingJob to Pulumi programs in any language.

Written on the SDK's provider interface (`pulumi.provider.Provider`) with the checked-in schema
(infra/component/schema.json), not the SDK's schema-inferring `component_provider_host`: at pulumi
3.272.0 that host hands integer inputs to the component as floats and fails on an integer input that
is an Output (`pulumi/provider/experimental/component.py`), and it cannot carry the settings model's
descriptions and defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi.provider as provider

from infra.program.checks import ConfigError
from infra.program.common.vendored import ManifestMismatch
from infra.program.settings import PROJECT

from .inputs import InputError
from .resources import COMPONENTS, token
from .schema import SCHEMA_PATH, version


class ComponentProvider(provider.Provider):
    def __init__(self) -> None:
        super().__init__(version(), SCHEMA_PATH.read_text())

    def construct(
        self,
        name: str,
        resource_type: str,
        inputs: Mapping[str, Any],
        options: pulumi.ResourceOptions | None = None,
    ) -> provider.ConstructResult:
        kinds = {token(kind): component for kind, component in COMPONENTS.items()}
        if resource_type not in kinds:
            raise pulumi.RunError(
                f"unknown resource type {resource_type} (this package has {', '.join(kinds)})"
            )
        try:
            component = kinds[resource_type](name, inputs, options)
        except ConfigError as exc:
            # One line naming the input, as `pulumi preview` shows a bad stack config key. The engine
            # shows a property's value beside it unless the input is a secret: a value the line itself
            # hides (a URL with a password, a credential under a mistyped name) names no property.
            if exc.secret:
                raise pulumi.InputPropertiesError(str(exc), []) from None
            raise pulumi.InputPropertyError(exc.key.removeprefix(f"{PROJECT}:"), str(exc)) from None
        except InputError as exc:
            raise pulumi.InputPropertyError(exc.key, str(exc)) from None
        except ManifestMismatch as exc:
            raise pulumi.RunError(str(exc)) from None
        return provider.ConstructResult(urn=component.urn, state=component.outputs)


def main(argv: list[str]) -> None:
    """Serve the provider to the engine whose address is argv's first argument."""
    provider.main(ComponentProvider(), argv)
