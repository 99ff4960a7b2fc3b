"""Benchmarks for the dataset tools, each against GNU coreutils in the same run.

1. ``manifest build`` over SIZE MiB of files (default 512; the issue's figure is 2048) with
   --jobs 1 and --jobs 2, against ``sha256sum`` over the same files (page cache warm for both).
   Goal from the issue: >= 3.4x sha256sum with one job, >= 6.5x with two (on a quiet machine);
   plain hashlib on one core is measured in the same run as the per-core limit.
2. ``manifest audit`` of N small files (default 20,000; the issue's figure is 100,000), files/s,
   against ``sha256sum -c`` of the same manifest.

Usage: python bench/datasets.py [--size-mib 2048] [--files 100000] [--file-mib 64]
Env: CKPTRESCUE_BENCH_DATASET_MIB, CKPTRESCUE_BENCH_AUDIT_FILES override the defaults.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ckptrescue.datasets.audit import audit  # noqa: E402
from ckptrescue.datasets.manifest import build_manifest  # noqa: E402

MiB = 1 << 20


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _warm(root: Path) -> None:
    for p in root.rglob("*"):
        if p.is_file():
            with p.open("rb") as fh:
                while fh.read(8 * MiB):
                    pass


def _hashlib_pass(root: Path, names: list[str]) -> None:
    """Plain hashlib SHA-256 of every file, one thread: what one core can hash."""
    buf = bytearray(MiB)
    for name in names:
        digest = hashlib.sha256()
        with (root / name).open("rb", buffering=0) as fh:
            while n := fh.readinto(buf):
                digest.update(memoryview(buf)[:n])


def bench_build(work: Path, size_mib: int, file_mib: int) -> None:
    root = work / "big"
    root.mkdir()
    n = max(1, size_mib // file_mib)
    block = os.urandom(MiB)
    for i in range(n):
        with (root / f"shard-{i:05d}.bin").open("wb") as fh:
            for j in range(file_mib):
                fh.write(block[j % 7 :] + block[: j % 7])  # distinct blocks, cheap to make
    total = n * file_mib
    _warm(root)
    names = sorted(p.name for p in root.iterdir())
    t_ref = _timed(lambda: subprocess.run(["sha256sum", *names], cwd=root, check=True,
                                          stdout=subprocess.DEVNULL))
    t_core = _timed(lambda: _hashlib_pass(root, names))
    print(f"manifest build over {n} files, {total} MiB (page cache warm)")
    print(f"  sha256sum           {t_ref:7.2f} s  {total / t_ref:8.0f} MiB/s  (anchor 1.00x)")
    print(f"  hashlib, one core   {t_core:7.2f} s  {total / t_core:8.0f} MiB/s  "
          f"ratio {t_ref / t_core:5.2f}x  (the per-core limit)")
    for jobs in (1, 2):
        out = work / f"m{jobs}.sha256"
        t = _timed(lambda out=out, jobs=jobs: build_manifest(root, out, jobs=jobs))
        goal = {1: 3.4, 2: 6.5}[jobs]
        print(f"  ckptrescue --jobs {jobs} {t:7.2f} s  {total / t:8.0f} MiB/s  "
              f"ratio {t_ref / t:5.2f}x  (goal >= {goal}x)  "
              f"{t_core / t / jobs:5.2f} of {jobs} core(s)' hashlib limit")
    same = (work / "m1.sha256").read_bytes() == subprocess.run(
        ["sha256sum", *names], cwd=root, check=True, capture_output=True).stdout
    print(f"  manifest identical to sha256sum output: {same}")
    shutil.rmtree(root)


def bench_audit(work: Path, files: int) -> None:
    root = work / "small"
    per_dir = 1000
    for i in range(files):
        d = root / f"d{i // per_dir:04d}"
        if i % per_dir == 0:
            d.mkdir(parents=True)
        (d / f"{i:07d}.json").write_bytes(os.urandom(512 + (i % 8) * 256))
    manifest = work / "small.sha256"
    build_manifest(root, manifest)
    _warm(root)
    t_ref = _timed(lambda: subprocess.run(["sha256sum", "--quiet", "-c", str(manifest)],
                                          cwd=root, check=True))
    t1 = _timed(lambda: audit(root, manifest, jobs=1))
    t2 = _timed(lambda: audit(root, manifest, jobs=2))
    tq = _timed(lambda: audit(root, manifest, quick=True))
    print(f"manifest audit of {files} small files (page cache warm)")
    print(f"  sha256sum -c           {files / t_ref:9.0f} files/s  (anchor 1.00x)")
    for label, t in (("audit --jobs 1", t1), ("audit --jobs 2", t2), ("audit --quick", tq)):
        print(f"  ckptrescue {label:<14} {files / t:9.0f} files/s  ratio {t_ref / t:5.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int,
                    default=int(os.environ.get("CKPTRESCUE_BENCH_DATASET_MIB", "512")))
    ap.add_argument("--file-mib", type=int, default=64)
    ap.add_argument("--files", type=int,
                    default=int(os.environ.get("CKPTRESCUE_BENCH_AUDIT_FILES", "20000")))
    ap.add_argument("--tmp", default=None, help="work directory (default: system temp)")
    args = ap.parse_args()
    if shutil.which("sha256sum") is None:
        sys.exit("bench/datasets.py needs sha256sum (coreutils) as its anchor")
    with tempfile.TemporaryDirectory(prefix="ckptrescue-bench-", dir=args.tmp) as tmp:
        work = Path(tmp)
        bench_build(work, args.size_mib, args.file_mib)
        bench_audit(work, args.files)


if __name__ == "__main__":
    main()
