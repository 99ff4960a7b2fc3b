"""Helpers of the object-store tests: one store under test (:class:`Kit`) and its fixtures'
writer (the SDKs directly, never the kit)."""

from __future__ import annotations

import hashlib
import itertools
import os
from dataclasses import dataclass
from typing import Any

import pytest

from fixtures import stores as fs

_n = itertools.count()


@dataclass
class Kit:
    """One store under test: where it is, how to write fixtures into it, the kit's options."""

    scheme: str
    bucket: str
    options: Any
    writer: Any
    env: dict[str, str]
    account: str = ""

    def url(self, key: str = "") -> str:
        if self.scheme == "az":
            return f"az://{self.account}/{self.bucket}/{key}"
        return f"{self.scheme}://{self.bucket}/{key}"

    def put(self, key: str, data: bytes) -> None:
        if self.scheme == "s3":
            self.writer.put_object(Bucket=self.bucket, Key=key, Body=data)
        elif self.scheme == "az":
            self.writer.get_container_client(self.bucket).upload_blob(key, data, overwrite=True)
        else:
            self.writer.bucket(self.bucket).blob(key).upload_from_string(data)

    def state(self) -> dict[str, tuple[Any, ...]]:
        """Every object (and version) with its ETag/hashes, read with the writer's SDK: the
        evidence, compared before and after the kit ran."""
        out: dict[str, tuple[Any, ...]] = {}
        if self.scheme == "s3":
            pages = self.writer.get_paginator("list_object_versions").paginate(Bucket=self.bucket)
            for page in pages:
                for v in page.get("Versions", []):
                    out[f"{v['Key']}@{v['VersionId']}"] = (v["ETag"], v["Size"])
        elif self.scheme == "az":
            container = self.writer.get_container_client(self.bucket)
            for b in container.list_blobs(include=["snapshots", "metadata"]):
                md5 = b.content_settings.content_md5
                out[f"{b.name}@{b.snapshot}"] = (b.etag, b.size, bytes(md5 or b""),
                                                 tuple(sorted((b.metadata or {}).items())))
        else:
            for b in self.writer.list_blobs(self.bucket, versions=True):
                out[f"{b.name}@{b.generation}"] = (b.etag, b.md5_hash, b.crc32c, b.size,
                                                   b.metageneration)
        return out


def make_kit(scheme: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
             *, versioned: bool = True) -> Kit:
    from ckptrescue.stores import StoreOptions

    name = f"ckpt-{os.getpid()}-{next(_n)}"
    if scheme == "s3":
        server = request.getfixturevalue("motoserver")
        writer = server.writer_client()
        writer.create_bucket(Bucket=name)
        if versioned:
            writer.put_bucket_versioning(Bucket=name,
                                         VersioningConfiguration={"Status": "Enabled"})
        options = StoreOptions(endpoint_url=server.endpoint_url, region="us-east-1")
        return Kit("s3", name, options, writer, {})
    if scheme == "az":
        server = request.getfixturevalue("azurite")
        for var, value in server.env().items():
            monkeypatch.setenv(var, value)
        writer = server.writer()
        writer.create_container(name)
        return Kit("az", name, StoreOptions(), writer, server.env(), account=fs.AZURITE_ACCOUNT)
    server = request.getfixturevalue("fakegcs")
    for var, value in server.env().items():
        monkeypatch.setenv(var, value)
    server.create_bucket(name, versioning=versioned)
    return Kit("gs", name, StoreOptions(), server.writer(), server.env())




def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
