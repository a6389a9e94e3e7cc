"""`python -m infra.reference` writes docs/reference/*.md from the code; `--check` only compares.

Exit codes: 0 written (or, with --check, every page current); 1 --check: a page is out of date (one line
each, naming the page and the command that regenerates it); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys

from infra.epilog import exit_codes_epilog
from infra.program.settings import PROJECT_ROOT
from infra.reference import COMMAND, REFERENCE_DIR, out_of_date, pages
from infra.review.render import write_atomic

EXIT_STALE = 1
EXIT_USAGE = 2
EXIT_CODE_MEANINGS = {
    0: "pages written, or with --check every page current",
    EXIT_STALE: "--check: a page is out of date (one line names it and the command that fixes it)",
    EXIT_USAGE: "bad arguments",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=COMMAND,
        description=__doc__.split("\n\n")[0],
        epilog=exit_codes_epilog(EXIT_CODE_MEANINGS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="compare the pages with the code; write nothing")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.check:
        stale = out_of_date()
        for path in stale:
            print(
                f"reference: {path.relative_to(PROJECT_ROOT)} is out of date; run {COMMAND}", file=sys.stderr
            )
        return EXIT_STALE if stale else 0
    for path, text in pages(REFERENCE_DIR).items():
        write_atomic(path, text)
        print(f"wrote {path.relative_to(PROJECT_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
