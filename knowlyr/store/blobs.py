"""Content-addressed blobs: ``blobs/sha256/ab/cdef...`` under the store root.

A blob is written to a temporary name in its final directory and renamed into place, so a
reader sees either nothing or the whole blob (a crash leaves at most a ``.tmp-*`` file that
:meth:`BlobStore.gc` removes). Every read re-hashes the bytes and raises
:class:`~knowlyr.errors.BlobCorruptedError` when they no longer match the address.

Local paths use the OS directly (``os.replace`` is atomic on POSIX); any other fsspec URL goes
through fsspec (``pipe_file`` then ``mv``; on object stores an object appears whole anyway).
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Iterator
from typing import Any

from knowlyr.errors import BlobCorruptedError, ConfigError, NotFoundError

__all__ = ["BlobStore", "sha256_hex"]

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_hash(digest: str) -> str:
    if not isinstance(digest, str) or not _HEX64.match(digest):
        raise ConfigError(f"blob hash must be 64 lowercase hex characters (sha256), got {digest!r}")
    return digest


def url_to_fs(
    url: str, storage_options: dict[str, Any] | None = None, *, shown: str | None = None
) -> tuple[Any, str]:
    """fsspec's filesystem and path for ``url``; a protocol fsspec does not know, or whose
    package is not installed, is a :class:`~knowlyr.errors.ConfigError` naming the fix (and
    ``shown``, the URL the user gave, default ``url``)."""
    import fsspec
    from fsspec.registry import known_implementations

    protocol = url.split("://", 1)[0]
    try:
        return fsspec.core.url_to_fs(url, **fsspec_options(protocol, storage_options))
    except ImportError as e:
        package = known_implementations.get(protocol, {}).get("class", "").split(".")[0]
        fix = f"pip install {package}" if package else f"install fsspec's {protocol} backend"
        if protocol in ("s3", "s3a"):
            fix = "pip install s3fs (the knowlyr-gym[s3] extra)"
        raise ConfigError(
            f"store {shown or url}: {protocol}:// needs the {package or protocol} package, "
            f"which is not installed: {fix} (or give a local path)"
        ) from e
    except ValueError as e:
        if "Protocol not known" not in str(e):
            raise
        raise ConfigError(
            f"store {shown or url}: fsspec knows no protocol {protocol!r}; give a local path or "
            "a URL such as s3://bucket/prefix, gs://bucket/prefix, file:///path"
        ) from e


# deltalake's (object_store's) S3 option names -> s3fs's, so one storage_options dict serves both
_S3FS_KEYS = {
    "aws_access_key_id": "key",
    "access_key_id": "key",
    "aws_secret_access_key": "secret",
    "secret_access_key": "secret",
    "aws_session_token": "token",
    "session_token": "token",
    "aws_endpoint_url": "endpoint_url",
    "aws_endpoint": "endpoint_url",
    "endpoint_url": "endpoint_url",
    "endpoint": "endpoint_url",
}
_S3FS_REGION = ("aws_region", "region", "aws_default_region")


def fsspec_options(protocol: str, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """``storage_options`` for fsspec. For ``s3://`` they may be written as deltalake takes
    them (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_REGION``...): those are renamed
    to s3fs's arguments, deltalake-only ones (``AWS_ALLOW_HTTP``...) dropped, s3fs's own kept.
    Without any, both libraries read the standard ``AWS_*`` environment variables."""
    opts = dict(storage_options or {})
    if protocol not in ("s3", "s3a") or not opts:
        return opts
    out: dict[str, Any] = {}
    for k, v in opts.items():
        low = k.lower()
        if low in _S3FS_KEYS:
            out[_S3FS_KEYS[low]] = v
        elif low in _S3FS_REGION:
            out.setdefault("client_kwargs", {})["region_name"] = v
        elif not low.startswith("aws_") and low not in ("allow_http", "conditional_put"):
            out[k] = v  # s3fs's own (anon, client_kwargs, config_kwargs...)
    return out


class BlobStore:
    """Blobs under ``root`` (a local directory or an fsspec URL)."""

    def __init__(self, root: str, *, local: bool, storage_options: dict[str, Any] | None = None):
        self.root = root.rstrip("/")
        self.local = local
        self._fs = None
        if not local:
            self._fs, self._fs_root = url_to_fs(
                self.root, storage_options, shown=self.root.removesuffix("/blobs")
            )

    def path(self, digest: str) -> str:
        check_hash(digest)
        return f"{self.root}/sha256/{digest[:2]}/{digest[2:]}"

    def _fs_path(self, digest: str) -> str:
        return f"{self._fs_root}/sha256/{digest[:2]}/{digest[2:]}"

    def has(self, digest: str) -> bool:
        if self.local:
            return os.path.exists(self.path(digest))
        return bool(self._fs.exists(self._fs_path(check_hash(digest))))

    def put(self, data: bytes, *, digest: str | None = None) -> str:
        """Store ``data``; returns its sha256. Idempotent: an existing blob is not rewritten."""
        actual = sha256_hex(data)
        if digest is not None and digest != actual:
            raise BlobCorruptedError(
                f"blob bytes hash to {actual}, not to the given address {digest}: "
                "pass the sha256 of exactly these bytes"
            )
        if self.has(actual):
            return actual
        if self.local:
            final = self.path(actual)
            d = os.path.dirname(final)
            os.makedirs(d, exist_ok=True)
            tmp = os.path.join(d, f".tmp-{uuid.uuid4().hex}")
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, final)
        else:
            final = self._fs_path(actual)
            tmp = f"{final}.tmp-{uuid.uuid4().hex}"
            self._fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
            self._fs.pipe_file(tmp, data)
            self._fs.mv(tmp, final)
        return actual

    def get(self, digest: str) -> bytes:
        """The blob's bytes, verified against ``digest``."""
        try:
            if self.local:
                with open(self.path(digest), "rb") as f:
                    data = f.read()
            else:
                data = self._fs.cat_file(self._fs_path(check_hash(digest)))
        except FileNotFoundError:
            raise NotFoundError(f"no blob {digest} in {self.root}") from None
        actual = sha256_hex(data)
        if actual != digest:
            raise BlobCorruptedError(
                f"blob {digest} in {self.root} is corrupted: its bytes hash to {actual}; "
                "restore it from the original log or a backup"
            )
        return data

    def size(self, digest: str) -> int:
        if self.local:
            return os.path.getsize(self.path(digest))
        return int(self._fs.size(self._fs_path(check_hash(digest))))

    def iter_hashes(self) -> Iterator[str]:
        """Every stored blob hash (temporary files are skipped)."""
        for name in self._list():
            parts = name.rsplit("/", 2)
            if len(parts) == 3 and len(parts[1]) == 2 and _HEX64.match(parts[1] + parts[2]):
                yield parts[1] + parts[2]

    def iter_temp(self) -> Iterator[str]:
        """Leftover temporary files of interrupted writes (paths)."""
        for name in self._list():
            if ".tmp-" in name.rsplit("/", 1)[-1]:
                yield name

    def _list(self) -> Iterator[str]:
        if self.local:
            base = os.path.join(self.root, "sha256")
            if not os.path.isdir(base):
                return
            for d in sorted(os.listdir(base)):
                sub = os.path.join(base, d)
                if os.path.isdir(sub):
                    for f in sorted(os.listdir(sub)):
                        yield f"{base}/{d}/{f}"
        else:
            base = f"{self._fs_root}/sha256"
            if not self._fs.exists(base):
                return
            yield from sorted(self._fs.find(base))

    def mtime(self, path: str) -> float:
        if self.local:
            return os.path.getmtime(path)
        info = self._fs.info(path)
        m = info.get("mtime") or info.get("LastModified") or info.get("created")
        if m is None:
            return 0.0
        return m.timestamp() if hasattr(m, "timestamp") else float(m)

    def remove_path(self, path: str) -> None:
        if self.local:
            os.remove(path)
        else:
            self._fs.rm_file(path)

    def remove(self, digest: str) -> None:
        self.remove_path(self.path(digest) if self.local else self._fs_path(digest))
