"""Tools that exercise the program offline: render, effective objects, admission, the local scheduler."""


def exit_codes_epilog(meanings: dict[int, str]) -> str:
    """An argparse epilog listing a command's exit codes, one a line (with RawDescriptionHelpFormatter)."""
    return "exit codes:\n" + "".join(f"  {code}  {text}\n" for code, text in meanings.items())
