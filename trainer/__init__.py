"""Distributed MNIST training for the Pulumi + Kubernetes bundle.

Entry points: ``python -m trainer`` (train), ``python -m trainer.launch`` (torchrun wrapper used by
the pods), ``python -m trainer.seed`` (put MNIST into a directory or an S3 bucket, from a local copy,
a bucket or HTTPS mirrors). ``--export-to`` uploads the trained model (:mod:`trainer.export`).
Exit codes are defined in :mod:`trainer.errors`.
"""

from __future__ import annotations

from trainer.errors import (
    EXIT_DATA,
    EXIT_EXPORT,
    EXIT_INTERNAL,
    EXIT_MASTER_UNREACHABLE,
    EXIT_OK,
    EXIT_PEER_LOST,
    EXIT_PREEMPTED,
    EXIT_S3_CREDENTIALS,
    EXIT_S3_UNREACHABLE,
    EXIT_USAGE,
    RETRYABLE_EXIT_CODES,
)

__version__ = "0.1.0"
__all__ = [
    "EXIT_DATA",
    "EXIT_EXPORT",
    "EXIT_INTERNAL",
    "EXIT_MASTER_UNREACHABLE",
    "EXIT_OK",
    "EXIT_PEER_LOST",
    "EXIT_PREEMPTED",
    "EXIT_S3_CREDENTIALS",
    "EXIT_S3_UNREACHABLE",
    "EXIT_USAGE",
    "RETRYABLE_EXIT_CODES",
]
