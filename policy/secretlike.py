"""What looks like secret material in a container's env, command and args. Callers report names and
positions, never values.

A literal is secret-like when
- the env name, or the flag or `NAME=` it follows in command or args, names a secret: it contains
  PASSWORD, PASSWD, PASSPHRASE, SECRET, CREDENTIAL, APIKEY, ACCESSKEY, PRIVATEKEY, AUTHTOKEN or
  CONNECTIONSTRING (separators ignored: PGPASSWORD, AWS_SECRET_ACCESS_KEY, apiKey); or one of its words
  (split at _ - . and camelCase) ends in TOKEN (HF_TOKEN; not MAX_TOKENS or TOKENIZERS_PARALLELISM); or
  its last word is KEY, KEYS, PASS, PWD or AUTH (S3_KEY, DB_PASS, REDIS_AUTH), except the clearly
  non-secret keys of `PLAIN_KEYS` (PUBLIC_KEY, PARTITION_KEY, ...) and the working directory's PWD. A name
  whose last word says it holds where a secret is (`WHERE_WORDS`: AWS_WEB_IDENTITY_TOKEN_FILE,
  --password-file, SECRET_NAME) holds no secret itself;
- or the value looks like a credential wherever it is (`SECRET_VALUE`): an AWS access key id, a PEM
  private key, a URL with a password (scheme://user:password@), a GitHub, Hugging Face or Slack token, a
  JWT.
Empty values, booleans and plain references to another variable (`$(VAR)`, `$VAR`, `${VAR}`) are no
literals.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

SECRET_PARTS = (
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "SECRET",
    "CREDENTIAL",
    "APIKEY",
    "ACCESSKEY",
    "PRIVATEKEY",
    "AUTHTOKEN",
    "CONNECTIONSTRING",
)
SECRET_LAST_WORDS = frozenset({"KEY", "KEYS", "PASS", "PWD", "AUTH"})
# Keys that name data, not credentials (PARTITION_KEY, S3_OBJECT_KEY, ...).
PLAIN_KEYS = frozenset(
    {"PUBLIC", "PARTITION", "SORT", "HASH", "RANGE", "ROUTING", "CACHE", "OBJECT", "LABEL", "LOOKUP"}
)
WHERE_WORDS = frozenset(
    {"FILE", "FILES", "PATH", "DIR", "NAME", "ARN", "URL", "URI", "HOST", "ENDPOINT", "STDIN"}
)
SECRET_VALUE = re.compile(
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|\b[a-z][a-z0-9+.-]*://[^\s/:@$]+:(?!\$)[^\s/@]+@"
    r"|\bgh[pousr]_[A-Za-z0-9]{36}\b|\bgithub_pat_[A-Za-z0-9_]{22,}"
    r"|\bhf_[A-Za-z0-9]{30,}\b"
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"
    r"|\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.",
    re.I,
)
REFERENCE = re.compile(r"^\$(?:\(\w+\)|\{\w+\}|\w+)$")
PLAIN_VALUES = frozenset({"true", "false", "yes", "no", "on", "off"})
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_ASSIGNMENT = re.compile(r"^-*([A-Za-z_][\w.-]*)=(.*)$", re.S)


def words(name: str) -> list[str]:
    """A name's words, upper case: `dbPassword` -> DB, PASSWORD; `S3_KEY` -> S, 3, KEY."""
    return [w.upper() for w in _WORD.findall(name)]


def secret_name(name: str) -> bool:
    """Whether a variable or flag name says it holds secret material (see the module docstring)."""
    parts = words(name)
    if not parts or parts[-1] in WHERE_WORDS:
        return False
    joined = "".join(parts)
    if any(part in joined for part in SECRET_PARTS) or any(w.endswith("TOKEN") for w in parts):
        return True
    if parts[-1] not in SECRET_LAST_WORDS or parts in (["PWD"], ["OLDPWD"]):
        return False
    return len(parts) == 1 or parts[-2] not in PLAIN_KEYS


def literal(value: Any) -> bool:
    """A value written out, rather than empty, a boolean or a reference to another variable."""
    text = str(value).strip().strip("'\"") if value is not None else ""
    return bool(text) and text.lower() not in PLAIN_VALUES and not REFERENCE.match(text)


def secret_value(value: Any) -> bool:
    return value is not None and bool(SECRET_VALUE.search(str(value)))


def secret_env(name: str, value: Any) -> bool:
    """A literal env value under a secret name, or a value that looks like a credential."""
    return (secret_name(name) and literal(value)) or secret_value(value)


def _flag(token: str) -> str | None:
    """The name of a flag token (`--api-key` -> `api-key`), None for anything else."""
    return token.lstrip("-") if token.startswith("-") and "=" not in token else None


def _secret_tokens(tokens: Sequence[str]) -> bool:
    """`NAME=literal`, or `--flag literal`, with a secret name, among the words of one argument."""
    for i, token in enumerate(tokens):
        assignment = _ASSIGNMENT.match(token)
        if assignment and secret_name(assignment.group(1)) and literal(assignment.group(2)):
            return True
        flag = _flag(token)
        if flag and secret_name(flag) and i + 1 < len(tokens) and _flag_value(tokens[i + 1]):
            return True
    return False


def _flag_value(token: str) -> bool:
    return not token.startswith("-") and literal(token)


def secret_arguments(argv: Sequence[Any]) -> Iterator[int]:
    """The indexes of the command or args entries that hold a secret-like literal: a credential-looking
    value, `NAME=value` or `--flag value` with a secret name (in one entry, as a shell script writes it,
    or the flag and its value in two)."""
    texts = [str(arg) for arg in argv]
    for i, text in enumerate(texts):
        tokens = [t.strip("'\";") for t in text.split()]
        previous = _flag(texts[i - 1]) if i else None
        after_flag = previous is not None and secret_name(previous) and _flag_value(text)
        if secret_value(text) or _secret_tokens(tokens) or after_flag:
            yield i
