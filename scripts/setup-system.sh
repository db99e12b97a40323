#!/usr/bin/env bash
# Installs the system packages knowlyr needs on Debian 12 (run as root; idempotent, < 2 s when
# everything is present):
#   - bubblewrap and libseccomp2: the local sandbox backend and its seccomp filter;
#   - python3 and git from Debian (coding tasks run them inside the sandbox);
#   - Podman and its runtime pieces, /etc/containers/containers.conf, and the offline image
#     knowlyr-sandbox:latest (python3 + git, built from host packages): the container backend;
#   - chromium (headless): the browser env (knowlyr/browser) drives it over the DevTools
#     protocol; the docs' screenshots (--screenshots, kept for compatibility) use it too.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
# libseccomp: the local sandbox's seccomp filter (Python binding: pyseccomp, from PyPI)
compgen -G '/usr/lib/*/libseccomp.so.2' >/dev/null || need+=(libseccomp2)
[ -x /usr/bin/python3 ] || need+=(python3)
[ -x /usr/bin/git ] || need+=(git)
command -v podman >/dev/null || need+=(podman runc crun fuse-overlayfs slirp4netns uidmap catatonit)
# Headless Chromium: the browser env and its tests, and the docs' screenshots of the Prefect UI
# and of `knowlyr view` (scripts/screenshot_ui.py, scripts/screenshot_view.py).
[ -x /usr/lib/chromium/chromium ] || command -v chromium >/dev/null || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing system packages: ${need[*]}; run: sudo apt-get install -y ${need[*]}" >&2
    exit 1
  fi
  echo "setup-system: installing ${need[*]}" >&2
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi

[ "$(id -u)" = 0 ] || exit 0  # the container engine setup below needs root

# Podman on this platform needs explicit ulimits (soft = hard) and runc (see PLATFORM.md).
conf=/etc/containers/containers.conf
want='[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]

[engine]
runtime = "runc"'
if [ ! -f "$conf" ] || ! grep -q 'runtime = "runc"' "$conf" || ! grep -q 'nproc=' "$conf"; then
  mkdir -p /etc/containers
  [ -f "$conf" ] && cp "$conf" "$conf.knowlyr-backup"
  printf '%s\n' "$want" >"$conf"
fi

# The container backend's image: no registry is reachable, so it is imported from a rootfs
# tarball of host packages (~10 s once; skipped when the current version is present).
want_image=$(sed -n 's/^IMAGE_VERSION = "\(.*\)".*/\1/p' scripts/build_sandbox_image.py)
have_image=$(podman image inspect --format '{{index .Config.Labels "knowlyr.image"}}' knowlyr-sandbox:latest 2>/dev/null || true)
if [ "$have_image" != "$want_image" ]; then
  echo "setup-system: building the sandbox image knowlyr-sandbox:latest (version $want_image)" >&2
  /usr/bin/python3 scripts/build_sandbox_image.py --engine podman --force >&2
fi
