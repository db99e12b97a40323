"""Env fixtures: the sandbox engineer's session Docker-API engine (Podman's API service)."""

from __future__ import annotations

from tests.sandbox.conftest import docker_host  # noqa: F401  (session fixture, reused as is)
