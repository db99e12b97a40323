"""A local S3-compatible server for the tests: moto's server mode as a real process on loopback.

The store reaches it exactly as it reaches a real bucket: ``s3://BUCKET/PREFIX`` URLs with the
endpoint and credentials in the standard AWS environment variables, which deltalake (tables)
and s3fs (blobs) both read. Only the endpoint differs from AWS.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.envs.server_proc import free_port

BUCKET = "knowlyr-test"


@dataclass
class S3Server:
    endpoint: str
    env: dict[str, str]  # the AWS_* variables a client (or a worker process) needs
    proc: subprocess.Popen

    def url(self, prefix: str) -> str:
        return f"s3://{BUCKET}/{prefix}"


@contextmanager
def s3_server(log_dir: Path) -> Iterator[S3Server]:
    """``moto_server`` on a free loopback port with one bucket; yields its endpoint and env."""
    exe = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or shutil.which(
        "moto_server"
    )
    if exe is None:
        raise RuntimeError("moto_server is missing: pip install 'moto[server]' (the dev extra)")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",  # deltalake: the local endpoint is plain http
    }
    with open(log_dir / f"moto-{port}.log", "wb") as log:
        proc = subprocess.Popen(
            [exe, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                client.create_bucket(Bucket=BUCKET)
                break
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield S3Server(endpoint, env, proc)
    finally:
        proc.terminate()
        proc.wait(10)


@contextmanager
def aws_env(env: dict[str, str]) -> Iterator[None]:
    """Set the AWS_* variables in this process for the block (s3fs caches filesystems with the
    endpoint they were made with, so its cache is cleared on the way in and out)."""
    import s3fs

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
