"""Container-backend specifics: the container's settings, cleanup, restore, unreachable engines."""

from __future__ import annotations

import pytest

from knowlyr.errors import BackendUnavailableError, WorkspacePathError
from knowlyr.sandbox import SandboxConfig, create_sandbox
from knowlyr.sandbox.container import ContainerSandbox


def _mine(client, name):
    return client.containers.list(all=True, filters={"label": f"knowlyr.sandbox={name}"})


def test_container_is_locked_down(docker_host):
    cfg = SandboxConfig(
        backend="container", memory_mb=300, max_processes=77, cpus=0.5, cpu_time_s=9, max_file_mb=3
    )
    with create_sandbox(cfg) as sb:
        attrs = sb._client.api.inspect_container(sb._container.id)
        host = attrs["HostConfig"]
        assert host["NetworkMode"] == "none"
        assert host["Memory"] == 300 * 1024 * 1024
        assert host["PidsLimit"] == 77
        assert host["NanoCpus"] == 500_000_000
        dropped = {
            c.upper().removeprefix("CAP_") for c in host["CapDrop"]
        }  # Podman lists ALL expanded
        assert (
            "ALL" in dropped
            or {"CHOWN", "DAC_OVERRIDE", "SETUID", "SETGID", "KILL", "NET_RAW"} <= dropped
        )
        assert any("no-new-privileges" in o for o in host["SecurityOpt"] or [])
        ulimits = {
            u["Name"].removeprefix("RLIMIT_").lower(): (u["Soft"], u["Hard"])
            for u in host["Ulimits"]
        }
        assert ulimits["nofile"][0] == ulimits["nofile"][1]
        assert ulimits["nproc"][0] == ulimits["nproc"][1]
        r = sb.exec("id -u; ulimit -t; ulimit -n; grep -E 'Cap(Eff|Bnd)' /proc/self/status")
        assert r.stdout.split() == [
            "1000",
            "9",
            str(ulimits["nofile"][0]),
            "CapEff:",
            "0" * 16,
            "CapBnd:",
            "0" * 16,
        ]


def test_restore_brings_back_the_whole_file_system(docker_host):
    with create_sandbox(SandboxConfig(backend="container"), files={"a.txt": "a"}) as sb:
        sid = sb.snapshot()
        sb.exec("echo scratch > /tmp/scratch && echo b > a.txt && mkdir -p ~/.cache/x")
        sb.restore(sid)
        r = sb.exec("cat a.txt; echo; ls /tmp; ls -a ~")
        assert r.stdout.split() == ["a", ".", "..", "a.txt"]
        # restore again (the standby container is used and replaced)
        sb.exec("rm a.txt")
        sb.restore(sid)
        assert sb.read_file("a.txt") == b"a"
        assert len(_mine(sb._client, sb.name)) <= 3  # current + standby (+ one being removed)


def test_cold_restore_without_standby(docker_host):
    with ContainerSandbox(
        SandboxConfig(backend="container"), files={"a.txt": "a"}, warm_restore=False
    ) as sb:
        sid = sb.snapshot()
        assert sb._standby is None
        sb.exec("rm a.txt")
        sb.restore(sid)
        assert sb.read_file("a.txt") == b"a"


def test_containers_and_images_are_removed_on_close_and_on_errors(docker_host):
    sb = create_sandbox(SandboxConfig(backend="container"))
    client, name = sb._client, sb.name
    sb.snapshot()
    assert _mine(client, name)
    sb.close()
    assert _mine(client, name) == []
    assert not [t for img in client.images.list() for t in img.tags if name in t]
    before = {c.id for c in client.containers.list(all=True)}
    with pytest.raises(WorkspacePathError):
        create_sandbox(SandboxConfig(backend="container"), files={"../../etc/evil": "x"})
    assert {c.id for c in client.containers.list(all=True)} == before


def test_unreachable_engine_is_backend_unavailable(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    with pytest.raises(BackendUnavailableError, match="podman system service"):
        create_sandbox(SandboxConfig(backend="container"))


def test_missing_image_is_backend_unavailable(docker_host):
    with pytest.raises(BackendUnavailableError, match=r"build_sandbox_image\.py"):
        create_sandbox(SandboxConfig(backend="container", image="knowlyr-no-such-image:latest"))


def test_podman_service_needs_podman(monkeypatch, tmp_path):
    from knowlyr.sandbox import podman_service

    monkeypatch.setenv("PATH", str(tmp_path))
    with (
        pytest.raises(BackendUnavailableError, match="apt-get install -y podman"),
        podman_service(),
    ):
        pass


def test_missing_docker_sdk_is_backend_unavailable(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "docker", None)  # import docker -> ImportError
    with pytest.raises(BackendUnavailableError, match=r"pip install 'knowlyr-gym\[container\]'"):
        create_sandbox(SandboxConfig(backend="container"))
