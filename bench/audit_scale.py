"""`manifest audit` at scale: time against a bare walk, and memory that stays flat (issue #17).

1. The quick audit (metadata path: size and mtime from the sidecar, no content read) of N small
   files (default 200,000; the issue's figure is 1,000,000), against a bare recursive
   ``os.scandir`` walk with ``entry.stat()`` of the same tree, measured in the same run (page
   cache warm for both). Goal from the issue: within 2x. Two figures: the first audit against a
   manifest (which imports the manifest into the state database) and a rerun against the same
   manifest bytes (the imported manifest is reused; DIR is walked again).
2. Peak RSS of the audit (quick, and full: every file hashed and its row committed) at N files
   against N/10 files, each audit in its own child process (``wait4`` rusage), with the RSS of a
   child that only imports the audit module as the floor. Flat memory: the ratio stays near 1.

Usage: python bench/audit_scale.py [--files 1000000] [--no-full]
Env: CKPTRESCUE_BENCH_SCALE_FILES overrides the default N. Creating the files is part of the
bench (tens of seconds for 1,000,000 files); they are removed afterwards.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PER_DIR = 1000

CHILD = r"""
import json, sys, time
from ckptrescue.datasets.audit import audit
root, manifest, state, mode = sys.argv[1:5]
start = time.perf_counter()
r = audit(root, manifest, quick=mode == "quick", jobs=2, state=state, restart=True)
elapsed = time.perf_counter() - start
print(json.dumps({"elapsed": elapsed, "counts": r.counts, "listed": len(r.files),
                  "omitted": r.files_omitted}))
"""
FLOOR = "import ckptrescue.datasets.audit"


def make_tree(root: Path, n: int) -> None:
    """N small files (8..64 bytes from their index), PER_DIR per directory; the manifest and
    its sidecar written beside ``root`` as ``manifest build`` writes them."""
    from ckptrescue.datasets import sha256sum_format
    from ckptrescue.datasets.manifest_files import ManifestEntry

    manifest = root.with_suffix(".sha256")
    with manifest.open("wb") as text, Path(str(manifest) + ".jsonl").open("wb") as side:
        for d in range((n + PER_DIR - 1) // PER_DIR):
            sub = root / f"d{d:05d}"
            sub.mkdir(parents=True)
            for i in range(min(PER_DIR, n - d * PER_DIR)):
                k = d * PER_DIR + i
                data = k.to_bytes(8, "little") * (1 + k % 8)
                rel = f"d{d:05d}/f{i:04d}.bin"
                path = root / rel
                path.write_bytes(data)
                st = path.stat()
                digest = hashlib.sha256(data).hexdigest()
                text.write(sha256sum_format.format_line(digest, rel.encode()))
                entry = ManifestEntry(rel.encode(), st.st_size, st.st_mtime_ns, digest,
                                      "other", st.st_ino)
                side.write(json.dumps(entry.to_json()).encode() + b"\n")


def bare_walk(root: Path) -> int:
    """The anchor: every entry stat'ed, nothing kept."""
    count = 0
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                else:
                    count += 1
    return count


def child(code: str, *args: str) -> tuple[dict[str, object], int]:
    """Run ``code`` in a fresh interpreter; (its JSON line, its peak RSS in KiB)."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            cwd=str(Path(__file__).resolve().parent.parent))
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode})")
    data = json.loads(out) if out.strip() else {}
    return data, int(usage.ru_maxrss)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int,
                        default=int(os.environ.get("CKPTRESCUE_BENCH_SCALE_FILES", "200000")))
    parser.add_argument("--no-full", action="store_true", help="skip the hashing audits")
    opts = parser.parse_args()
    n = opts.files
    work = Path(tempfile.mkdtemp(prefix="ckptrescue-audit-scale-"))
    try:
        trees = {}
        for count in (n // 10, n):
            root = work / f"t{count}"
            start = time.perf_counter()
            make_tree(root, count)
            trees[count] = root
            print(f"made {count:,} files in {time.perf_counter() - start:.1f} s", flush=True)
        big = trees[n]
        walks = []
        for _ in range(3):
            start = time.perf_counter()
            seen = bare_walk(big)
            walks.append(time.perf_counter() - start)
        assert seen == n
        anchor = min(walks)
        print(f"anchor: bare os.scandir walk + stat of {n:,} files: {anchor:.2f} s "
              f"({n / anchor:,.0f} files/s)")
        manifest = big.with_suffix(".sha256")
        state = work / "big.audit.sqlite"
        first, rss_quick_big = child(CHILD, str(big), str(manifest), str(state), "quick")
        again, _ = child(CHILD, str(big), str(manifest), str(state), "quick")
        assert first["counts"]["ok"] == n, first  # type: ignore[index]
        print(f"quick audit, first (imports the manifest): {first['elapsed']:.2f} s = "
              f"{float(first['elapsed']) / anchor:.2f}x the walk (goal <= 2x)")  # type: ignore[arg-type]
        print(f"quick audit, rerun (manifest import reused): {again['elapsed']:.2f} s = "
              f"{float(again['elapsed']) / anchor:.2f}x the walk (goal <= 2x)")  # type: ignore[arg-type]
        print(f"  rows listed in the result: {first['listed']}, ok rows omitted: "
              f"{first['omitted']:,}")
        small = trees[n // 10]
        small_state = work / "small.audit.sqlite"
        _, rss_quick_small = child(CHILD, str(small), str(small.with_suffix(".sha256")),
                                   str(small_state), "quick")
        _, floor = child(FLOOR)
        print(f"peak RSS: interpreter + audit module {floor / 1024:.0f} MiB (floor)")
        print(f"peak RSS, quick audit: {n // 10:,} files {rss_quick_small / 1024:.0f} MiB, "
              f"{n:,} files {rss_quick_big / 1024:.0f} MiB: ratio "
              f"{rss_quick_big / rss_quick_small:.2f} (10x the files)")
        if not opts.no_full:
            full_small, rss_full_small = child(CHILD, str(small),
                                               str(small.with_suffix(".sha256")),
                                               str(small_state), "full")
            full_big, rss_full_big = child(CHILD, str(big), str(manifest), str(state), "full")
            print(f"full audit (every file hashed, rows committed as they finish): "
                  f"{full_big['elapsed']:.1f} s for {n:,} files = "
                  f"{float(full_big['elapsed']) / anchor:.1f}x the walk")  # type: ignore[arg-type]
            print(f"peak RSS, full audit: {n // 10:,} files {rss_full_small / 1024:.0f} MiB, "
                  f"{n:,} files {rss_full_big / 1024:.0f} MiB: ratio "
                  f"{rss_full_big / rss_full_small:.2f} (10x the files)")
            assert full_small["counts"]["ok"] == n // 10  # type: ignore[index]
        print(f"state database for {n:,} files: {state.stat().st_size / (1 << 20):.0f} MiB")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
