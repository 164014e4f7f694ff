"""An S3-compatible server on localhost for the object-storage checkpoint tests (moto's server mode)."""

from __future__ import annotations

import logging
import socket
import uuid
from dataclasses import dataclass

import pytest

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class S3Server:
    endpoint: str

    def new_bucket(self) -> str:
        """A fresh bucket's URL (``s3://name``); each test gets its own."""
        import boto3

        name = f"bucket-{uuid.uuid4().hex[:10]}"
        boto3.client("s3", endpoint_url=self.endpoint, **{
            "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "region_name": CREDENTIALS["AWS_DEFAULT_REGION"]}).create_bucket(Bucket=name)
        return f"s3://{name}"

    @property
    def storage_options(self) -> dict[str, str]:
        return {"endpoint_url": self.endpoint}

    def keys(self, url: str) -> list[str]:
        """Every object under ``url``, relative to it, read straight from the server."""
        import boto3

        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        client = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")
        found = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            found += [item["Key"][len(prefix):].lstrip("/") for item in page.get("Contents", [])]
        return sorted(found)


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on 127.0.0.1 for the whole session; the tests use a bucket each."""
    from moto.server import ThreadedMotoServer  # the test extra installs moto[server] and drivetrain[s3]

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield S3Server(endpoint=f"http://127.0.0.1:{port}")
    finally:
        server.stop()
