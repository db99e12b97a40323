#!/usr/bin/env python3
"""Build the container backend's image (knowlyr-sandbox:latest) offline, from host packages.

No registry is reachable here, so the image is a rootfs tarball made from the files of the
host's installed Debian packages that python3 and git need (their dependency closure, from
apt-cache and dpkg), imported with ``podman import`` (or ``docker import``). ~10 s, ~150 MB.

Usage: python3 scripts/build_sandbox_image.py [--engine podman|docker] [--tag TAG] [--force]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

PACKAGES = [
    "base-files",
    "base-passwd",
    "bash",
    "dash",
    "coreutils",
    "debianutils",
    "python3",
    "python3.11",
    "git",
    "grep",
    "sed",
    "findutils",
    "diffutils",
    "mawk",
    "tar",
    "gzip",
    "bzip2",
    "xz-utils",
    "procps",
    "util-linux",
    "patch",
    "less",
    "ncurses-base",
    "libc-bin",
]
SKIP_PREFIXES = tuple(
    f"/usr/share/{d}"
    for d in (
        "doc",
        "man",
        "info",
        "locale",
        "lintian",
        "bug",
        "bash-completion",
        "zsh",
        "gitweb",
        "git-gui",
        "gitk",
        "common-licenses",
    )
)
UID = 1000
IMAGE_VERSION = "2"  # bump when the image's content changes: setup-system.sh rebuilds older ones
TOP_DIRS = (
    "etc",
    "tmp",
    "root",
    "workspace",
    "home",
    "proc",
    "sys",
    "dev",
    "run",
    "var",
    "var/tmp",
    "bin",
    "sbin",
    "lib",
    "lib64",
)
PROFILE = "export PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin\numask 022\n"


def closure(packages: list[str]) -> list[str]:
    """Installed packages that ``packages`` need (Depends and Pre-Depends, recursively).

    Read from the dpkg database alone, so it works without apt lists.
    """
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package}\t${db:Status-Status}\t${Provides}\t${Pre-Depends}, ${Depends}\n"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    deps: dict[str, list[list[str]]] = {}
    provides: dict[str, str] = {}

    def names(field: str) -> list[list[str]]:
        groups = []
        for group in field.split(","):
            alts = [a.strip().split(" ")[0].split(":")[0] for a in group.split("|") if a.strip()]
            if alts:
                groups.append(alts)
        return groups

    for line in out.splitlines():
        pkg, status, prov, dep = [*line.split("\t"), "", "", ""][:4]
        if status != "installed":
            continue
        deps[pkg] = names(dep)
        for group in names(prov):
            provides.setdefault(group[0], pkg)
    seen: set[str] = set()
    todo = [p for p in packages if p in deps]
    while todo:
        pkg = todo.pop()
        if pkg in seen:
            continue
        seen.add(pkg)
        for alts in deps[pkg]:
            for alt in alts:  # the first alternative that is installed (or provided)
                real = alt if alt in deps else provides.get(alt)
                if real:
                    todo.append(real)
                    break
    return sorted(seen)


def package_files(pkgs: list[str]) -> list[str]:
    out = subprocess.run(["dpkg", "-L", *pkgs], capture_output=True, text=True).stdout
    files: set[str] = set()
    for line in out.splitlines():
        p = line.strip()
        if not p.startswith("/") or p.startswith(SKIP_PREFIXES):
            continue
        # merged /usr: /bin/x is really /usr/bin/x on the host
        d, base = os.path.split(p)
        real = os.path.join(os.path.realpath(d), base)
        if os.path.lexists(real) and not os.path.isdir(real):
            files.add(real)
    # update-alternatives links (awk -> /etc/alternatives/awk -> mawk) belong to no package
    for d in ("/usr/bin", "/usr/sbin"):
        for name in os.listdir(d):
            link = os.path.join(d, name)
            if os.path.islink(link) and os.readlink(link).startswith("/etc/alternatives/"):
                alt = os.readlink(link)
                if os.path.islink(alt) and os.path.realpath(alt) in files:
                    files.update((link, alt))
    return sorted(files)


def add_text(tar: tarfile.TarFile, name: str, text: str, mode: int = 0o644) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755, uid: int = 0) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.mtime = (
        tarfile.DIRTYPE,
        mode,
        uid,
        uid,
        int(time.time()),
    )
    tar.addfile(info)


def build_rootfs(path: str) -> int:
    pkgs = closure(PACKAGES)
    files = package_files(pkgs)
    dirs: set[str] = set()
    for f in files:
        d = os.path.dirname(f)
        while d not in ("/", "") and d not in dirs:
            dirs.add(d)
            d = os.path.dirname(d)
    with tarfile.open(path, "w") as tar:
        for d in TOP_DIRS:
            if d in ("bin", "sbin", "lib", "lib64"):
                continue
            add_dir(
                tar,
                d,
                mode=0o1777 if d in ("tmp", "var/tmp") else 0o755,
                uid=UID if d == "workspace" else 0,
            )
        for link in ("bin", "sbin", "lib", "lib64"):
            if os.path.islink(f"/{link}"):
                info = tarfile.TarInfo(link)
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(f"/{link}")
                tar.addfile(info)
        for d in sorted(dirs):
            if d.lstrip("/") in TOP_DIRS:
                continue
            if os.path.islink(d):
                tar.add(d, arcname=d.lstrip("/"), recursive=False)
            else:
                add_dir(tar, d.lstrip("/"))
        for f in files:
            if f.startswith(("/etc/passwd", "/etc/group", "/etc/shadow", "/etc/profile")):
                continue
            tar.add(f, arcname=f.lstrip("/"), recursive=False)
        for src in ("/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf"):
            if os.path.exists(src):
                tar.add(os.path.realpath(src), arcname=src.lstrip("/"), recursive=False)
        add_text(
            tar,
            "etc/passwd",
            f"root:x:0:0:root:/root:/bin/bash\nagent:x:{UID}:{UID}:agent:/workspace:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        )
        add_text(tar, "etc/group", f"root:x:0:\nagent:x:{UID}:\nnogroup:x:65534:\n")
        add_text(tar, "etc/hosts", "127.0.0.1 localhost sandbox\n::1 localhost\n")
        add_text(tar, "etc/profile", PROFILE)
    return len(files)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--engine", default=(shutil.which("podman") and "podman") or "docker")
    ap.add_argument("--tag", default="knowlyr-sandbox:latest")
    ap.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    args = ap.parse_args()
    current = subprocess.run(
        [
            args.engine,
            "image",
            "inspect",
            "--format",
            '{{index .Config.Labels "knowlyr.image"}}',
            args.tag,
        ],
        capture_output=True,
        text=True,
    )
    previous = subprocess.run(
        [args.engine, "image", "inspect", "--format", "{{.Id}}", args.tag],
        capture_output=True,
        text=True,
    )
    previous_id = previous.stdout.strip() if previous.returncode == 0 else ""
    if not args.force and current.returncode == 0 and current.stdout.strip() == IMAGE_VERSION:
        print(f"{args.tag} already present ({args.engine}, version {IMAGE_VERSION})")
        return 0
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        tar_path = os.path.join(tmp, "rootfs.tar")
        n = build_rootfs(tar_path)
        size = os.path.getsize(tar_path) / 1e6
        subprocess.run(
            [args.engine, "import", "--change", "WORKDIR /workspace", "--change", f"LABEL knowlyr.image={IMAGE_VERSION}", "--change", "ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
             tar_path, args.tag],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    if current.returncode == 0:  # the previous build, now untagged (kept if a container uses it)
        old = subprocess.run(
            [args.engine, "image", "inspect", "--format", "{{.Id}}", args.tag],
            capture_output=True,
            text=True,
        )
        prev = subprocess.run(
            [args.engine, "images", "-q", "--no-trunc", "--filter", "dangling=true"],
            capture_output=True,
            text=True,
        ).stdout.split()
        for image_id in prev:
            if image_id != old.stdout.strip() and previous_id and previous_id in image_id:
                subprocess.run([args.engine, "rmi", image_id], capture_output=True)
    print(f"built {args.tag}: {n} files, {size:.0f} MB rootfs, {time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
