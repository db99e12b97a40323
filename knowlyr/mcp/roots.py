"""The directories an MCP server may read and write, and the checks every path goes through.

A path is resolved against the first root when relative, then with every symlink followed
(``os.path.realpath``); it is accepted only when the result lies inside one of the roots (also
resolved). So ``..``, absolute paths elsewhere and symlinks pointing out are all refused, and
the error names the path and the roots. A store must be a local directory inside a root
(object-store URLs would reach outside them).

Example:
    >>> roots = Roots(["/srv/data"])  # doctest: +SKIP
    >>> roots.path("logs/run.jsonl")  # doctest: +SKIP
    PosixPath('/srv/data/logs/run.jsonl')
    >>> roots.path("/etc/passwd")  # doctest: +SKIP
    Traceback (most recent call last):
    OutsideRootsError: path '/etc/passwd' is outside the allowed roots (/srv/data) ...
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from knowlyr.errors import ConfigError

__all__ = ["OutsideRootsError", "Roots"]


class OutsideRootsError(ConfigError):
    """A path (after resolving symlinks) lies outside every allowed root."""


class Roots:
    """Allowed root directories (each must exist; stored fully resolved).

    Args:
        roots: directories; the first one is where relative paths start.

    Raises:
        ConfigError: no root given, or one that is not an existing directory.
    """

    def __init__(self, roots: Iterable[str | os.PathLike[str]]):
        resolved: list[Path] = []
        for r in roots:
            p = Path(os.path.realpath(os.path.expanduser(os.fspath(r))))
            if not p.is_dir():
                raise ConfigError(f"root {os.fspath(r)!r} is not an existing directory")
            if p not in resolved:
                resolved.append(p)
        if not resolved:
            raise ConfigError("give at least one allowed root directory (--root DIR)")
        self.roots = resolved

    @property
    def home(self) -> Path:
        """The first root: relative paths and default outputs start here."""
        return self.roots[0]

    def __repr__(self) -> str:
        return f"Roots({', '.join(map(str, self.roots))})"

    def contains(self, real: Path) -> bool:
        return any(real == r or r in real.parents for r in self.roots)

    def path(self, path: str | os.PathLike[str], *, must_exist: bool = False) -> Path:
        """``path`` resolved (symlinks followed) and checked to lie inside a root.

        Raises:
            OutsideRootsError: it resolves outside every root.
            FileNotFoundError: ``must_exist`` and nothing is there.
        """
        raw = os.fspath(path)
        if not raw or "\x00" in raw:
            raise ConfigError(f"path {raw!r} is empty or contains a NUL byte")
        p = Path(os.path.expanduser(raw))
        if not p.is_absolute():
            p = self.home / p
        real = Path(os.path.realpath(p))
        if not self.contains(real):
            raise OutsideRootsError(
                f"path {raw!r} is outside the allowed roots ({', '.join(map(str, self.roots))})"
                + (f": it resolves to {real}" if str(real) != raw else "")
                + "; use a path inside them, or start the server with another --root"
            )
        if must_exist and not real.exists():
            raise FileNotFoundError(f"{raw}: no such file or directory (resolved: {real})")
        return real

    def paths(self, paths: Iterable[str], *, must_exist: bool = True) -> list[Path]:
        return [self.path(p, must_exist=must_exist) for p in paths]

    def output(self, path: str | os.PathLike[str]) -> Path:
        """A file or folder to write: inside a root; its parent directories are created."""
        real = self.path(path)
        real.parent.mkdir(parents=True, exist_ok=True)
        return real

    def store(self, url: str | None) -> str:
        """A store location: a local directory inside a root (default ``<first root>/.knowlyr/store``).

        Raises:
            OutsideRootsError: an object-store URL, or a directory outside the roots.
        """
        if url is None:
            return str(self.home / ".knowlyr" / "store")
        if url.startswith("file://"):
            url = url[len("file://") :]
        elif "://" in url:
            raise OutsideRootsError(
                f"store {url!r} is not a local directory: the MCP server only reaches its allowed "
                f"roots ({', '.join(map(str, self.roots))}); give a directory inside them"
            )
        return str(self.path(url))
