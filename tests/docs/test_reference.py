"""The generated reference (docs/reference/, `python -m infra.reference`) is current, and what it
is generated from is complete: every command's exit-code table covers what its `main` returns and is
what its `--help` lists; every output a shipped stack exports is registered; every Make target says what
it does."""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from infra import reference
from infra.local import cli as local_cli
from infra.localcluster import __main__ as realcluster
from infra.localcluster import rehearse as rehearse_cli
from infra.localcluster.build import EXIT_BUILD_FAILED, EXIT_NO_GO
from infra.localcluster.node import __main__ as real_node_cli
from infra.program.common.outputs import OUTPUTS, outputs_of
from infra.program.settings import PROJECT
from infra.reference import __main__ as reference_cli
from infra.reference import exitcodes, maketargets
from infra.reference.reads import run_stack, shipped_runs
from infra.review import render
from infra.stackconfig import StackConfig, from_mapping, load_stack
from trainer import cli as trainer_cli
from trainer import errors, seed
from trainer.serve import cli as serve_cli


@pytest.fixture(scope="module")
def generated() -> dict[Path, str]:
    return reference.pages()


def test_every_reference_page_is_current(generated):
    stale = [str(p.relative_to(reference.REFERENCE_DIR)) for p in reference.out_of_date(generated=generated)]
    assert stale == [], f"out of date: {stale}; run {reference.COMMAND}"


def test_check_names_the_stale_page_and_the_command_and_exits_1(generated, tmp_path, capsys, monkeypatch):
    copies = {tmp_path / path.name: text for path, text in generated.items()}
    for path, text in copies.items():
        path.write_text(text)
    stale = tmp_path / "policy.md"
    stale.write_text(copies[stale] + "a hand edit\n")
    assert reference.out_of_date(tmp_path, copies) == [stale]
    monkeypatch.setattr(reference_cli, "out_of_date", lambda: [reference.REFERENCE_DIR / "policy.md"])
    assert reference_cli.main(["--check"]) == reference_cli.EXIT_STALE
    assert capsys.readouterr().err == (
        "reference: docs/reference/policy.md is out of date; run python -m infra.reference\n"
    )


# --- exit codes ----------------------------------------------------------------------------------


def returned_codes(function: Any) -> set[int]:
    """Every exit code a CLI's `main` can return: its `return` values, constants resolved in its module
    (a BuildError's `code`: the codes build.py raises it with)."""
    module = sys.modules[function.__module__]
    tree = ast.parse(inspect.getsource(function))
    codes: set[int] = set()

    def value(node: ast.expr) -> None:
        if isinstance(node, ast.Constant):
            codes.add(node.value)
        elif isinstance(node, ast.Name):
            codes.add(getattr(module, node.id))
        elif isinstance(node, ast.IfExp):
            value(node.body)
            value(node.orelse)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            codes.update(returned_codes(getattr(module, node.func.id)))  # what the called function returns
        elif ast.unparse(node) == "error.code" and module in (realcluster, real_node_cli, rehearse_cli):
            codes.update((EXIT_NO_GO, EXIT_BUILD_FAILED))
        else:
            raise AssertionError(f"cannot read the exit code {ast.unparse(node)}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None:
            value(node.value)
    return codes


MAINS = {
    "Render": render.main,
    "Local run": local_cli.main,
    "Local cluster": realcluster.main,
    "Real node": real_node_cli.main,
    "Rehearse": rehearse_cli.main,
    "Reference": reference_cli.main,
}


@pytest.mark.parametrize("title", sorted(MAINS))
def test_each_commands_table_covers_every_code_its_main_returns(title):
    (command,) = [c for c in exitcodes.COMMANDS if c.title == title]
    assert returned_codes(MAINS[title]) <= set(exitcodes.meanings(command))


def test_the_trainers_table_is_every_exit_constant_of_trainer_errors():
    constants = {v for k, v in vars(errors).items() if k.startswith("EXIT_") and isinstance(v, int)}
    assert constants == set(errors.EXIT_CODE_MEANINGS)


def test_every_command_lists_a_usage_error_as_exit_2():
    """argparse stops on a bad flag with exit 2: each table says so."""
    for command in exitcodes.COMMANDS:
        assert 2 in exitcodes.meanings(command), command.title


def test_the_renders_usage_row_names_every_flag_an_exit_config_error_names():
    tree = ast.parse(inspect.getsource(render.main))
    flags: set[str] = set()
    for node in ast.walk(tree):
        last = node.body[-1] if isinstance(node, ast.If) else None
        if (
            isinstance(last, ast.Return)
            and last.value is not None
            and ast.unparse(last.value) == "EXIT_CONFIG"
        ):
            flags |= set(re.findall(r"--[a-z][a-z-]*", ast.unparse(ast.Module(node.body, []))))
    assert flags
    for flag in flags:
        assert f"`{flag}" in render.EXIT_CODE_MEANINGS[render.EXIT_CONFIG], flag


def _help(title: str, capsys: Any) -> str:
    parsers = {
        "Trainer": trainer_cli.build_parser,
        "Seed": seed.build_parser,
        "Model server": serve_cli.build_parser,
        "Local run": local_cli.build_parser,
        "Reference": reference_cli.build_parser,
    }
    if title in parsers:
        return parsers[title]().format_help()
    with pytest.raises(SystemExit) as stop:
        MAINS[title](["--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


def listed_codes(text: str) -> dict[int, str]:
    """The exit codes a `--help` lists: `exit codes:` and a line per code, or the trainer's one sentence
    `Exit codes: 0 ok, 1 internal error, ...`."""
    if "\nexit codes:\n" in text:
        block = text.split("\nexit codes:\n", 1)[1]
        return {int(m[0]): m[1] for m in re.findall(r"^  (\d+)  (.*)$", block, re.MULTILINE)}
    (sentence,) = re.findall(r"Exit codes: (.*)\.$", " ".join(text.split()))
    return {int(code): meaning for code, meaning in (e.split(" ", 1) for e in sentence.split(", "))}


@pytest.mark.parametrize("title", [c.title for c in exitcodes.COMMANDS])
def test_each_commands_help_lists_exactly_its_exit_codes(title, capsys):
    (command,) = [c for c in exitcodes.COMMANDS if c.title == title]
    assert listed_codes(_help(title, capsys)) == exitcodes.meanings(command)


# --- outputs and config keys ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs():
    return shipped_runs()


def test_every_shipped_stack_exports_registered_outputs_of_its_role_only(runs):
    for run in runs:
        assert run.outputs <= outputs_of(run.role), (run.stack, sorted(run.outputs - outputs_of(run.role)))


def test_every_registered_output_is_exported_by_some_configuration(runs):
    """None stale: the shipped stacks export all but what only another configuration exports (a platform
    that patches an existing operator)."""
    patching = from_mapping(
        "patch",
        {
            f"{PROJECT}:{k}": v
            for k, v in {
                "stackRole": "platform",
                "operatorInstall": False,
                "operatorPatchExisting": True,
            }.items()
        },
    )
    exported = set().union(*(run.outputs for run in runs), run_stack(patching).outputs)
    assert exported == set(OUTPUTS)


def test_an_output_said_to_be_always_exported_is_exported_by_every_stack_of_its_roles(runs):
    """The reference's "always" is a claim about every configuration of a role: each shipped stack, and
    the prerequisites stack without its NFS storage (`prerequisitesStorage: none`), exports it."""
    prereqs = load_stack("dev-prereqs")
    without_nfs = StackConfig(
        "dev-prereqs-none", {**prereqs.values, f"{PROJECT}:prerequisitesStorage": "none"}, prereqs.secret_keys
    )
    missing = {
        (run.stack, name)
        for run in [*runs, run_stack(without_nfs)]
        for name, output in OUTPUTS.items()
        if not output.when and run.role in output.roles and name not in run.outputs
    }
    assert missing == set()


def test_a_key_is_read_by_a_role_only_where_its_value_is_used(runs):
    """Validation reads every key; the reference counts only what builds the stack: a platform stack uses
    no training parameter, a job stack does."""
    by_role = {run.role: run.keys for run in runs}
    assert "jobEpochs" in by_role["job"] and "jobEpochs" not in by_role["platform"]
    assert "minioImage" in by_role["prerequisites"] and "minioImage" not in by_role["job"]


# --- make targets --------------------------------------------------------------------------------


def test_every_make_target_has_a_description():
    found = maketargets.targets()
    assert {"run", "test", "schema", "reference"} <= set(found)
    assert [name for name, description in found.items() if not description] == []
