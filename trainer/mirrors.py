"""MNIST from HTTPS mirrors: each of the four canonical files, checked against its known sha256.

A mirror is a base URL that serves ``<name>.gz`` beneath it (``--mirror=https://host/mnist/`` gives
``https://host/mnist/train-images-idx3-ubyte.gz``). For each file the mirrors are tried in order; an
attempt fails on a network error, an HTTP error, a body that is not gzip, or raw (un-gzipped) content
whose sha256 is not the canonical one, and then the next mirror is tried, with one line that names
the mirror, the file and the reason.

When every mirror failed for a file, the seed exits 3 (data) if any of them answered with wrong
content: fetching again gets the same bytes, so a person must fix the mirror list. It exits 205
(unreachable, retryable) when every failure was a network or HTTP error.

Plain standard library: TLS is verified against the system's CA certificates (``SSL_CERT_FILE``
names another bundle), redirects must stay on https, every request has a socket timeout and every
file a deadline and a size limit.
"""

from __future__ import annotations

import hashlib
import http.client
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from trainer.errors import DataError, MirrorsUnreachableError, TrainerError

# sha256 of the raw (un-gzipped) canonical MNIST files (Y. LeCun, C. Cortes, C. Burges), copied from
# ../shared/data/mnist/SHA256SUMS.raw, whose files are byte-identical to the canonical ones.
CANONICAL_SHA256 = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
REQUEST_TIMEOUT_S = 60  # connecting, and each read of the body
FILE_DEADLINE_S = 600  # one file from one mirror, all reads together
MAX_GZ_BYTES = 32 << 20  # the largest canonical .gz is 9.7 MB
MAX_RAW_BYTES = 64 << 20  # the largest raw file is 47 MB
CHUNK = 1 << 16
USER_AGENT = "ddp-mnist-trainer-seed"


@dataclass(frozen=True)
class Failure:
    """One failed attempt: why, and whether the mirror answered with wrong content."""

    mirror: str
    reason: str
    wrong_content: bool


class AttemptFailed(Exception):
    def __init__(self, reason: str, wrong_content: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.wrong_content = wrong_content


class HttpsOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects to https URLs only (urllib would follow one to plain http)."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        if not newurl.lower().startswith("https://"):
            fp.close()
            raise AttemptFailed(f"HTTP {code} redirect to {newurl} refused (https only)", wrong_content=False)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def file_url(mirror: str, name: str) -> str:
    return f"{mirror.rstrip('/')}/{name}.gz"


def fetch_from_mirrors(
    mirrors: Sequence[str],
    names: Sequence[str],
    workdir: Path,
    say: Callable[[str], None],
    warn: Callable[[str], None],
) -> dict[str, Path]:
    """``{name.gz: path in workdir}`` for each of ``names`` (members of FILES), verified."""
    opener = urllib.request.build_opener(HttpsOnlyRedirects())
    files: dict[str, Path] = {}
    for name in names:
        failures: list[Failure] = []
        for index, mirror in enumerate(mirrors):
            url = file_url(mirror, name)
            try:
                packed = download(opener, url)
                check_content(name, packed)
            except AttemptFailed as failed:
                failures.append(Failure(mirror, failed.reason, failed.wrong_content))
                then = "trying the next mirror" if index + 1 < len(mirrors) else "no mirror left"
                warn(f"mirror {mirror} failed for {name}.gz: {failed.reason}; {then}")
                continue
            path = workdir / f"{name}.gz"
            path.write_bytes(packed)
            files[path.name] = path
            say(f"downloaded {url} (sha256 of its raw content verified)")
            break
        else:
            raise no_mirror_error(name, failures)
    return files


def no_mirror_error(name: str, failures: list[Failure]) -> TrainerError:
    """Exit 3 if any mirror served wrong content, else exit 205 (see the module docstring)."""
    tried = "; ".join(f"{f.mirror}: {f.reason}" for f in failures)
    if any(f.wrong_content for f in failures):
        return DataError(
            f"no mirror served a verified {name}.gz ({tried}); a mirror serves wrong content: "
            "fix or drop it in --mirror"
        )
    return MirrorsUnreachableError(
        f"no mirror could be reached for {name}.gz ({tried}); check the network and --mirror"
    )


def download(opener: urllib.request.OpenerDirector, url: str) -> bytes:
    """The body at ``url``, within the size limit and the deadline; AttemptFailed otherwise."""
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    deadline = time.monotonic() + FILE_DEADLINE_S
    try:
        with opener.open(request, timeout=REQUEST_TIMEOUT_S) as response:
            return read_bounded(response, deadline)
    except urllib.error.HTTPError as error:
        raise AttemptFailed(f"HTTP {error.code} {error.reason}", wrong_content=False) from None
    except urllib.error.URLError as error:
        raise AttemptFailed(str(error.reason), wrong_content=False) from None
    except (OSError, http.client.HTTPException, ValueError) as error:
        raise AttemptFailed(describe(error), wrong_content=False) from None


def read_bounded(response: Any, deadline: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := response.read(CHUNK):
        size += len(chunk)
        if size > MAX_GZ_BYTES:
            raise AttemptFailed(f"larger than {MAX_GZ_BYTES >> 20} MiB", wrong_content=True)
        if time.monotonic() > deadline:
            raise AttemptFailed(f"took longer than {FILE_DEADLINE_S} s", wrong_content=False)
        chunks.append(chunk)
    return b"".join(chunks)


def describe(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def check_content(name: str, packed: bytes) -> None:
    """Gunzip ``packed`` (bounded) and compare the raw content's sha256 with the canonical one."""
    expected = CANONICAL_SHA256[name]
    actual = raw_sha256(packed)
    if actual != expected:
        raise AttemptFailed(
            f"raw sha256 {actual} is not MNIST's {expected} (wrong content)", wrong_content=True
        )


def raw_sha256(packed: bytes) -> str:
    """sha256 of the gunzipped content, decompressed in chunks (never more than MAX_RAW_BYTES)."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    digest = hashlib.sha256()
    size = 0
    pending = packed
    try:
        while pending and not inflater.eof:
            chunk = inflater.decompress(pending, CHUNK * 16)
            pending = inflater.unconsumed_tail
            size += len(chunk)
            if size > MAX_RAW_BYTES:
                raise AttemptFailed(f"gunzips to more than {MAX_RAW_BYTES >> 20} MiB", wrong_content=True)
            digest.update(chunk)
        digest.update(inflater.flush())
    except zlib.error as error:
        raise AttemptFailed(f"not a valid gzip file ({error})", wrong_content=True) from None
    if not inflater.eof:
        raise AttemptFailed("truncated gzip file", wrong_content=True)
    return digest.hexdigest()
