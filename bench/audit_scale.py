"""`manifest audit` at scale: time against a bare walk, and memory that stays flat (issue #17).

1. The quick audit (metadata path: size and mtime from the sidecar, no content read) of N small
   files (default 200,000; the issue's figure is 1,000,000), against a bare recursive
   ``os.scandir`` walk with ``entry.stat()`` of the same tree, measured in the same run (page
   cache warm for both), interleaved, best of ``--rounds`` (3) each. Goal from the issue:
   within 2x. The quick audit both ways: the sorted merge of the walk and the manifest (the
   default, no state) and through the state database (``--state``): its first run, which
   imports the manifest, and its reruns against the same manifest bytes (import reused).
2. Peak RSS of the audit (quick merge, quick through the state, and full: every file hashed and
   its row committed) at N files against N/10 files, each audit in its own child process
   (``wait4`` rusage), with the RSS of a child that only imports the audit module as the floor.
   Flat memory: the ratio stays near 1.

Usage: python bench/audit_scale.py [--files 1000000] [--rounds 3] [--no-full]
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
state = None if state == "-" else state
start = time.perf_counter()
r = audit(root, manifest, quick=mode == "quick", jobs=2, state=state, restart=state is not None)
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
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds of walk and quick audits (best of each)")
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
        manifest = big.with_suffix(".sha256")
        state = work / "big.audit.sqlite"
        walks: list[float] = []
        merges: list[float] = []
        stored: list[float] = []
        first: dict[str, object] = {}
        rss_merge_big = rss_state_big = 0
        for k in range(opts.rounds):  # interleaved: the walk, the merge, the state path
            start = time.perf_counter()
            seen = bare_walk(big)
            walks.append(time.perf_counter() - start)
            assert seen == n
            merge, rss_merge_big = child(CHILD, str(big), str(manifest), "-", "quick")
            assert merge["counts"]["ok"] == n and merge["omitted"] == n, merge  # type: ignore[index]
            merges.append(float(merge["elapsed"]))  # type: ignore[arg-type]
            via_state, rss = child(CHILD, str(big), str(manifest), str(state), "quick")
            assert via_state["counts"] == merge["counts"], via_state
            if k == 0:
                first, rss_state_big = via_state, rss
            else:
                stored.append(float(via_state["elapsed"]))  # type: ignore[arg-type]
        anchor = min(walks)
        print(f"anchor: bare os.scandir walk + stat of {n:,} files: {anchor:.2f} s "
              f"({n / anchor:,.0f} files/s; best of {len(walks)}: "
              f"{', '.join(f'{w:.2f}' for w in walks)})")
        print(f"quick audit, sorted merge (the default, no state): {min(merges):.2f} s = "
              f"{min(merges) / anchor:.2f}x the walk (goal <= 2x; runs "
              f"{', '.join(f'{m:.2f}' for m in merges)})")
        print(f"quick audit --state, first (imports the manifest): {first['elapsed']:.2f} s = "
              f"{float(first['elapsed']) / anchor:.2f}x the walk")  # type: ignore[arg-type]
        if stored:
            print(f"quick audit --state, rerun (manifest import reused): {min(stored):.2f} s = "
                  f"{min(stored) / anchor:.2f}x the walk")
        print(f"  rows listed in the result: {first['listed']}, ok rows omitted: "
              f"{first['omitted']:,}")
        small = trees[n // 10]
        small_state = work / "small.audit.sqlite"
        _, rss_merge_small = child(CHILD, str(small), str(small.with_suffix(".sha256")), "-",
                                   "quick")
        _, rss_state_small = child(CHILD, str(small), str(small.with_suffix(".sha256")),
                                   str(small_state), "quick")
        _, floor = child(FLOOR)
        print(f"peak RSS: interpreter + audit module {floor / 1024:.0f} MiB (floor)")
        for label, lo, hi in (("quick audit, sorted merge", rss_merge_small, rss_merge_big),
                              ("quick audit --state", rss_state_small, rss_state_big)):
            print(f"peak RSS, {label}: {n // 10:,} files {lo / 1024:.0f} MiB, "
                  f"{n:,} files {hi / 1024:.0f} MiB: ratio {hi / lo:.2f} (10x the files)")
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
