"""``python -m trainer.seed``: put MNIST where the trainer's ``--data`` expects it.

    python -m trainer.seed --from DIR --to ROOT              # ROOT/MNIST/raw/*.gz + SHA256SUMS
    python -m trainer.seed --from DIR --to s3://BUCKET/PREFIX
    python -m trainer.seed --download --to ...               # needs internet and torchvision

``--from DIR`` takes the four files from DIR or DIR/MNIST/raw, gzipped or raw (raw files are
gzipped on the way). Every file is decoded and checked before anything is written.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
from pathlib import Path

from trainer.data import (
    FILES,
    SUMS_FILE,
    find_file,
    format_sums,
    read_idx,
    resolve_data_dir,
    sha256_file,
)
from trainer.errors import TrainerError, write_line
from trainer.fsio import atomic_write_bytes


def gzipped_sources(source_dir: Path, workdir: Path) -> dict[str, Path]:
    """``{name.gz: path}`` for the four files, validated; raw files are gzipped into workdir."""
    directory = resolve_data_dir(source_dir)
    files: dict[str, Path] = {}
    for name in FILES:
        path = find_file(directory, name)
        assert path is not None  # resolve_data_dir checked all four
        read_idx(path)
        if path.suffix != ".gz":
            packed = workdir / f"{name}.gz"
            packed.write_bytes(gzip.compress(path.read_bytes(), mtime=0))
            path = packed
        files[f"{name}.gz"] = path
    return files


def seed_directory(files: dict[str, Path], root: Path) -> Path:
    target = root / "MNIST" / "raw"
    target.mkdir(parents=True, exist_ok=True)
    for name, path in files.items():
        atomic_write_bytes(target / name, path.read_bytes())
    sums = {name: sha256_file(target / name) for name in files}
    atomic_write_bytes(target / SUMS_FILE, format_sums(sums).encode())
    return target


def download_with_torchvision(workdir: Path) -> Path:
    """Fetch MNIST from the internet with torchvision (imported only here)."""
    try:
        from torchvision.datasets import MNIST
    except ImportError as error:
        raise TrainerError(f"--download needs torchvision ({error}); use --from DIR") from None
    MNIST(root=str(workdir), train=True, download=True)
    MNIST(root=str(workdir), train=False, download=True)
    return workdir / "MNIST" / "raw"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.seed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--from",
        dest="source",
        type=Path,
        help="directory holding the four MNIST files (.gz or raw)",
    )
    source.add_argument(
        "--download", action="store_true", help="download with torchvision first (needs internet)"
    )
    parser.add_argument("--to", required=True, help="dataset root directory or s3://BUCKET/PREFIX")
    return parser


def seed(source: Path | None, destination: str) -> str:
    with tempfile.TemporaryDirectory(prefix="mnist-seed-") as tmp:
        workdir = Path(tmp)
        source_dir = source if source is not None else download_with_torchvision(workdir / "dl")
        files = gzipped_sources(source_dir, workdir)
        if destination.startswith("s3://"):
            from trainer.s3 import S3Location, upload_dataset

            location = S3Location.parse(destination)
            upload_dataset(location, files)
            return location.url()
        return str(seed_directory(files, Path(destination)))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        where = seed(args.source, args.to)
    except TrainerError as error:
        write_line(error.one_line("trainer.seed"))
        return error.exit_code
    write_line(f"trainer.seed: wrote {len(FILES)} files and {SUMS_FILE} to {where}", sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
