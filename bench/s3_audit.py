"""Benchmark: ``manifest audit s3://`` of N objects that carry a stored full-object SHA-256.

The issue's figure: 5,000 objects audited with **0 bytes downloaded** (each object is checked
against the SHA-256 its store holds, one HeadObject with ChecksumMode=ENABLED). Printed against
two anchors measured in the same run, on the same moto server (its own process, 127.0.0.1, real
HTTP, a fixed per-request delay standing in for the network as in bench/s3.py):

* a plain sequential ``head_object`` loop over the same keys (the least any audit must do);
* the same audit with ``--no-stored-checksums`` (every object downloaded and hashed).

Usage: python bench/s3_audit.py [N]
  env: S3_BENCH_N (5000), S3_BENCH_LATENCY_MS (20), S3_BENCH_OBJECT_BYTES (4096)
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("S3_BENCH_N", "5000"))
    latency = float(os.environ.get("S3_BENCH_LATENCY_MS", "20"))
    size = int(os.environ.get("S3_BENCH_OBJECT_BYTES", "4096"))
    from ckptrescue.datasets.s3dataset import audit_s3
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
        bucket = "audit-bench"
        writer.create_bucket(Bucket=bucket)
        names = [f"shard-{i // 1000:03d}/obj-{i:06d}.bin" for i in range(n)]
        sums: dict[str, str] = {}

        def put(name: str) -> None:
            body = os.urandom(size)
            sums[name] = hashlib.sha256(body).hexdigest()
            writer.put_object(Bucket=bucket, Key=f"data/{name}", Body=body,
                              ChecksumAlgorithm="SHA256")

        t0 = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(put, names))
        print(f"setup: {n} objects of {size} bytes uploaded in {time.perf_counter() - t0:.1f}s "
              f"(latency {latency:g} ms per request)", file=sys.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            manifest = Path(tmp) / "data.sha256"
            manifest.write_text("".join(f"{sums[k]}  {k}\n" for k in sorted(sums)))
            Path(f"{manifest}.jsonl").write_text("".join(
                json.dumps({"path": k, "size": size, "mtime_ns": 0, "sha256": sums[k]}) + "\n"
                for k in sorted(sums)))
            plain = server.writer_client()
            t0 = time.perf_counter()
            for name in names:
                plain.head_object(Bucket=bucket, Key=f"data/{name}", ChecksumMode="ENABLED")
            anchor = time.perf_counter() - t0
            url = f"s3://{bucket}/data/"
            t0 = time.perf_counter()
            stored = audit_s3(url, manifest, endpoint_url=server.endpoint_url)
            t_stored = time.perf_counter() - t0
            t0 = time.perf_counter()
            wide = audit_s3(url, manifest, endpoint_url=server.endpoint_url, jobs=32)
            t_wide = time.perf_counter() - t0
            t0 = time.perf_counter()
            full = audit_s3(url, manifest, endpoint_url=server.endpoint_url, use_stored=False)
            t_full = time.perf_counter() - t0
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    ok = stored.counts["ok"] == n and full.counts["ok"] == n and wide.counts["ok"] == n
    print(f"objects                          {n} x {size} bytes (all ok: {ok})")
    print(f"sequential head_object loop      {anchor:7.2f} s  {n / anchor:7.0f} objects/s  "
          "[anchor]")
    print(f"audit, stored SHA-256 (--jobs 8) {t_stored:7.2f} s  {n / t_stored:7.0f} objects/s  "
          f"ratio {anchor / t_stored:5.2f}x  bytes downloaded {stored.bytes_downloaded} "
          "(goal: 0)")
    print(f"audit, stored SHA-256, --jobs 32 {t_wide:7.2f} s  {n / t_wide:7.0f} objects/s  "
          f"ratio {anchor / t_wide:5.2f}x  bytes downloaded {wide.bytes_downloaded}")
    print(f"audit --no-stored-checksums      {t_full:7.2f} s  {n / t_full:7.0f} objects/s  "
          f"ratio {anchor / t_full:5.2f}x  bytes downloaded {full.bytes_downloaded}")
    return 0 if ok and stored.bytes_downloaded == 0 and wide.bytes_downloaded == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
