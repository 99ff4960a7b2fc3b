"""Benchmark: probe a torch checkpoint in place on S3 (FUSE view, ranged GETs) vs an
``aws s3 cp``-equivalent download + local probe, and vs the download alone, in the same run.

The checkpoint (a real ``torch.save``, ``STORES_BENCH_MIB`` MiB, default 256; 1024 with
``CKPTRESCUE_BENCH_SIZE=large``, the issue's size) sits in moto, which runs in its own process on
127.0.0.1 with ``STORES_BENCH_LATENCY_MS`` (default 20) added to every request: a remote region's
round trip. The download is s3transfer's ``download_file`` (what ``aws s3 cp`` runs: 8 MiB ranged
GETs, 10 threads) through the kit's read-only client.

Printed: bytes read by the probe in place / object size (goal ≤ 1.01), and the wall-time ratios
(goal: in place faster than download + probe). Needs root and /dev/fuse for the view.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    large = os.environ.get("CKPTRESCUE_BENCH_SIZE") == "large"
    mib = int(os.environ.get("STORES_BENCH_MIB", "1024" if large else "256"))
    latency = float(os.environ.get("STORES_BENCH_LATENCY_MS", "20"))
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths
    from ckptrescue.stores import StoreOptions, open_store, open_view
    from fixtures import stores as fs

    if not os.path.exists("/dev/fuse") or os.geteuid() != 0:
        print("stores bench: needs root and /dev/fuse for the FUSE view; skipped")
        return 0
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):  # moto accepts any
        os.environ.setdefault(var, "testing")
    work = Path(tempfile.mkdtemp(prefix="ckr-bench-stores-"))
    server = fs.start_moto_process(latency_ms=latency)
    try:
        src = fs.big_torch_zip(work / "model.pt", mib << 20)
        size = src.stat().st_size
        writer = server.writer()
        writer.create_bucket(Bucket="bench")
        writer.upload_file(str(src), "bench", "run/step-1/model.pt")
        url = "s3://bench/run/step-1/model.pt"
        options = StoreOptions(endpoint_url=server.endpoint, region="us-east-1")
        print(f"object: {size / 2**20:.0f} MiB torch zip, {latency:g} ms per request")

        start = time.perf_counter()
        with open_view(url, options=options) as view:
            (remote,) = probe_paths([view.path])
            record = view.settle()
        t_view = time.perf_counter() - start

        store = open_store(url, options)
        dest = work / "dl" / "model.pt"
        dest.parent.mkdir()
        start = time.perf_counter()
        store.client.download_file("bench", "run/step-1/model.pt", str(dest))  # type: ignore[attr-defined]
        t_download = time.perf_counter() - start
        (local,) = probe_paths([dest])
        t_both = time.perf_counter() - start

        same = (str(remote.verdict), remote.tensors_total) == (str(local.verdict),
                                                               local.tensors_total)
        ratio = record["bytes_read"] / size
        print(f"probe in place:        {t_view:7.2f} s  verdict {remote.verdict}, "
              f"{record['bytes_read'] / 2**20:.1f} MiB read in {record['ranged_gets']} ranged GETs "
              f"of {record['objects_read']} object(s)")
        print(f"download + probe:      {t_both:7.2f} s  (download {t_download:.2f} s)")
        print(f"bytes read / object size:          {ratio:.4f}  (goal <= 1.01)")
        print(f"in place vs download + probe:      {t_both / t_view:.2f}x  (goal > 1: faster)")
        print(f"in place vs download alone:        {t_download / t_view:.2f}x")
        print(f"same verdict as the local probe:   {same}")
        return 0 if same and ratio <= 1.01 else 1
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
