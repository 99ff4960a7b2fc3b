"""`manifest diff` at scale: memory flat in the number of entries (issue #31).

Two synthetic manifests of N entries (a tenth changed, renamed, removed or added between them)
are compared in a child process each, at N and at N/10; the peak RSS of each child (``wait4``
rusage) is printed with the ratio, against a child that only imports the module (the floor).
Flat memory: the ratio stays near 1. Time is printed against ``sort -m`` + ``join`` of the same
two files (coreutils' streaming join, the anchor).

Usage: python bench/manifest_diff.py [--entries 1000000]
Env: CKPTRESCUE_BENCH_DIFF_ENTRIES overrides the default N.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHILD = r"""
import sys
from ckptrescue.datasets.manifest_diff import diff_manifests
if sys.argv[1] != "-":
    r = diff_manifests(sys.argv[1], sys.argv[2], output=sys.argv[3])
    print(r.answer())
"""


def write_pair(folder: Path, n: int) -> tuple[Path, Path]:
    old, new = folder / f"old-{n}.sha256", folder / f"new-{n}.sha256"
    with old.open("w") as fo, new.open("w") as fn:
        for i in range(n):
            digest = hashlib.sha256(str(i).encode()).hexdigest()
            name = f"shard/{i // 1000:05d}/sample-{i:09d}.bin"
            fo.write(f"{digest}  {name}\n")
            kind = i % 40
            if kind == 1:  # changed
                fn.write(f"{hashlib.sha256(b'x' + str(i).encode()).hexdigest()}  {name}\n")
            elif kind == 2:  # renamed
                fn.write(f"{digest}  moved/{name}\n")
            elif kind == 3:  # removed
                continue
            else:
                fn.write(f"{digest}  {name}\n")
            if kind == 4:  # added
                fn.write(f"{hashlib.sha256(b'n' + str(i).encode()).hexdigest()}  new/{name}\n")
    return old, new


def child(*argv: str) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *argv], stdout=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    out = proc.stdout.read().decode() if proc.stdout else ""
    if status != 0:
        raise SystemExit(f"child failed: {out}")
    return time.perf_counter() - start, usage.ru_maxrss  # KiB


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int,
                        default=int(os.environ.get("CKPTRESCUE_BENCH_DIFF_ENTRIES", "200000")))
    n = parser.parse_args().entries
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _t, floor = child("-")
        rows = {}
        for size in (n // 10, n):
            old, new = write_pair(folder, size)
            seconds, rss = child(str(old), str(new), str(folder / f"changes-{size}.sha256"))
            start = time.perf_counter()
            subprocess.run(f"join -j2 <(sort -k2 {old}) <(sort -k2 {new}) > /dev/null",
                           shell=True, executable="/bin/bash", check=True)  # noqa: S602
            anchor = time.perf_counter() - start
            rows[size] = (seconds, rss, anchor)
            print(f"{size:>10,} entries: {seconds:6.2f} s (sort+join {anchor:5.2f} s, "
                  f"{seconds / anchor:4.1f}x), peak RSS {rss / 1024:6.1f} MiB "
                  f"(floor {floor / 1024:.1f} MiB)")
        small, large = rows[n // 10][1] - floor, rows[n][1] - floor
        print(f"RSS above the floor at N / at N/10: {large / max(small, 1):.2f} "
              "(flat memory: near 1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
