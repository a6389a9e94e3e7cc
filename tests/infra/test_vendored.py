"""The vendored upstream manifests (infra/manifests): every file is the one its index records, an edited
one stops the program before anything is registered, the versions agree everywhere they are named, and
the objects keep the Pulumi names an existing platform stack gave them.

That the files are what the pinned modules build is proven where the modules are
(tests/e2e_local/test_vendored_manifests.py, `make manifests-check`)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import kubernetes_validate
import pulumi
import pytest

from infra.program.common import vendored
from infra.program.common.vendored import INDEX, KSERVE, MANIFESTS, TRAINER, TRAINING_OPERATOR
from infra.program.platform.training_operator import TEMPLATE_ANNOTATION
from infra.program.settings import Settings
from infra.review.manifest import RecordingMocks, run_program
from infra.review.render import is_builtin
from infra.review.upstream import _parsed as parse_manifest
from tests.infra.conftest import BASE, render_config, stack_config

COMPONENTS = [TRAINING_OPERATOR, TRAINER, KSERVE]
# The version keys' defaults, which must be the vendored versions.
VERSION_KEYS = {TRAINING_OPERATOR: "operator_version", TRAINER: "trainer_version", KSERVE: "kserve_version"}
EVERYTHING = {
    "stackRole": "platform",
    "operatorInstall": True,
    "trainerInstall": True,
    "allowBothOperators": True,
    "kserveInstall": True,
}


@pytest.mark.parametrize("name", COMPONENTS)
def test_every_vendored_file_has_the_sha256_its_index_records(name):
    component = vendored.vendored(name)
    assert component.sums, f"{name}: the index records no file"
    assert component.mismatches() == []
    assert component.verified() == str(MANIFESTS / component.apply)


def test_every_file_in_the_directory_is_recorded_in_the_index():
    recorded = {path for c in vendored.index().values() for path in c.sums}
    present = {
        str(p.relative_to(MANIFESTS))
        for p in MANIFESTS.rglob("*")
        if p.is_file() and p.name not in ("README.md", INDEX)
    }
    assert present == recorded
    assert sorted(vendored.index()) == sorted(COMPONENTS)


@pytest.fixture
def tampered(tmp_path, monkeypatch):
    """A copy of infra/manifests in which KServe's release manifest lost one character."""
    copy = shutil.copytree(MANIFESTS, tmp_path / "manifests")
    manifest = copy / "kserve" / "kserve.yaml"
    text = manifest.read_text()
    manifest.write_text(text.replace("kserve-controller:v0.20.0", "kserve-controller:v0.20.1", 1))
    monkeypatch.setattr(vendored, "MANIFESTS", copy)
    vendored.index.cache_clear()
    yield copy
    vendored.index.cache_clear()


def test_an_edited_vendored_file_fails_its_sha256(tampered):
    (line,) = vendored.vendored(KSERVE).mismatches()
    recorded = vendored.vendored(KSERVE).sums["kserve/kserve.yaml"]
    assert line.startswith("infra/manifests/kserve/kserve.yaml: sha256 ")
    assert line.endswith(
        f", not {recorded} as infra/manifests/index.yaml records (regenerate it with `make manifests`, "
        "or restore it from git)"
    )
    assert vendored.vendored(TRAINING_OPERATOR).mismatches() == []  # untouched


def test_an_edited_vendored_file_stops_the_program_with_one_line_before_anything_is_registered(
    tampered, monkeypatch
):
    from infra.program import stack
    from infra.program.common.config import settings_from_raw

    config = stack_config({**BASE, **EVERYTHING})
    settings = settings_from_raw(config.values, set())[0]
    monkeypatch.setattr("infra.program.common.config.load_settings", lambda: (settings, None))
    monkeypatch.setattr(stack, "build_platform", pytest.fail)  # nothing may be registered
    with pytest.raises(
        pulumi.RunError, match=r"^vendored KServe v0\.20\.0: infra/manifests/kserve/kserve\.yaml: "
    ):
        stack.main()


def test_a_stack_with_its_own_source_does_not_read_the_vendored_file(tampered):
    values = {**BASE, **EVERYTHING, "kserveSource": "/srv/mirror/kserve.yaml"}
    assert [c.name for c in vendored.applied(_settings(values))] == [TRAINING_OPERATOR, TRAINER]


def _settings(values):
    from infra.program.common.config import settings_from_raw

    config = stack_config(values)
    return settings_from_raw(config.values, set())[0]


@pytest.mark.parametrize("name", COMPONENTS)
def test_the_version_keys_default_to_the_vendored_versions(name):
    assert Settings.model_fields[VERSION_KEYS[name]].default == vendored.vendored(name).version


def test_the_readme_of_the_directory_names_each_modules_version_and_commit():
    readme = (MANIFESTS / "README.md").read_text()
    for name, component in vendored.index().items():
        (row,) = [line for line in readme.splitlines() if line.startswith(f"| `{name}/` |")]
        assert f"{component.version} " in row
        for module in component.modules:
            assert f"`{module['module']}` {module['version']}, `{module['commit']}`" in row, (name, module)
            assert re.fullmatch(r"[0-9a-f]{40}", module["commit"])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"operatorVersion": "v1.9.3"},
            "config ddp-mnist:operatorVersion=v1.9.3 is invalid: must be v1.9.4, the version vendored in "
            "infra/manifests/training-operator, unless operatorSource names the manifests of v1.9.3; to "
            "upgrade, raise the pin and vendor it again (`make manifests`, infra/manifests/README.md)",
        ),
        (
            {
                "stackRole": "platform",
                "operatorInstall": False,
                "trainerInstall": True,
                "trainerVersion": "v2.2.0",
            },
            "config ddp-mnist:trainerVersion=v2.2.0 is invalid: must be v2.3.0, the version vendored in "
            "infra/manifests/kubeflow-trainer, unless trainerSource names the manifests of v2.2.0; to "
            "upgrade, raise the pin and vendor it again (`make manifests`, infra/manifests/README.md)",
        ),
        (
            {
                "stackRole": "platform",
                "operatorInstall": False,
                "kserveInstall": True,
                "kserveVersion": "v0.19.0",
            },
            "config ddp-mnist:kserveVersion=v0.19.0 is invalid: must be v0.20.0, the version vendored in "
            "infra/manifests/kserve/kserve.yaml, unless kserveSource names the manifests of v0.19.0; to "
            "upgrade, raise the pin and vendor it again (`make manifests`, infra/manifests/README.md)",
        ),
    ],
)
def test_a_version_that_is_not_vendored_needs_a_source(values, message, tmp_path):
    mocks = RecordingMocks()
    from infra.program.checks import ConfigError

    with pytest.raises(ConfigError) as raised:
        run_program(stack_config({**BASE, **values}), mocks)
    assert str(raised.value) == message
    assert mocks.registrations == []
    source = {"operatorVersion": "operatorSource", "trainerVersion": "trainerSource"}
    key = next(k for k in values if k.endswith("Version"))
    mirror = "/srv/mirror/overlay"  # the provider reads a kustomize source
    if key == "kserveVersion":  # the program reads KServe's, to leave out what the bundle never uses
        mirror = str(tmp_path / "kserve.yaml")
        Path(mirror).write_text("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")
    render_config({**values, source.get(key, "kserveSource"): mirror})  # another version from a source


# --- what the stack applies from them ------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream():
    """The three installs of a platform stack, object by object as it applies them."""
    return {i.vendored.name: i for i in render_config(EVERYTHING).upstream}


def test_each_install_keeps_the_component_type_and_name_existing_stacks_have(upstream):
    """The URN of every object is its parents' types and its name: the same Directory and ConfigFile
    under the same components as when they read upstream's git URL and release download."""
    found = {
        name: (i.registration.type, i.registration.name, i.registration.parent)
        for name, i in upstream.items()
    }
    assert found == {
        TRAINING_OPERATOR: (
            "kubernetes:kustomize/v2:Directory",
            "training-operator-manifests",
            "training-operator",
        ),
        TRAINER: ("kubernetes:kustomize/v2:Directory", "trainer-v2-manifests", "trainer-v2"),
        KSERVE: ("kubernetes:yaml/v2:ConfigFile", "kserve-manifests", "kserve"),
    }


def test_the_objects_are_named_as_the_provider_names_them(upstream):
    names = {o.name: o.type for o in upstream[TRAINING_OPERATOR].objects}
    assert names["training-operator-manifests:pytorchjobs.kubeflow.org"] == (
        "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
    )
    assert names["training-operator-manifests:kubeflow/training-operator"] == "kubernetes:apps/v1:Deployment"
    assert names["training-operator-manifests:kubeflow"] == "kubernetes:core/v1:Namespace"
    kserve = {o.name: o.type for o in upstream[KSERVE].objects}
    assert kserve["kserve-manifests:kserve/serving-cert"] == "kubernetes:cert-manager.io/v1:Certificate"


@pytest.mark.parametrize("name", COMPONENTS)
def test_every_crd_is_kept_on_destroy_and_only_the_webhook_secrets_ignore_their_data(upstream, name):
    objects = upstream[name].objects
    crds = [o for o in objects if o.obj["kind"] == "CustomResourceDefinition"]
    assert crds and all(o.options == {"retainOnDelete": True} for o in crds)
    ignoring = sorted(o.name for o in objects if "ignoreChanges" in o.options)
    assert ignoring == {
        TRAINING_OPERATOR: ["training-operator-manifests:kubeflow/training-operator-webhook-cert"],
        TRAINER: [
            "trainer-v2-manifests:kubeflow-system/jobset-webhook-server-cert",
            "trainer-v2-manifests:kubeflow-system/kubeflow-trainer-webhook-cert",
        ],
    }.get(name, [])


def test_the_applied_operator_deployment_carries_the_restricted_template(upstream):
    (deployment,) = [o.obj for o in upstream[TRAINING_OPERATOR].objects if o.obj["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]
    assert "runAsNonRoot: true" in pod["metadata"]["annotations"][TEMPLATE_ANNOTATION]
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"
    assert "--pytorch-init-container-template-file=/etc/config/initContainer.yaml" in container["args"]


def test_the_applied_kserve_config_defaults_to_standard_mode(upstream):
    (config,) = [o.obj for o in upstream[KSERVE].objects if o.obj["kind"] == "ConfigMap"]
    assert config["metadata"]["name"] == "inferenceservice-config"
    assert config["data"]["deploy"] == '{"defaultDeploymentMode": "Standard"}'


@pytest.mark.parametrize("name", COMPONENTS)
def test_the_applied_builtin_objects_pass_the_strict_schema(upstream, name):
    """After the transforms: no CRD (their size makes this slow; the API server checks them)."""
    for applied in upstream[name].objects:
        if is_builtin(applied.obj) and applied.obj["kind"] != "CustomResourceDefinition":
            kubernetes_validate.validate(applied.obj, "1.33.0", strict=True)


def test_a_parsed_manifest_is_kept_by_its_digest_and_read_back_equal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`upstream.documents` keeps each manifest's objects on disk by its sha256: a second process reads
    them back equal to a parse of the file; a cache it cannot write only costs the parse again."""
    manifest = tmp_path / "objects.yaml"
    manifest.write_text("kind: A\nmetadata: {name: a}\n---\n---\nkind: B\nlist: [1, 'x', true]\n")
    digest = vendored.file_sha256(manifest)
    monkeypatch.setenv("DDP_MNIST_CACHE", str(tmp_path / "cache"))
    parsed = parse_manifest.__wrapped__(str(manifest), digest)
    kept = tmp_path / "cache" / "parsed" / f"{digest}.json"
    assert json.loads(kept.read_text()) == [
        {"kind": "A", "metadata": {"name": "a"}},
        {"kind": "B", "list": [1, "x", True]},
    ]
    assert [p.name for p in kept.parent.iterdir()] == [kept.name]  # nothing half-written beside it
    kept.write_text('[{"kind": "FromTheCache"}]')  # what a second process reads: the file, not a parse
    assert json.loads(parse_manifest.__wrapped__(str(manifest), digest)) == [{"kind": "FromTheCache"}]
    (tmp_path / "blocked").write_text("a file where the cache's directory would be")
    monkeypatch.setenv("DDP_MNIST_CACHE", str(tmp_path / "blocked"))
    assert parse_manifest.__wrapped__(str(manifest), digest) == parsed
