"""Benchmark: ``s3 verify`` of N small objects vs a plain sequential head_object loop.

Both run in the same process against the same moto server (127.0.0.1, real HTTP) over the same
objects, each carrying a server-side SHA256. Printed: the time of each, the ratio (goal >= 5x),
and the object bytes verify downloaded (must be 0).

The server runs in its own process (``python -m ckptrescue.stores.s3.localserver``) so that its CPU time
does not compete with the client's for one interpreter lock. On 127.0.0.1 there is no network, so
a fixed per-request delay (``S3_BENCH_LATENCY_MS``, default 20 ms, a typical same-region S3
HEAD round trip) stands in for it: the benchmark measures what concurrency buys a responder on a
real endpoint. ``S3_BENCH_LATENCY_MS=0`` shows the pure-CPU figure (then the client and moto
share the machine's cores and the ratio is bounded by them).

Usage: python bench/s3.py [N]
  env: S3_BENCH_N (5000), S3_BENCH_LATENCY_MS (20), S3_BENCH_WORKERS (16)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("S3_BENCH_N", "5000"))
    latency = float(os.environ.get("S3_BENCH_LATENCY_MS", "20"))
    workers = int(os.environ.get("S3_BENCH_WORKERS", "16"))
    from ckptrescue.stores.s3.api import verify_prefix
    from ckptrescue.stores.s3.client import ClientOptions, make_client, stats
    from ckptrescue.stores.s3.localserver import LocalS3, check_moto_checksum_support

    check_moto_checksum_support()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckptrescue.stores.s3.localserver", "--latency-ms", str(latency)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    server = LocalS3(endpoint_url=proc.stdout.readline().strip())
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    try:
        writer = server.writer_client()
        bucket = "bench-bucket"
        writer.create_bucket(Bucket=bucket)
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp)
            keys = [f"shard-{i // 1000:03d}/obj-{i:06d}.bin" for i in range(n)]
            t0 = time.perf_counter()

            def put(key: str) -> None:
                body = os.urandom(256)
                path = local / key
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(body)
                writer.put_object(Bucket=bucket, Key=f"data/{key}", Body=body,
                                  ChecksumAlgorithm="SHA256")

            with ThreadPoolExecutor(16) as pool:
                list(pool.map(put, keys))
            print(f"setup: {n} objects uploaded in {time.perf_counter() - t0:.1f}s "
                  f"(latency {latency:g} ms per request)", file=sys.stderr)

            plain = server.writer_client()
            t0 = time.perf_counter()
            for key in keys:
                plain.head_object(Bucket=bucket, Key=f"data/{key}", ChecksumMode="ENABLED")
            anchor = time.perf_counter() - t0

            options = ClientOptions(endpoint_url=server.endpoint_url, region="us-east-1",
                                    max_pool_connections=workers)
            client = make_client(options=options)
            t0 = time.perf_counter()
            result = verify_prefix(f"s3://{bucket}/data/", local, client_options=options,
                                   workers=workers, client=client)
            measured = time.perf_counter() - t0
            counts = result.counts
            st = stats(client)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    ok = counts["match"] == n
    print(f"objects                  {n} (all match: {ok})")
    print(f"sequential head loop     {anchor:.2f}s  ({n / anchor:.0f} objects/s)  [anchor]")
    print(f"s3 verify ({workers} workers)   {measured:.2f}s  ({n / measured:.0f} objects/s)")
    print(f"ratio                    {anchor / measured:.2f}x faster than the anchor (goal >= 5x)")
    print(f"object bytes downloaded  {st.bytes_downloaded} (GetObject calls: "
          f"{st.operations.get('GetObject', 0)}; must be 0)")
    return 0 if ok and st.bytes_downloaded == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
