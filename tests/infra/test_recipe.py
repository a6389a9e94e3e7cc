"""One recipe: a stack that sets no training key runs the trainer's own defaults (trainer/cli.py),
the ones docs/BENCHMARKS.md measures, flag by flag as infra/program/job/podspec.py passes them."""

from __future__ import annotations

import pytest

from infra.program.common.config import settings_from_raw
from infra.program.common.meta import JobNames
from infra.program.job.podspec import trainer_args
from infra.program.settings import Settings
from infra.stackconfig import load_stack
from trainer.cli import build_parser

# Settings field -> the trainer flag's argparse dest (podspec.trainer_args passes one as the other).
FLAGS = {
    "job_epochs": "epochs",
    "job_batch_size": "batch_size",
    "job_scaling": "scaling",
    "job_learning_rate": "lr",
    "job_lr_scaling": "lr_scaling",
    "job_checkpoint_every": "checkpoint_every",
    "job_seed": "seed",
    "job_dist_timeout_seconds": "dist_timeout",
}


@pytest.mark.parametrize(("field", "dest"), FLAGS.items())
def test_a_training_keys_default_is_the_trainers_default(field: str, dest: str) -> None:
    defaults = {action.dest: action.default for action in build_parser()._actions}
    assert Settings.model_fields[field].default == defaults[dest], Settings.model_fields[field].alias


def test_every_flag_the_stack_passes_is_compared() -> None:
    stack = load_stack("dev")
    settings, _ = settings_from_raw(stack.values, set(stack.secret_keys))
    names = JobNames(job="mnist-r1", service="mnist-r1", checkpoint_dir="/checkpoints/mnist-r1")
    passed = {a.split("=", 1)[0].removeprefix("--").replace("-", "_") for a in trainer_args(settings, names)}
    where = {"data", "cache_dir", "checkpoint_dir", "backend", "export_to"}  # the stack's, not a recipe
    assert set(FLAGS.values()) == passed - where
