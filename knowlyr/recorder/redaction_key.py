"""The keys of redaction placeholders: this installation's key and the keyed fingerprint of a
secret (see :mod:`knowlyr.recorder.redact` for what the key protects and where a store's
own key lives)."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets as _random
import warnings
from pathlib import Path

__all__ = ["KEY_ENV", "fingerprint", "installation_key"]

KEY_ENV = "KNOWLYR_REDACTION_KEY"
_installation_key: bytes | None = None


def installation_key() -> bytes:
    """This installation's fingerprint key: ``$KNOWLYR_REDACTION_KEY`` (its UTF-8 bytes), else
    the file ``$XDG_CONFIG_HOME/knowlyr/redaction.key`` (``~/.config``), created with 32 random
    bytes on first use; where it cannot be written, a random key for this process (with a
    warning: placeholders then change from run to run)."""
    global _installation_key
    env = os.environ.get(KEY_ENV)
    if env:
        return env.encode()
    if _installation_key is None:
        base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        _installation_key = _key_file(Path(base) / "knowlyr" / "redaction.key")
    return _installation_key


def _key_file(path: Path) -> bytes:
    """The key in ``path``, written there first (whole, mode 0600) when there is none."""
    try:
        return bytes.fromhex(path.read_text().strip())
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as e:
        warnings.warn(
            f"redaction key {path} unreadable ({e}): using a key for this process only",
            stacklevel=3,
        )
        return _random.token_bytes(32)
    new = _random.token_bytes(32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{new[:4].hex()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(new.hex())
        try:
            os.link(tmp, path)  # appears whole, and only if no other process was first
        except FileExistsError:
            new = bytes.fromhex(path.read_text().strip())
        finally:
            tmp.unlink()
    except OSError as e:
        warnings.warn(
            f"cannot write redaction key {path} ({e}): using a key for this process only",
            stacklevel=3,
        )
    return new


def fingerprint(secret: bytes | str, key: bytes | None = None) -> str:
    """Short, stable, keyed id of a secret: 12 hex digits of HMAC-SHA256(``key``, secret)
    (``key`` defaults to :func:`installation_key`); nothing can be learnt from it without the key."""
    if isinstance(secret, str):
        secret = secret.encode()
    return hmac.new(key or installation_key(), secret, hashlib.sha256).hexdigest()[:12]
