"""``manifest build --scheduler``: 1 -> 2 Dask worker processes, against hashlib on one core.

1. A synthetic tree of SIZE MiB (default 512) in a few hundred files of 0.5-3.5 MiB is hashed
   through a ``distributed.LocalCluster`` with 1, then 2 worker processes (threads_per_worker=1),
   best of 3 runs each (workers started and warmed first). The anchor, measured in the same run
   over the same files with the page cache warm: plain ``hashlib.sha256`` in this process, one
   core. Printed: MiB/s of each run, MiB/s per worker as a fraction of that per-core limit, and
   the 1 -> 2 scaling ratio (2.00 is perfect) next to what two plain hashlib processes get on
   this machine at the same time (the 2-core ceiling, other load included); a local ``--jobs 1``
   build of the same tree shows what the manifest itself costs on top of hashing.
2. Many small files: a tree of N files of 1 KiB (default 40,000: batches of
   ``cluster.MAX_BATCH_FILES`` files), files/s per worker against a local ``--jobs 1`` build.
3. Scheduling overhead: 1,000 files of 1 KiB hashed as one batch and as 1,000 batches of one
   file; the difference per batch is what one batch costs the run (client -> scheduler -> worker
   -> result, with the in-flight window), in ms and as a fraction of the time one core takes to
   hash a minimum-size batch (``cluster.MIN_BATCH_BYTES``). These feed the capacity plan
   (5 PB / 100 million files).

Usage: python bench/dask_scaling.py [--size-mib 512] [--small-files 40000]
Env: CKPTRESCUE_BENCH_DASK_MIB, CKPTRESCUE_BENCH_DASK_SMALL_FILES override the defaults.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ckptrescue.datasets import cluster  # noqa: E402
from ckptrescue.datasets.manifest import build_manifest  # noqa: E402

MiB = 1 << 20
RUNS = 3
ONE = 1000  # files in the per-batch overhead tree


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _best(fn: Callable[[], object]) -> float:
    return min(_timed(fn) for _ in range(RUNS))


def make_tree(root: Path, size_mib: int) -> int:
    """Files of 0.5-3.5 MiB (distinct content, cheap to make) up to ``size_mib``; total bytes."""
    root.mkdir(parents=True)
    block = os.urandom(4 * MiB)
    total, i = 0, 0
    while total < size_mib * MiB:
        size = min(MiB // 2 + (i * 7919 % 3072) * 1024, size_mib * MiB - total)
        start = (i * 4099) % (len(block) - size) if size < len(block) else 0
        path = root / f"part-{i % 16:02d}" / f"shard-{i:05d}.bin"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(i.to_bytes(8, "little") + block[start:start + size - 8])
        total += size
        i += 1
    return total


def make_small_tree(root: Path, files: int) -> None:
    root.mkdir(parents=True)
    block = os.urandom(1024 + files)
    for i in range(files):
        path = root / f"d{i % 64:02d}" / f"rec-{i:06d}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(block[i:i + 1024])


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def _hash_one_core(files: list[Path]) -> None:
    """Plain hashlib SHA-256 of every file, one thread: what one core can hash."""
    buf = bytearray(MiB)
    for path in files:
        digest = hashlib.sha256()
        with path.open("rb", buffering=0) as fh:
            while n := fh.readinto(buf):
                digest.update(memoryview(buf)[:n])


def warm_and_hash_one_core(root: Path) -> float:
    """Seconds plain hashlib takes over every file, one thread (after a warming read)."""
    files = _files(root)
    _hash_one_core(files)  # page cache warm
    return _best(lambda: _hash_one_core(files))


def _compute_seconds(client: Any, since: float) -> float:
    """Seconds the cluster's workers spent computing batches since ``since`` (task stream)."""
    total = 0.0
    for task in client.get_task_stream(start=since):
        if "_run_batch" not in str(task.get("key")):
            continue
        for ss in task.get("startstops", ()):
            if ss.get("action") == "compute":
                total += ss["stop"] - ss["start"]
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int,
                        default=int(os.environ.get("CKPTRESCUE_BENCH_DASK_MIB", "512")))
    parser.add_argument("--small-files", type=int,
                        default=int(os.environ.get("CKPTRESCUE_BENCH_DASK_SMALL_FILES", "40000")))
    args = parser.parse_args()
    try:
        import distributed
    except ImportError:
        print("dask distributed is not installed (pip install 'ckptrescue[cluster]'): skipped")
        return
    import logging
    import warnings

    logging.getLogger("distributed").setLevel(logging.ERROR)
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", category=UserWarning, module="distributed")
    work = Path(tempfile.mkdtemp(prefix="ckptrescue-bench-dask-"))
    try:
        root, small, one = work / "tree", work / "small", work / "one"
        total = make_tree(root, args.size_mib)
        make_small_tree(small, args.small_files)
        make_small_tree(one, ONE)
        mib = total / MiB
        files = _files(root)
        entries = [_entry(root, p) for p in files]
        cores = os.cpu_count()
        with contextlib.ExitStack() as stack:
            # both clusters up at once, runs interleaved: load from elsewhere on the machine
            # hits the 1- and 2-worker figures alike
            clusters = {w: stack.enter_context(distributed.LocalCluster(
                n_workers=w, threads_per_worker=1, processes=True, host="127.0.0.1",
                dashboard_address=None)) for w in (1, 2)}
            clients = {w: stack.enter_context(distributed.Client(c, set_as_default=False))
                       for w, c in clusters.items()}
            for w, c in clusters.items():
                build_manifest(one, work / "warmup.sha256", scheduler=c.scheduler_address)
                clients[w].get_task_stream()  # installs the scheduler's task-stream plugin
            wall: dict[str, list[float]] = {}
            busy: dict[str, list[float]] = {}

            def run(label: str, fn: Callable[[], object], client: Any = None) -> None:
                t0 = time.time()
                wall.setdefault(label, []).append(_timed(fn))
                if client is not None:
                    busy.setdefault(label, []).append(_compute_seconds(client, t0))

            t_core = warm_and_hash_one_core(root)
            pool = stack.enter_context(multiprocessing.get_context("spawn").Pool(2))
            halves = [files[0::2], files[1::2]]
            pool.map(_hash_one_core, halves)  # started and warm
            for _ in range(RUNS):
                run("core", lambda: _hash_one_core(files))
                run("core2", lambda: pool.map(_hash_one_core, halves))
                run("local", lambda: build_manifest(root, work / "local.sha256", jobs=1))
                run("local-small", lambda: build_manifest(small, work / "ls.sha256", jobs=1))
                for w, c in clusters.items():
                    a = c.scheduler_address
                    run(f"big{w}", lambda a=a: build_manifest(root, work / "d.sha256",
                                                              scheduler=a), clients[w])
                    run(f"small{w}", lambda a=a: build_manifest(small, work / "s.sha256",
                                                                scheduler=a), clients[w])
                    run(f"one{w}", lambda a=a: build_manifest(one, work / "b.sha256",
                                                              scheduler=a))
                    saved = cluster.MAX_BATCH_FILES
                    cluster.MAX_BATCH_FILES = 1
                    try:
                        run(f"each{w}", lambda a=a: build_manifest(one, work / "e.sha256",
                                                                   scheduler=a))
                    finally:
                        cluster.MAX_BATCH_FILES = saved
        best = {k: min(v) for k, v in wall.items()}
        core_rate = mib / min(t_core, best["core"])
        print(f"manifest build --scheduler over {len(files)} files, {mib:.0f} MiB "
              f"(page cache warm; {cores} cores; best of {RUNS}, runs interleaved)")
        print(f"  hashlib, one core (anchor)        {core_rate:8.0f} MiB/s  1.00x")
        two = mib / best["core2"]
        print(f"  hashlib, 2 processes              {two:8.0f} MiB/s  {two / core_rate:4.2f}x  "
              "(what 2 cores give now, other load included)")
        local = mib / best["local"]
        print(f"  local --jobs 1, no Dask           {local:8.0f} MiB/s  {local / core_rate:4.2f}x")
        rates: dict[int, float] = {}
        for w in (1, 2):
            n_batches = len(cluster.plan_batches(entries, w))
            rates[w] = mib / best[f"big{w}"]
            on_worker = mib / min(busy[f"big{w}"])  # MiB per second of task compute time
            print(f"  {w} worker(s), {n_batches:3d} batches        {rates[w]:8.0f} MiB/s  "
                  f"{rates[w] / core_rate:4.2f}x  per worker {rates[w] / w:5.0f} MiB/s wall "
                  f"({rates[w] / w / core_rate:4.2f}x), {on_worker:5.0f} MiB/s in its tasks "
                  f"({on_worker / core_rate:4.2f}x)")
        print(f"  scaling 1 -> 2 workers            {rates[2] / rates[1]:8.2f}x  (2.00 is perfect; "
              f"bare hashlib 1 -> 2 processes: {two / core_rate:4.2f}x)")

        n = args.small_files
        local_fps = n / best["local-small"]
        print(f"\nmany small files: {n} files of 1 KiB, batches of up to "
              f"{cluster.MAX_BATCH_FILES} files")
        print(f"  local --jobs 1 (anchor)           {local_fps:8.0f} files/s  1.00x")
        for w in (1, 2):
            fps = n / best[f"small{w}"]
            on_worker = n / min(busy[f"small{w}"])
            print(f"  {w} worker(s)                       {fps:8.0f} files/s  "
                  f"{fps / local_fps:4.2f}x  per worker {fps / w:5.0f} files/s wall, "
                  f"{on_worker:5.0f} files/s in its tasks ({on_worker / local_fps:4.2f}x)")

        t_floor_ms = cluster.MIN_BATCH_BYTES / MiB / core_rate * 1000
        print(f"\nscheduling overhead: {ONE} files of 1 KiB as 1 batch, then as {ONE} batches")
        for w in (1, 2):
            per_batch_ms = (best[f"each{w}"] - best[f"one{w}"]) / (ONE - 1) * 1000
            print(f"  {w} worker(s)                       {per_batch_ms:8.2f} ms per batch "
                  f"({1000 / per_batch_ms:5.0f} batches/s) = {per_batch_ms / t_floor_ms:5.3f} "
                  f"of hashing one {cluster.MIN_BATCH_BYTES // MiB} MiB batch on one core "
                  f"({t_floor_ms:.0f} ms)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _entry(root: Path, path: Path) -> cluster.FileEntry:
    st = path.stat()
    return cluster.FileEntry(os.fsencode(path.relative_to(root)), st.st_size, st.st_mtime_ns)


if __name__ == "__main__":
    main()
