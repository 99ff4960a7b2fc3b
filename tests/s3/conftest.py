"""Fixtures for the S3 tests: one moto server per session, over real HTTP on 127.0.0.1.

moto is started in-process (``ckptrescue.stores.s3.localserver.start_local_s3``), which also checks that
moto computes CRC32C/CRC64NVME for real. Each test gets its own bucket; objects are written with a
plain boto3 client (the kit's own client is read-only).
"""

from __future__ import annotations

import itertools
import os

import pytest

MiB = 1 << 20
_counter = itertools.count()


@pytest.fixture(scope="session")
def s3server():
    from ckptrescue.stores.s3.localserver import start_local_s3

    server = start_local_s3()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def writer(s3server):
    return s3server.writer_client()


@pytest.fixture
def bucket(writer) -> str:
    name = f"bkt-{os.getpid()}-{next(_counter)}"
    writer.create_bucket(Bucket=name)
    return name


@pytest.fixture
def versioned_bucket(writer, bucket) -> str:
    writer.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    return bucket


@pytest.fixture
def options(s3server):
    from ckptrescue.stores.s3.client import ClientOptions

    return ClientOptions(endpoint_url=s3server.endpoint_url, region="us-east-1")


@pytest.fixture
def reader(options):
    from ckptrescue.stores.s3.client import make_client

    return make_client(options=options)
