"""Pure parts: URLs, the operation names the choke points judge, comparisons, the reader."""

from __future__ import annotations

import pytest

from ckptrescue.errors import UsageError
from ckptrescue.stores import azure, gcs
from ckptrescue.stores.urls import is_store_url, parse_store_url


def test_urls():
    u = parse_store_url("az://acct/ctr/a/b.pt")
    assert (u.scheme, u.account, u.bucket, u.key) == ("az", "acct", "ctr", "a/b.pt")
    u = parse_store_url("https://myacct.blob.core.windows.net/ctr/dir/x%20y.pt")
    assert (u.scheme, u.account, u.bucket, u.key) == ("az", "myacct", "ctr", "dir/x y.pt")
    assert str(u) == "az://myacct/ctr/dir/x y.pt"
    u = parse_store_url("gs://bkt/run/")
    assert (u.scheme, u.bucket, u.key) == ("gs", "bkt", "run/")
    assert parse_store_url("s3://b").key == ""
    assert is_store_url("gs://b/x") and is_store_url("https://a12.blob.core.windows.net/c/x")
    assert not is_store_url("/tmp/x") and not is_store_url("https://example.com/x")
    for bad in ("ftp://x/y", "https://example.com/c/b", "az://", "gs:///k", "/local/path"):
        with pytest.raises(UsageError):
            parse_store_url(bad)
    with pytest.raises(UsageError):
        parse_store_url("s3://bucket", need_key=True)


@pytest.mark.parametrize(("method", "query", "name"), [
    ("GET", "", "GetBlob"),
    ("HEAD", "", "GetBlobProperties"),
    ("GET", "restype=container&comp=list&include=snapshots", "ListBlobs"),
    ("GET", "comp=blocklist&blocklisttype=committed", "GetBlockList"),
    ("GET", "restype=service&comp=properties", "GetBlobServiceProperties"),
    ("GET", "restype=container", "GetContainerProperties"),
    ("GET", "snapshot=2024-01-01T00:00:00.0000000Z", "GetBlob"),
    ("PUT", "", "PUT"),
    ("PUT", "comp=metadata", "PUT comp=metadata"),
    ("PUT", "comp=block&blockid=YQ==", "PUT comp=block"),
    ("DELETE", "", "DELETE"),
    ("PUT", "comp=undelete", "PUT comp=undelete"),
    ("PUT", "comp=immutabilityPolicies", "PUT comp=immutabilityPolicies"),
    ("GET", "comp=unknownthing", "GET comp=unknownthing"),
    ("POST", "comp=batch", "POST comp=batch"),
])
def test_azure_operation_names(method, query, name):
    url = f"https://a.blob.core.windows.net/c/b?{query}"
    assert azure.operation_of(method, url) == name
    assert (name in azure.READ_OPERATIONS) == (method in ("GET", "HEAD")
                                               and "unknown" not in query)


@pytest.mark.parametrize(("method", "path", "name"), [
    ("GET", "/storage/v1/b/bk", "buckets.get"),
    ("GET", "/storage/v1/b/bk/o?prefix=a&versions=true", "objects.list"),
    ("GET", "/storage/v1/b/bk/o/a%2Fb.pt?alt=media&generation=1", "objects.get"),
    ("GET", "/download/storage/v1/b/bk/o/a.pt?alt=media", "objects.get"),
    ("GET", "/storage/v1/b/bk/o/a.pt/acl", "GET /storage/v1/b/bk/o/a.pt/acl"),
    ("GET", "/storage/v1/b/bk/iam", "GET /storage/v1/b/bk/iam"),
    ("POST", "/upload/storage/v1/b/bk/o?uploadType=media&name=x", "POST /upload/storage/v1/b/bk/o"),
    ("PUT", "/upload/storage/v1/b/bk/o?uploadType=resumable", "PUT /upload/storage/v1/b/bk/o"),
    ("GET", "/upload/storage/v1/b/bk/o?uploadType=resumable", "GET /upload/storage/v1/b/bk/o"),
    ("DELETE", "/storage/v1/b/bk/o/a", "DELETE /storage/v1/b/bk/o/a"),
    ("PATCH", "/storage/v1/b/bk", "PATCH /storage/v1/b/bk"),
    ("POST", "/storage/v1/b/bk/o/a/restore", "POST /storage/v1/b/bk/o/a/restore"),
    ("POST", "/storage/v1/b/bk/o/a/compose", "POST /storage/v1/b/bk/o/a/compose"),
])
def test_gcs_operation_names(method, path, name):
    assert gcs.operation_of(method, "https://storage.googleapis.com" + path) == name


def test_compare_is_honest():
    import base64
    import hashlib

    from ckptrescue.stores.base import ObjectInfo
    from ckptrescue.stores.integrity import compare, digest_of

    data = b"x" * 1000
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
    digest = digest_of([data])
    crc = digest.values()["crc32c"]
    assert compare(ObjectInfo("k", 1000, hashes={"md5": md5, "crc32c": crc}), digest)[0] == "match"
    status, detail = compare(ObjectInfo("k", 1000, hashes={"md5": md5, "crc32c": "AAAAAA=="}),
                             digest)
    assert status == "mismatch" and detail["message"] == "CRC32C differ from the stored value"
    assert compare(ObjectInfo("k", 999, hashes={"md5": md5}), digest)[0] == "mismatch"
    assert compare(ObjectInfo("k", 1000), digest)[0] == "unverifiable"
    # the catalogue check value, Base64 of the big-endian CRC (s3-checksums.md §1.1)
    assert digest_of([b"123456789"]).values()["crc32c"] == "4waSgw=="


def test_reader_reads_each_block_once_forward(tmp_path):
    """A forward pass with read-ahead fetches every block exactly once; a small read outside
    any stream (the zip's end record) fetches one 64 KiB unit, kept for the re-read at the end."""
    from concurrent.futures import ThreadPoolExecutor

    from ckptrescue.stores.base import ObjectInfo
    from ckptrescue.stores.reader import Accounting, ObjectAccount, RangeReader

    data = bytes(range(256)) * 4096  # 1 MiB
    calls: list[tuple[int, int]] = []

    class Fake:
        def read_range(self, obj, start, length):  # noqa: ANN001, ANN202
            calls.append((start, length))
            return data[start:start + length]

    obj = ObjectInfo("k", len(data))
    acc = Accounting(url="x", store="gs")
    acc.objects["k"] = ObjectAccount("x", "k", len(data), None)
    with ThreadPoolExecutor(4) as pool:
        reader = RangeReader(Fake(), obj, pool, acc, block_size=128 * 1024,  # type: ignore[arg-type]
                             readahead=4, cache_blocks=8)
        assert reader.read(len(data) - 100, 100) == data[-100:]  # the tail first
        out = bytearray()
        for off in range(0, len(data), 4096):
            out += reader.read(off, 4096)
        assert bytes(out) == data
        assert reader.read(len(data) - 22, 22) == data[-22:]
        reader.drain()
    assert sorted(calls) == sorted(set(calls))
    blocks = [c for c in calls if c[1] == 128 * 1024]
    assert len(blocks) == 8 and calls[0] == (len(data) - 64 * 1024, 64 * 1024)
    assert acc.bytes_read == len(data) + 64 * 1024 and len(calls) == 9


def test_a_store_counting_into_its_clients_counter_loses_no_operation() -> None:
    """The S3 store counts into its client's counter: both sides count under one lock, so
    counts made at once from many threads on either side are all kept."""
    import threading

    from ckptrescue.stores.base import OperationCounts, StoreStats

    client, store = OperationCounts(), StoreStats()
    store.count_into(client)

    def count(counts: OperationCounts) -> None:
        for _ in range(50_000):
            counts.count("GetObject")

    threads = [threading.Thread(target=count, args=(c,)) for c in (client, store) * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert client.operations["GetObject"] == store.operations["GetObject"] == 300_000
