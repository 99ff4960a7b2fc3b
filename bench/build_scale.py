"""`manifest build` at scale: memory flat in the number of files (issue #17).

1. Peak RSS of a local ``manifest build`` (``--jobs 2``) of N small files against N/10 files,
   each build in its own child process (``wait4`` rusage), with the RSS of a child that only
   imports the manifest module as the floor. Flat memory: the ratio stays near 1.
2. The same for the old in-memory build, reproduced here from the same public functions
   (``walk`` into a list, ``hash_many`` over it, a dict of every entry, ``sorted``,
   ``write_outputs``): the anchor the new build is measured against, in the same run.
3. Build time of N files: new / old, and each against ``sha256sum`` of the same files (one
   ``xargs -0 sha256sum`` over the sorted names; page cache warm for all).

Every output is checked: the new build's manifest equals the old one's and ``sha256sum``'s
output byte for byte, and the sidecars are equal.

Usage: python bench/build_scale.py [--files 200000]
Env: CKPTRESCUE_BENCH_BUILD_FILES overrides the default N (the issue's scale is 100 million;
the memory ratio is what carries over). The files are created and removed by the bench.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PER_DIR = 1000

NEW = r"""
import json, sys, time
from ckptrescue.datasets.manifest import build_manifest
root, out = sys.argv[1:3]
start = time.perf_counter()
r = build_manifest(root, out, jobs=2)
print(json.dumps({"elapsed": time.perf_counter() - start, "files": r.to_json()["files"]}))
"""

# the build as it was before the scratch store: every FileEntry and ManifestEntry held at once
OLD = r"""
import json, os, sys, time
from pathlib import Path
from ckptrescue.datasets.manifest import hash_many
from ckptrescue.datasets.manifest_files import ManifestEntry, write_outputs
from ckptrescue.datasets.progress import Tracker
from ckptrescue.datasets.walk import walk
root, out = sys.argv[1:3]
start = time.perf_counter()
listing = walk(root)
todo = listing.files
tracker = Tracker(len(todo), sum(f.size for f in todo), None)
done = {}
with open(out + ".partial.jsonl", "wb") as log:
    for item in hash_many(os.fsencode(root), todo, jobs=2, scheduler=None, tracker=tracker):
        if isinstance(item, ManifestEntry):
            done[item.rel] = item
            log.write(json.dumps(item.to_json()).encode() + b"\n")
            log.flush()
entries = sorted(done.values(), key=lambda e: e.rel)
write_outputs(Path(out), entries)
os.unlink(out + ".partial.jsonl")
print(json.dumps({"elapsed": time.perf_counter() - start, "files": len(entries)}))
"""
FLOOR = "import ckptrescue.datasets.manifest"


def make_tree(root: Path, n: int) -> None:
    """N small files (8..64 bytes from their index), PER_DIR per directory."""
    for d in range((n + PER_DIR - 1) // PER_DIR):
        sub = root / f"d{d:05d}"
        sub.mkdir(parents=True)
        for i in range(min(PER_DIR, n - d * PER_DIR)):
            k = d * PER_DIR + i
            (sub / f"f{i:04d}.bin").write_bytes(k.to_bytes(8, "little") * (1 + k % 8))


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


def sha256sum(root: Path, out: Path) -> float:
    """The anchor: ``sha256sum`` over the names in bytewise order (what the manifest must
    equal); the names are listed and sorted by ``find`` and ``sort`` (this process stays small:
    a child's peak RSS starts from its parent's)."""
    listing = root.parent / (root.name + ".names")
    subprocess.run(f"find . -type f -printf '%P\\0' | LC_ALL=C sort -z > '{listing}'",
                   shell=True, cwd=root, check=True)  # noqa: S602 - fixed command, our path
    start = time.perf_counter()
    with out.open("wb") as fh, listing.open("rb") as names_in:
        subprocess.run(["xargs", "-0", "sha256sum", "--"], stdin=names_in, stdout=fh,
                       cwd=root, check=True)
    elapsed = time.perf_counter() - start
    listing.unlink()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int,
                        default=int(os.environ.get("CKPTRESCUE_BENCH_BUILD_FILES", "200000")))
    opts = parser.parse_args()
    n = opts.files
    work = Path(tempfile.mkdtemp(prefix="ckptrescue-build-scale-"))
    try:
        trees = {}
        for count in (n // 10, n):
            root = work / f"t{count}"
            start = time.perf_counter()
            make_tree(root, count)
            trees[count] = root
            print(f"made {count:,} files in {time.perf_counter() - start:.1f} s", flush=True)
        big, small = trees[n], trees[n // 10]
        anchor = sha256sum(big, work / "sha256sum.out")
        anchor = min(anchor, sha256sum(big, work / "sha256sum.out"))
        print(f"anchor: sha256sum of {n:,} files (xargs, sorted names): {anchor:.2f} s "
              f"({n / anchor:,.0f} files/s)", flush=True)
        _, floor = child(FLOOR)
        rss: dict[tuple[str, int], int] = {}
        elapsed: dict[str, float] = {}
        for label, code in (("new", NEW), ("old", OLD)):
            for count, root in ((n // 10, small), (n, big)):
                out = work / f"{label}-{count}.sha256"
                data, peak = child(code, str(root), str(out))
                assert data["files"] == count, data
                rss[label, count] = peak
                if count == n:
                    elapsed[label] = float(data["elapsed"])  # type: ignore[arg-type]
                print(f"{label} build of {count:,} files: {float(data['elapsed']):.1f} s, "  # type: ignore[arg-type]
                      f"peak RSS {peak / 1024:.0f} MiB", flush=True)
        new_out, old_out = work / f"new-{n}.sha256", work / f"old-{n}.sha256"
        assert new_out.read_bytes() == old_out.read_bytes() == \
            (work / "sha256sum.out").read_bytes(), "outputs differ"
        assert Path(str(new_out) + ".jsonl").read_bytes() == \
            Path(str(old_out) + ".jsonl").read_bytes(), "sidecars differ"
        assert not Path(str(new_out) + ".build.sqlite").exists()
        print("outputs: new == old == sha256sum (byte for byte), sidecars equal")
        print(f"peak RSS floor (interpreter + manifest module): {floor / 1024:.0f} MiB")
        for label in ("new", "old"):
            lo, hi = rss[label, n // 10], rss[label, n]
            print(f"peak RSS, {label} build: {n // 10:,} files {lo / 1024:.0f} MiB, {n:,} files "
                  f"{hi / 1024:.0f} MiB: ratio {hi / lo:.2f} (10x the files); growth "
                  f"{(hi - lo) * 1024 / (n - n // 10):.0f} bytes per added file")
        print(f"peak RSS at {n:,} files, new / old: {rss['new', n] / rss['old', n]:.2f}")
        print(f"build time of {n:,} files, new / old: {elapsed['new'] / elapsed['old']:.2f} "
              f"(new {elapsed['new'] / anchor:.2f}x sha256sum, old "
              f"{elapsed['old'] / anchor:.2f}x sha256sum)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
