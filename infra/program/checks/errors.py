"""The error a broken config rule raises, and the shape of a rule."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from infra.program.settings import Settings


class ConfigError(ValueError):
    """A bad stack config value; `str()` is the one line shown to the user."""

    def __init__(self, key: str, value: object, allowed: str, *, secret: bool = False) -> None:
        from infra.program.settings import PROJECT
        from infra.program.settings.tracking import URL_KEYS

        # A URL or endpoint with user info may hold a password: such a value is never shown.
        secret = secret or (key.rpartition(":")[2] in URL_KEYS and "@" in str(value))
        shown = "(unset)" if value is None else "[secret]" if secret else _show(value)
        self.key = key if ":" in key else f"{PROJECT}:{key}"
        self.secret = secret  # the value is not shown
        super().__init__(f"config {self.key}={shown} is invalid: must be {allowed}")


def _show(value: object) -> str:
    """Config values as typed on the CLI: strings bare (empty as ""), anything else as JSON."""
    import json

    if isinstance(value, str):
        return value or '""'
    return json.dumps(value)


Check = Callable[[Settings, bool], Iterator[ConfigError]]
