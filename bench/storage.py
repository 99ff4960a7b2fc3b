"""Benchmark: ddrescue imaging vs a plain sequential read, and FIEMAP mapping vs a stat walk.

Usage: ``python bench/storage.py [--size-mib N] [--files N]`` (env CKPTRESCUE_BENCH_SIZE=large
for 2048 MiB / 20,000 files; defaults 256 MiB / 2,000 files).

1. ``storage.imaging.image`` (both ddrescue passes, mapfile parse, image + rescued-range hashes,
   source hash) of a read-only loop device over SIZE MiB of random data in /dev/shm, onto the
   local disk, against the anchor: one sequential read + SHA-256 of the same device (what any
   "hash then copy" takes at least once). The kit reads the source twice (image + source hash)
   and hashes the image: expect ~2-3x.
2. ``storage.locate.map_files`` (FS_IOC_FIEMAP per file + range intersection) over N files
   against the anchor ``os.walk`` + ``lstat`` of the same tree (the cost of just listing).
Needs root and loop devices for (1); (2) runs anywhere.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def bench_imaging(size_mib: int) -> None:
    from ckptrescue.record.case import Case
    from ckptrescue.storage.imaging import image

    if os.geteuid() != 0:
        print("imaging: skipped (needs root for loop devices)")
        return
    src = Path(tempfile.mkdtemp(prefix="ckr-bench-", dir="/dev/shm")) / "src.img"
    work = Path(tempfile.mkdtemp(prefix="ckr-bench-"))
    try:
        with open(src, "wb") as fh:
            for _ in range(size_mib):
                fh.write(os.urandom(1 << 20))
        dev = subprocess.run(["losetup", "--read-only", "--find", "--show", str(src)],
                             check=True, capture_output=True, text=True).stdout.strip()
        try:
            t0 = time.perf_counter()
            h = hashlib.sha256()
            with open(dev, "rb", buffering=0) as fh:
                while block := fh.read(1 << 20):
                    h.update(block)
            anchor = time.perf_counter() - t0
            case = Case.create(work / "case")
            t0 = time.perf_counter()
            res = image(dev, case=case, dest=work / "ev")
            kit = time.perf_counter() - t0
            assert res.image_sha256 == h.hexdigest()
        finally:
            subprocess.run(["losetup", "-d", dev], check=False)
        print(f"imaging {size_mib} MiB: kit {kit:.2f} s, anchor read+sha256 {anchor:.2f} s, "
              f"ratio {kit / anchor:.2f} ({size_mib / kit:.0f} MiB/s end to end)")
    finally:
        shutil.rmtree(src.parent, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def bench_locate(files: int) -> None:
    from ckptrescue.storage import fiemap
    from ckptrescue.storage.locate import map_files

    root = Path(tempfile.mkdtemp(prefix="ckr-bench-locate-"))
    try:
        for i in range(files):
            d = root / f"d{i // 500}"
            d.mkdir(exist_ok=True)
            with open(d / f"f{i}.bin", "wb") as fh:
                fh.write(os.urandom(8192))
        os.sync()
        target = fiemap.extents(root / "d0" / "f0.bin")[0]
        t0 = time.perf_counter()
        n = 0
        for dirpath, _dirs, names in os.walk(root):
            for name in names:
                (Path(dirpath) / name).lstat()
                n += 1
        anchor = time.perf_counter() - t0
        t0 = time.perf_counter()
        hits = map_files(root, [(target.physical, target.physical + 512)])
        kit = time.perf_counter() - t0
        assert [f.path for f in hits[0].files] == ["d0/f0.bin"]
        print(f"locate over {n} files: FIEMAP walk {kit:.3f} s, anchor walk+lstat "
              f"{anchor:.3f} s, ratio {kit / anchor:.2f} ({n / kit:.0f} files/s)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    large = os.environ.get("CKPTRESCUE_BENCH_SIZE") == "large"
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=2048 if large else 256)
    ap.add_argument("--files", type=int, default=20000 if large else 2000)
    args, _ = ap.parse_known_args()
    bench_imaging(args.size_mib)
    bench_locate(args.files)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
