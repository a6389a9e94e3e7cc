"""``python -m trainer.seed``: put MNIST where the trainer's ``--data`` expects it, once.

    python -m trainer.seed --to ROOT --mirror URL [--mirror URL ...]  # HTTPS, canonical sha256
    python -m trainer.seed --to ROOT --from s3://BUCKET/PREFIX        # the layout --data s3:// reads
    python -m trainer.seed --to ROOT --from DIR                       # a local copy (.gz or raw)
    python -m trainer.seed --to s3://BUCKET/PREFIX --from DIR         # fill a bucket once

ROOT gets ROOT/MNIST/raw/ with the four .gz files and a SHA256SUMS; a bucket gets them under PREFIX/.
Idempotent: when the target already holds the four files and a SHA256SUMS they verify against, it
says so and exits 0 without contacting any source; a file that is missing or does not verify is
named and fetched again. Every file is checked before anything is written (a mirror's file against
MNIST's canonical sha256, a bucket's against its SHA256SUMS, every IDX file decoded); each write is
atomic and SHA256SUMS is written last.

Mirrors serve <name>.gz beneath their URL, https only, tried in order for each file (one line per
failed attempt). When all fail for a file: exit 3 if any mirror served wrong content (a bad gzip, a
wrong sha256: a retry gets the same bytes), exit 205 if every failure was a network or HTTP error.
S3 endpoint and keys come from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from trainer.cli import OneLineArgumentParser, path_or_s3_url
from trainer.errors import (
    EXIT_DATA,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_S3_CREDENTIALS,
    EXIT_S3_UNREACHABLE,
    EXIT_USAGE,
    DataError,
    TrainerError,
    write_line,
)
from trainer.fsio import atomic_write_bytes
from trainer.mnist_files import (
    FILES,
    SUMS_FILE,
    decode_idx,
    find_file,
    format_sums,
    read_sums,
    resolve_data_dir,
    sha256_file,
)

PROG = "python -m trainer.seed"
GZ_FILES = tuple(f"{name}.gz" for name in FILES)
EXIT_CODES = {
    EXIT_OK: "seeded, or the target already held verified MNIST",
    EXIT_INTERNAL: "internal error",
    EXIT_USAGE: "bad flags (an http:// mirror, a URL without a bucket)",
    EXIT_DATA: "a source's data is missing or corrupt, or a mirror served wrong content",
    EXIT_S3_CREDENTIALS: "S3 credentials missing or rejected",
    EXIT_S3_UNREACHABLE: "source unreachable: the S3 endpoint, or every mirror of a file failed with a "
    "network or HTTP error (a retry may help)",
}


def say(message: str) -> None:
    write_line(f"trainer.seed: {message}", sys.stdout)


def warn(message: str) -> None:
    write_line(f"trainer.seed: {message}")


def https_url(text: str) -> str:
    """A mirror's base URL: https with a host (an argparse type)."""
    parts = urlsplit(text)
    if parts.scheme.lower() != "https" or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an https://HOST/... URL; mirrors are fetched over https only"
        )
    return text


def build_parser() -> OneLineArgumentParser:
    parser = OneLineArgumentParser(
        prog=PROG,
        description=__doc__,
        epilog="exit codes:\n" + "".join(f"  {code}  {text}\n" for code, text in EXIT_CODES.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.label = "trainer.seed"
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--from",
        dest="source",
        metavar="DIR|s3://BUCKET/PREFIX",
        type=path_or_s3_url,
        help="a directory holding the four MNIST files (.gz or raw, in DIR or DIR/MNIST/raw), or "
        "s3://BUCKET/PREFIX holding the four .gz files and SHA256SUMS",
    )
    source.add_argument(
        "--mirror",
        dest="mirrors",
        metavar="URL",
        action="append",
        type=https_url,
        help="an HTTPS base URL serving the four <name>.gz files; repeat it to add fallbacks, tried in order",
    )
    parser.add_argument(
        "--to",
        required=True,
        metavar="ROOT|s3://BUCKET/PREFIX",
        type=path_or_s3_url,
        help="dataset root directory (files go to ROOT/MNIST/raw/) or s3://BUCKET/PREFIX",
    )
    return parser


def gzipped_sources(source_dir: Path, workdir: Path) -> dict[str, Path]:
    """``{name.gz: path}`` for the four files, validated; raw files are gzipped into workdir."""
    directory = resolve_data_dir(source_dir)
    files: dict[str, Path] = {}
    for name in FILES:
        path = find_file(directory, name)
        assert path is not None  # resolve_data_dir checked all four
        decode_idx(path)
        if path.suffix != ".gz":
            packed = workdir / f"{name}.gz"
            packed.write_bytes(gzip.compress(path.read_bytes(), mtime=0))
            path = packed
        files[f"{name}.gz"] = path
    return files


def fetch(
    source: str | None, mirrors: Sequence[str] | None, needed: Sequence[str], workdir: Path
) -> dict[str, Path]:
    """``{name.gz: path in workdir}`` for each of ``needed`` (names from FILES), from the source."""
    if mirrors:
        from trainer.mirrors import fetch_from_mirrors

        return fetch_from_mirrors(mirrors, needed, workdir, say, warn)
    assert source is not None  # argparse requires --from or --mirror
    if source.startswith("s3://"):
        from trainer.s3 import S3Location, fetch_dataset

        root = fetch_dataset(S3Location.parse(source), workdir / "s3", report=say)
        files = gzipped_sources(root, workdir)
    else:
        files = gzipped_sources(Path(source), workdir)
    return {name: path for name, path in files.items() if name.removesuffix(".gz") in needed}


@dataclass(frozen=True)
class DirectoryTarget:
    """``ROOT/MNIST/raw/``: the layout ``--data ROOT`` reads."""

    raw: Path

    @property
    def where(self) -> str:
        return str(self.raw)

    def verified(self, report: Callable[[str], None]) -> dict[str, str]:
        """``{name.gz: sha256}`` of the files its SHA256SUMS verifies; reports the others.

        Without a SHA256SUMS (a new volume) nothing is verified and nothing is reported.
        """
        sums_path = self.raw / SUMS_FILE
        if not sums_path.is_file():
            return {}
        try:
            sums = read_sums(sums_path)
        except (DataError, UnicodeDecodeError):
            report(f"{sums_path} is not a {SUMS_FILE} file; seeding every file again")
            return {}
        verified: dict[str, str] = {}
        for name in GZ_FILES:
            path = self.raw / name
            if name not in sums:
                report(f"{path} is not listed in {SUMS_FILE}; seeding again")
            elif not path.is_file():
                report(f"{path} is missing; seeding again")
            elif (actual := sha256_file(path)) != sums[name]:
                report(f"{path} does not match {SUMS_FILE}; seeding again")
            else:
                verified[name] = actual
        return verified

    def write(self, files: dict[str, Path], kept: dict[str, str]) -> None:
        """Each file atomically, then SHA256SUMS (the kept files' sums and the new ones) last."""
        sums = dict(kept)
        for name, path in files.items():
            data = path.read_bytes()
            atomic_write_bytes(self.raw / name, data)
            sums[name] = hashlib.sha256(data).hexdigest()
        atomic_write_bytes(self.raw / SUMS_FILE, format_sums(sums).encode())


@dataclass(frozen=True)
class BucketTarget:
    """``s3://BUCKET/PREFIX/``: the layout ``--data s3://BUCKET/PREFIX`` reads."""

    url: str

    @property
    def where(self) -> str:
        return self.url

    def verified(self, report: Callable[[str], None]) -> dict[str, str]:
        from trainer.s3 import S3Location, verified_objects

        return verified_objects(S3Location.parse(self.url), report)

    def write(self, files: dict[str, Path], kept: dict[str, str]) -> None:
        from trainer.s3 import S3Location, upload_dataset

        upload_dataset(S3Location.parse(self.url), files, kept)


def target_for(destination: str) -> DirectoryTarget | BucketTarget:
    if destination.startswith("s3://"):
        from trainer.s3 import S3Location

        return BucketTarget(S3Location.parse(destination).url())
    return DirectoryTarget(Path(destination) / "MNIST" / "raw")


def seed(source: str | None, mirrors: Sequence[str] | None, destination: str) -> str:
    """Seed what ``destination`` lacks; returns the line that says what was done.

    The target is checked first, so a target that already holds verified MNIST needs no source.
    """
    target = target_for(destination)
    kept = target.verified(warn)
    needed = [name for name in FILES if f"{name}.gz" not in kept]
    if not needed:
        return f"{target.where} already holds MNIST (verified against {SUMS_FILE}); nothing to do"
    with tempfile.TemporaryDirectory(prefix="mnist-seed-") as tmp:
        files = fetch(source, mirrors, needed, Path(tmp))
        target.write(files, kept)
    count = f"{len(files)} file" + ("s" if len(files) != 1 else "")
    return f"wrote {count} and {SUMS_FILE} to {target.where}"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        done = seed(args.source, args.mirrors, args.to)
    except TrainerError as error:
        sys.stdout.flush()
        write_line(error.one_line("trainer.seed"))
        return error.exit_code
    say(done)
    return 0


if __name__ == "__main__":
    sys.exit(main())
