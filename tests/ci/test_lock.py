"""constraints.txt: the full dependency closure that every install uses, and never stale.

Stale means: locked from other requirements than pyproject.toml and policy/requirements.txt list now,
a pinned requirement there with another version here, or a distribution that the environment the
tests run in (.venv) needs, installed at a version the constraints do not pin. Each fails here with
`make lock` as the fix; nothing here reaches the package index.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import metadata

import pytest
from packaging.requirements import Requirement

from constraints.lock import (
    CONSTRAINTS,
    DEPLOY,
    DIGEST_PREFIX,
    PLATFORM,
    POLICY_REQUIREMENTS,
    ROOT,
    TORCH,
    canonical,
    inputs_digest,
    left_out,
    policy_requirements,
    project,
    read_pins,
)
from infra.program.common import yamlio

PINS = read_pins()
# Extras that a development environment may lack (none: `make run` and `make test` install them all).
OPTIONAL_EXTRAS: set[str] = set()
FIX = "constraints.txt is stale: run `make lock` (then `make test` reinstalls .venv from it)"


def top_level() -> list[tuple[str, Requirement]]:
    """(where, requirement) for every requirement in pyproject.toml and of the policy pack."""
    groups = {"project": project().get("dependencies", []), **project().get("optional-dependencies", {})}
    found = [(f"pyproject.toml [{group}]", Requirement(r)) for group, reqs in groups.items() for r in reqs]
    return found + [("policy/requirements.txt", Requirement(r)) for r in policy_requirements()]


def pin_mismatches(requirements: Iterable[tuple[str, Requirement]], pins: dict[str, str]) -> list[str]:
    problems = []
    for where, req in requirements:
        name = canonical(req.name)
        if left_out(name):
            continue
        if name not in pins:
            problems.append(f"{req} ({where}): not in constraints.txt")
        elif not req.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{req} ({where}): constraints.txt pins {name}=={pins[name]}")
    return problems


def installed_closure(roots: Iterable[tuple[str, Requirement]]) -> tuple[dict[str, str], list[str]]:
    """({name: installed version} of every distribution the roots need here, [unmet requirements]).

    Follows the installed distributions' own requirements (markers evaluated for this interpreter and
    the extras asked for), through torch but not into its platform wheels. Leftovers of an earlier
    install that nothing needs any more are not reached, so they are no failure.
    """
    found: dict[str, str] = {}
    unmet: list[str] = []
    seen: set[tuple[str, frozenset[str]]] = set()
    queue = list(roots)
    while queue:
        where, req = queue.pop()
        name = canonical(req.name)
        if (name, frozenset(req.extras)) in seen or PLATFORM.match(name):
            continue
        seen.add((name, frozenset(req.extras)))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            if not where.endswith(tuple(f"[{extra}]" for extra in OPTIONAL_EXTRAS)):
                unmet.append(f"{req} ({where}): not installed")
            continue
        if not req.specifier.contains(dist.version, prereleases=True):
            unmet.append(f"{req} ({where}): {dist.version} installed")
        found[name] = dist.version
        for line in dist.requires or []:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in req.extras or {""}):
                queue.append((f"{name} {dist.version}", sub))
    return found, unmet


def unpinned(installed: dict[str, str], pins: dict[str, str]) -> list[str]:
    return [
        f"{name} {version} is installed; constraints.txt pins {pins.get(name, 'no version of it')}"
        for name, version in sorted(installed.items())
        if not left_out(name) and pins.get(name) != version
    ]


def test_the_constraints_were_locked_from_the_current_requirements():
    digests = [line for line in CONSTRAINTS.read_text().splitlines() if line.startswith(DIGEST_PREFIX)]
    assert digests == [DIGEST_PREFIX + inputs_digest()], (
        f"{FIX}: pyproject.toml's extras or policy/requirements.txt changed since it was locked"
    )


def test_every_pin_of_pyproject_and_the_policy_pack_is_in_the_constraints():
    problems = pin_mismatches(top_level(), PINS)
    assert problems == [], FIX + ":\n  " + "\n  ".join(problems)


def test_the_constraints_cover_every_distribution_the_tests_run_with():
    installed, unmet = installed_closure(top_level())
    assert unmet == [], "this environment is not what pyproject.toml asks for: run `make test`\n  " + (
        "\n  ".join(unmet)
    )
    # The environment reached through every layer: the program, the trainer, the test tools.
    assert {"grpcio", "protobuf", "pydantic-core", "sympy", "setuptools", "pytest"} <= set(installed)
    problems = unpinned(installed, PINS)
    assert problems == [], FIX + ":\n  " + "\n  ".join(problems)


def test_a_changed_pin_or_an_unpinned_dependency_is_reported_as_stale():
    requirements = [
        ("pyproject.toml [infra]", Requirement("pulumi==3.272.0")),
        ("pyproject.toml [trainer]", Requirement("torch==2.13.0")),
        ("policy/requirements.txt", Requirement("protobuf~=5.29.5")),
    ]
    assert pin_mismatches(requirements, {"pulumi": "3.272.0", "protobuf": "5.29.6"}) == []
    assert pin_mismatches(requirements, {"pulumi": "3.271.0"}) == [
        "pulumi==3.272.0 (pyproject.toml [infra]): constraints.txt pins pulumi==3.271.0",
        "protobuf~=5.29.5 (policy/requirements.txt): not in constraints.txt",
    ]
    installed, _ = installed_closure(top_level())
    assert unpinned(installed, dict(installed)) == []
    pins = dict(installed, grpcio="0.0.1")
    del pins["pydantic-core"]
    assert unpinned(installed, pins) == [
        f"grpcio {installed['grpcio']} is installed; constraints.txt pins 0.0.1",
        f"pydantic-core {installed['pydantic-core']} is installed; constraints.txt pins no version of it",
    ]


def test_the_constraints_pin_exact_versions_and_leave_out_the_project_and_torch():
    lines = [line for line in CONSTRAINTS.read_text().splitlines() if not line.startswith("#")]
    assert lines and all(re.fullmatch(r"[a-z0-9-]+==[0-9][0-9a-z.+!-]*", line) for line in lines), lines
    names = [line.split("==")[0] for line in lines]
    assert names == sorted(set(names)) == [canonical(n) for n in names]
    assert canonical(project()["name"]) not in names
    assert TORCH.isdisjoint(names) and not [n for n in names if PLATFORM.match(n)]


def _pip_installs(text: str) -> list[str]:
    joined = text.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if "pip install" in line]


def test_every_install_is_constrained():
    makefile = (ROOT / "Makefile").read_text()
    installs = _pip_installs(makefile)
    constrained = [line for line in installs if "-c constraints.txt" in line]
    hashed = [line for line in installs if "--require-hashes" in line]
    project_alone = [line for line in installs if "--no-deps --no-build-isolation -e ." in line]
    # The MLflow server of the real-server tests: an environment of its own, with its own closure.
    mlflow_server = [line for line in installs if "-c constraints/mlflow-server.txt" in line]
    assert len(constrained) == 3 and len(hashed) == 2 and len(project_alone) == 1, installs
    assert len(mlflow_server) == 1, installs
    assert len(installs) == 7, installs
    # A new lock reinstalls every environment (the policy pack's also when its requirements change).
    for venv in ("$(VENV)", "$(INFRA_VENV)"):
        assert f"{venv}/.installed: pyproject.toml constraints.txt\n" in makefile
    assert "$(POLICY_VENV)/.installed: policy/requirements.txt constraints.txt\n" in makefile
    # The workflows install .venv-infra only through the Makefile; the policy pack from its requirements.
    workflows = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
    scripts = [
        step["run"] for path in workflows for job in yamlio.load(path.read_text())["jobs"].values()
        for step in job.get("steps", []) if "run" in step
    ]  # fmt: skip
    installs = [line for script in scripts for line in _pip_installs(script)]
    assert installs == []
    assert sum(script.count("make infra-env") for script in scripts) == 3  # CI's renders and previews
    assert sum(script.count("make deploy-env") for script in scripts) == 1  # pulumi-stack.yml's
    assert "-c ../constraints.txt" in POLICY_REQUIREMENTS.read_text().splitlines()


def test_the_image_installs_the_locked_versions():
    dockerfile = (ROOT / "Dockerfile").read_text()
    packages = [p for line in _pip_installs(dockerfile) for p in line.split() if "==" in p]
    assert packages
    for package in packages:
        name, _, version = package.partition("==")
        assert PINS.get(canonical(name)) == version, f"Dockerfile installs {package}; {FIX}"


@pytest.mark.parametrize("name", ["torch", "torchvision", "nvidia-cudnn-cu13", "cuda-toolkit", "triton"])
def test_torch_and_its_platform_wheels_are_left_out(name):
    assert left_out(name) and left_out(name.upper().replace("-", "_"))


def _hashed(path) -> dict[str, tuple[str, list[str]]]:
    """{name: (version, [sha256, ...])} of a hash-checked requirements file."""
    found: dict[str, tuple[str, list[str]]] = {}
    for entry in path.read_text().replace("\\\n", " ").splitlines():
        if not entry or entry.startswith("#"):
            continue
        pin, *options = entry.split()
        name, _, version = pin.partition("==")
        found[name] = (version, [o.removeprefix("--hash=sha256:") for o in options])
    return found


@pytest.mark.parametrize("path", sorted(DEPLOY), ids=lambda p: p.name)
def test_the_deploy_path_installs_hash_checked_files_at_the_locked_versions(path):
    """What `make deploy-env` installs with --require-hashes: every distribution pinned at
    constraints.txt's version with one sha256, locked from the current requirements."""
    digests = [line for line in path.read_text().splitlines() if line.startswith(DIGEST_PREFIX)]
    assert digests == [DIGEST_PREFIX + inputs_digest()], f"{path.name} is stale: run `make lock`"
    hashed = _hashed(path)
    assert hashed and list(hashed) == sorted(hashed)
    for name, (version, sums) in hashed.items():
        assert PINS.get(name) == version, f"{name}=={version}: constraints.txt pins {PINS.get(name)}"
        assert len(sums) == 1 and re.fullmatch(r"[0-9a-f]{64}", sums[0]), name
    assert canonical(project()["name"]) not in hashed and TORCH.isdisjoint(hashed)


def test_the_deploy_path_holds_the_program_and_the_pack_with_their_dependencies():
    infra, policy = (_hashed(path) for path in sorted(DEPLOY))
    # The infra extra's own pins, setuptools to install the project without a download, and the pack's.
    for requirement in project()["optional-dependencies"]["infra"]:
        assert canonical(Requirement(requirement).name) in infra, requirement
    assert "setuptools" in infra
    for requirement in policy_requirements():
        assert canonical(Requirement(requirement).name) in policy, requirement
    assert {"pulumi", "pulumi-kubernetes", "pydantic", "kubernetes", "grpcio"} <= set(infra)
    assert {"pulumi", "pulumi-policy", "protobuf"} <= set(policy)
