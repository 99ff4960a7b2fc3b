"""`s3 restore` writes only beneath --to: a symlinked directory inside it (DIR/p -> elsewhere)
is refused, never followed, and nothing lands outside."""

from __future__ import annotations

import os

import pytest

from ckptrescue.errors import RefusedError, UsageError
from ckptrescue.stores.s3.api import restore


def test_restore_refuses_a_symlinked_directory_inside_to(writer, versioned_bucket, options,
                                                         tmp_path) -> None:
    version = writer.put_object(Bucket=versioned_bucket, Key="p/ok.txt", Body=b"good bytes",
                                ChecksumAlgorithm="SHA256")["VersionId"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    to = tmp_path / "to"
    to.mkdir()
    (to / "p").symlink_to(elsewhere)
    with pytest.raises(RefusedError, match="symlink"):
        restore(f"s3://{versioned_bucket}/p/ok.txt", to, version=version,
                client_options=options)
    assert os.listdir(elsewhere) == []
    # the same restore into a plain folder works
    good = tmp_path / "good"
    result = restore(f"s3://{versioned_bucket}/p/ok.txt", good, version=version,
                     client_options=options)
    assert result.status == "verified" and (good / "p" / "ok.txt").read_bytes() == b"good bytes"


def test_restore_refuses_dotdot_in_a_key(writer, versioned_bucket, options, tmp_path) -> None:
    version = writer.put_object(Bucket=versioned_bucket, Key="a/../../escape.txt",
                                Body=b"x")["VersionId"]
    to = tmp_path / "deep" / "to"
    with pytest.raises((RefusedError, UsageError)):
        restore(f"s3://{versioned_bucket}/a/../../escape.txt", to, version=version,
                client_options=options)
    assert not (tmp_path / "escape.txt").exists()
    assert not (tmp_path / "deep" / "escape.txt").exists()
