"""The read-only client: every write operation is refused before a request is sent."""

from __future__ import annotations

import pytest

from ckptrescue.errors import ExitCode, RefusedError
from ckptrescue.stores.s3.client import READ_OPERATIONS, make_client, stats


@pytest.mark.parametrize(("method", "kwargs"), [
    ("put_object", {"Key": "x", "Body": b"evil"}),
    ("delete_object", {"Key": "keep"}),
    ("delete_objects", {"Delete": {"Objects": [{"Key": "keep"}]}}),
    ("copy_object", {"Key": "copy", "CopySource": {"Bucket": "B", "Key": "keep"}}),
    ("put_object_tagging", {"Key": "keep", "Tagging": {"TagSet": []}}),
    ("delete_object_tagging", {"Key": "keep"}),
    ("put_bucket_versioning", {"VersioningConfiguration": {"Status": "Suspended"}}),
    ("put_bucket_lifecycle_configuration", {"LifecycleConfiguration": {"Rules": []}}),
    ("put_object_retention", {"Key": "keep", "Retention": {"Mode": "GOVERNANCE"}}),
    ("create_multipart_upload", {"Key": "x"}),
    ("delete_bucket", {}),
])
def test_writes_are_refused_and_nothing_changes(s3server, writer, bucket, reader, method, kwargs):
    writer.put_object(Bucket=bucket, Key="keep", Body=b"original")
    if "CopySource" in kwargs:
        kwargs = {**kwargs, "CopySource": {"Bucket": bucket, "Key": "keep"}}
    with pytest.raises(RefusedError) as info:
        getattr(reader, method)(Bucket=bucket, **kwargs)
    assert info.value.exit_code == ExitCode.REFUSED
    assert "never writes" in info.value.message
    # The bucket is untouched: same single object, same bytes, versioning never configured.
    keys = [o["Key"] for o in writer.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert keys == ["keep"]
    assert writer.get_object(Bucket=bucket, Key="keep")["Body"].read() == b"original"
    assert "Status" not in writer.get_bucket_versioning(Bucket=bucket)
    assert stats(reader).operations.keys() <= READ_OPERATIONS


def test_s3transfer_upload_through_the_client_is_refused(tmp_path, bucket, reader, writer):
    path = tmp_path / "f"
    path.write_bytes(b"data")
    with pytest.raises(RefusedError):
        reader.upload_file(str(path), bucket, "uploaded")
    assert "Contents" not in writer.list_objects_v2(Bucket=bucket)


def test_reads_are_allowed_and_counted(bucket, reader, writer):
    writer.put_object(Bucket=bucket, Key="a", Body=b"1")
    reader.head_bucket(Bucket=bucket)
    reader.list_objects_v2(Bucket=bucket)
    reader.head_object(Bucket=bucket, Key="a")
    ops = stats(reader).operations
    assert ops["HeadBucket"] == 1 and ops["ListObjectsV2"] == 1 and ops["HeadObject"] == 1


def test_bad_checksum_when_is_a_usage_error():
    from ckptrescue.errors import UsageError

    with pytest.raises(UsageError):
        make_client(endpoint_url="http://127.0.0.1:1", checksum_when="always")


def test_clients_of_two_profiles_in_one_process_sign_with_their_own_keys(
        tmp_path, monkeypatch, s3server, bucket):
    """Clients share botocore's parsed data files, never a profile or its credentials."""
    from ckptrescue.stores.s3 import client as s3client

    creds = tmp_path / "credentials"
    creds.write_text("[one]\naws_access_key_id = AKIAPROFILEONE\naws_secret_access_key = s1\n"
                     "[two]\naws_access_key_id = AKIAPROFILETWO\naws_secret_access_key = s2\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_DATA_PATH"):
        monkeypatch.delenv(name, raising=False)
    signed: list[str] = []
    readers = []
    try:
        for profile in ("one", "two", "one", "two"):
            reader = make_client(endpoint_url=s3server.endpoint_url, region="us-east-1",
                                 profile=profile)
            readers.append(reader)
            reader.meta.events.register("before-send.s3", lambda request, **_: signed.append(
                request.headers["Authorization"].decode().split("Credential=")[1].split("/")[0]))
            reader.head_bucket(Bucket=bucket)
        assert signed == ["AKIAPROFILEONE", "AKIAPROFILETWO", "AKIAPROFILEONE",
                          "AKIAPROFILETWO"]
        # one loader (its parsed data files) for all of them, its search paths not grown
        loader = s3client._loaders[None]
        assert all(r._loader is loader for r in readers)
        assert len(loader.search_paths) == len(set(loader.search_paths))
    finally:
        for reader in readers:
            reader.close()
