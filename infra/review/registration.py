"""What the program registered under the mock runtime: each resource's type, name, inputs and the options
the engine acts on (the records `infra/review/manifest.py` makes and the other review tools read)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Options:
    """The resource options the engine acts on, as the program registered them."""

    retain_on_delete: bool = False
    dependencies: tuple[str, ...] = ()
    parent: str = ""  # logical name of the parent resource ("" for the stack itself)
    replace_on_changes: tuple[str, ...] = ()
    delete_before_replace: bool = False
    import_id: str = ""  # adopt this existing object instead of creating it
    replace_with: tuple[str, ...] = ()  # logical names of resources whose replacement replaces this one
    ignore_changes: tuple[str, ...] = ()  # input paths whose differences the engine ignores
    # Input property -> logical names of the resources its value came from. The engine re-diffs those
    # properties as unknown when such a resource is replaced delete-before-replace (pulumi
    # `pkg/resource/deploy/step_generator.go`, calculateDependentReplacements).
    property_dependencies: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Registration:
    """One resource the program registered: its type token, logical name and inputs."""

    type: str
    name: str
    inputs: dict[str, Any]
    custom: bool
    options: Options = field(default_factory=lambda: Options())
    # Transforms the engine would run on this resource's children (e.g. the operator overlay's).
    transforms: tuple[Any, ...] = ()
    # The id of an existing object the program reads (`Resource.get`) instead of creating it.
    read_id: str = ""

    @property
    def retain_on_delete(self) -> bool:
        return self.options.retain_on_delete

    @property
    def dependencies(self) -> tuple[str, ...]:
        return self.options.dependencies

    @property
    def parent(self) -> str:
        return self.options.parent

    @property
    def replace_on_changes(self) -> tuple[str, ...]:
        return self.options.replace_on_changes

    @property
    def delete_before_replace(self) -> bool:
        return self.options.delete_before_replace

    @property
    def import_id(self) -> str:
        return self.options.import_id
