"""How the small scripts that stand in for training pods count their own runs.

Each run appends one byte to a file named after its pod, in a single write: a pod the supervisor stops
at any moment leaves every earlier count whole (``write_text`` truncates before it writes, so a pod
stopped between the two left an empty file, and its next run failed reading it).
"""

from __future__ import annotations

# Python statements: `n` is the number of earlier runs of the pod whose counter is sys.argv[1], and
# this run is counted. Needs `os` and `sys` imported.
COUNT_THIS_RUN = (
    "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT); "
    "n = os.fstat(fd).st_size; os.write(fd, b'x'); os.close(fd)"
)


def runs(counter: str) -> str:
    """A Python expression: how many runs the pod whose counter is the expression `counter` has counted."""
    return f"(os.path.getsize({counter}) if os.path.exists({counter}) else 0)"


# The stand-ins' interpreter flags: isolated and without site (`-I -S`), since they import only the
# standard library. A start costs about a third of one with the venv's site (10 ms against 27 ms here),
# and the restart tests start hundreds.
STAND_IN_FLAGS = ("-I", "-S")
