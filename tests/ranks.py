"""Which trainer rank a process is, from /proc: the tests that freeze or kill one rank find it here."""

from __future__ import annotations

from pathlib import Path


def rank_of_process(pid: int) -> int | None:
    """The global rank of trainer process ``pid``, or None when it is not one (or has ended).

    torchrun's own start (``--rank-start=exec``) gives each rank ``RANK`` and ``LOCAL_RANK`` in the
    environment it was started with (``/proc/PID/environ``; a pod's own ``RANK``, which the training
    operator sets to the node's rank, comes without ``LOCAL_RANK``). A rank forked by
    ``python -m trainer.launch`` keeps the launcher's start environment and is named
    ``trainer-r<RANK>`` instead (``/proc/PID/comm``).
    """
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    if name.startswith("trainer-r") and name.removeprefix("trainer-r").isdigit():
        return int(name.removeprefix("trainer-r"))
    if not any(entry.startswith(b"LOCAL_RANK=") for entry in environ):
        return None
    ranks = [entry.removeprefix(b"RANK=") for entry in environ if entry.startswith(b"RANK=")]
    return int(ranks[0]) if ranks and ranks[0].isdigit() else None
