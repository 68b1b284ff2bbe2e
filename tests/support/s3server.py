"""Fixtures for the S3 adapter: moto's standalone server in-process, a fresh bucket per test.

Import the fixtures into a test module
(`from tests.support.s3server import moto_endpoint, s3_store`).
"""

from __future__ import annotations

import functools
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.s3.responses import S3Response
from moto.server import ThreadedMotoServer

from qexport.storage.s3.store import S3ObjectStore

REGION = "us-east-1"
_CONDITIONAL_WRITE = threading.Lock()


def _atomic(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def serialised(*args: Any, **kwargs: Any) -> Any:
        with _CONDITIONAL_WRITE:
            return method(*args, **kwargs)

    return serialised


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """The endpoint URL of one moto S3 server for the whole session, bound to 127.0.0.1."""
    with pytest.MonkeyPatch.context() as patch:
        # moto 5.2.5 checks `If-None-Match: *` and then writes, without a lock: two completions
        # racing on its threaded server both succeed about once in thirty. S3 decides the
        # condition atomically; serialising moto's object writes (PutObject and every POST on a
        # key: create, complete) makes the fake do the same, so the race tests test our code.
        patch.setattr(S3Response, "put_object", _atomic(S3Response.put_object))
        patch.setattr(S3Response, "_key_response_post", _atomic(S3Response._key_response_post))
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Dummy credentials, and no profile or config file of the machine running the tests."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))


@pytest.fixture
def s3_bucket(moto_endpoint: str, aws_env: None) -> Iterator[str]:
    """A new empty bucket; all of moto's state is reset after the test."""
    name = f"qexport-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name=REGION).create_bucket(Bucket=name)
    yield name
    reset_url = f"{moto_endpoint}/moto-api/reset"
    reset = urllib.request.Request(reset_url, method="POST")  # noqa: S310 (the local moto server)
    with urllib.request.urlopen(reset, timeout=10) as response:  # noqa: S310 (the same)
        response.read()


@pytest.fixture
def s3_store(moto_endpoint: str, s3_bucket: str) -> S3ObjectStore:
    """An S3ObjectStore on the test's bucket, under a prefix like a shared bucket would use."""
    return S3ObjectStore(s3_bucket, "tenant", endpoint_url=moto_endpoint)
