"""Benchmark (issue 18): shard profile throughput per core against a plain read of the same files.

Builds a JSON-lines dataset and a Parquet dataset of SIZE MiB each (default 32; 512 with
``CKPTRESCUE_BENCH_SIZE=large``; ``CKPTRESCUE_BENCH_PROFILE_MIB`` overrides both) from the
records of ``fixtures/profiles.py`` (SplitMix64 integers: the same bytes on every machine), then,
in the same run, with a warm page cache and on one core:

* anchor: a plain read of the same files — ``json.loads`` of every line (JSONL),
  ``pyarrow.parquet.read_table(use_threads=False)`` (Parquet);
* ``ckptrescue.datasets.profiles.build.profile_dataset(root, jobs=1)`` (profiles of sketch version
  ``profile.SKETCHES``: statistics computed by blocks of records).

Each side runs twice, interleaved; the run with the least CPU time counts.

Printed per format: wall seconds, MB/s of file bytes per CPU-second (process time: one core,
whatever pyarrow's pools do), and the ratio profile / read. Goal: >= 0.5x the read alone.

Usage: python bench/profiles.py [--mib N] [--shard-records N] [--cprofile]
``--cprofile`` also runs the profiler under cProfile and prints where the time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ckptrescue.datasets.profiles.build import profile_dataset, profile_shard  # noqa: E402
from fixtures.profiles import jsonl_line, shard_records, write_parquet  # noqa: E402

GOAL = 0.5
MB = 1_000_000
MiB = 1 << 20
SEED = 18


def build(root: Path, mib: int, shard_records_n: int) -> dict[str, list[Path]]:
    """``mib`` MiB of JSONL shards and the same records as Parquet shards."""
    jdir, pdir = root / "jsonl", root / "parquet"
    jdir.mkdir()
    pdir.mkdir()
    out: dict[str, list[Path]] = {"jsonl": [], "parquet": []}
    size, shard = 0, 0
    while size < mib * MiB:
        recs = shard_records(SEED, shard, shard_records_n)
        data = "".join(jsonl_line(r) for r in recs).encode()
        jpath = jdir / f"part-{shard:05d}.jsonl"
        jpath.write_bytes(data)
        out["jsonl"].append(jpath)
        size += len(data)
        out["parquet"].append(write_parquet(pdir / f"part-{shard:05d}.parquet", recs))
        shard += 1
    # the Parquet side gets more shards until it too holds about `mib` MiB (it compresses)
    psize = sum(p.stat().st_size for p in out["parquet"])
    while psize < mib * MiB:
        recs = shard_records(SEED, shard, shard_records_n)
        p = write_parquet(pdir / f"part-{shard:05d}.parquet", recs)
        out["parquet"].append(p)
        psize += p.stat().st_size
        shard += 1
    return out


def read_jsonl(paths: list[Path]) -> int:
    n = 0
    loads = json.loads
    for p in paths:
        with p.open("rb") as fh:
            for line in fh:
                loads(line)
                n += 1
    return n


def read_parquet(paths: list[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_table(p, use_threads=False).num_rows for p in paths)


def timed(fn):  # type: ignore[no-untyped-def]
    """(result, wall s, CPU s of this process) of ``fn()``."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def warm(paths: list[Path]) -> None:
    for p in paths:
        with p.open("rb") as fh:
            while fh.read(8 * MiB):
                pass


def bench(fmt: str, root: Path, paths: list[Path], cprofile: bool) -> float:
    size = sum(p.stat().st_size for p in paths)
    warm(paths)
    read = read_jsonl if fmt == "jsonl" else read_parquet
    # best of two (by CPU time) for both, interleaved, so a busy machine penalises neither
    runs, pruns = [], []
    for _ in range(2):
        runs.append(timed(lambda: read(paths)))
        pruns.append(timed(lambda: profile_dataset(root, jobs=1)))
    rows, r_wall, r_cpu = min(runs, key=lambda r: r[2])
    prof, p_wall, p_cpu = min(pruns, key=lambda r: r[2])
    assert prof.records == rows, (prof.records, rows)
    r_rate, p_rate = size / MB / r_cpu, size / MB / p_cpu
    ratio = p_rate / r_rate
    anchor = "json.loads per line" if fmt == "jsonl" else "pq.read_table"
    print(f"{fmt}: {len(paths)} shards, {rows} records, {size / MB:.1f} MB (page cache warm, "
          f"profile sketches v{prof.sketches})")
    print(f"  {anchor:22s} {r_wall:7.2f} s wall {r_cpu:7.2f} s CPU  {r_rate:8.1f} MB/s/core  "
          "(anchor 1.00x)")
    print(f"  {'profile_dataset jobs=1':22s} {p_wall:7.2f} s wall {p_cpu:7.2f} s CPU  "
          f"{p_rate:8.1f} MB/s/core  ratio {ratio:5.3f}x  (goal >= {GOAL}x: "
          f"{'met' if ratio >= GOAL else 'NOT met'})", flush=True)
    if cprofile:
        # profile_dataset works on a pool thread, out of cProfile's sight: the same per-shard
        # work (profile_shard) on this thread
        pr = cProfile.Profile()
        pr.enable()
        for p in paths:
            profile_shard(p)
        pr.disable()
        buf = io.StringIO()
        st = pstats.Stats(pr, stream=buf)
        st.sort_stats("tottime").print_stats(16)
        print(f"  cProfile of profile_shard over the {fmt} shards, by own time:")
        body = buf.getvalue().split("ncalls", 1)
        print("   ncalls" + body[1].rstrip() if len(body) == 2 else buf.getvalue())
    return ratio


def main() -> int:
    large = os.environ.get("CKPTRESCUE_BENCH_SIZE") == "large"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=int(os.environ.get(
        "CKPTRESCUE_BENCH_PROFILE_MIB", "512" if large else "32")))
    ap.add_argument("--shard-records", type=int, default=int(os.environ.get(
        "CKPTRESCUE_BENCH_PROFILE_SHARD_RECORDS", "40000")))
    ap.add_argument("--cprofile", action="store_true",
                    default=os.environ.get("CKPTRESCUE_BENCH_CPROFILE") == "1")
    args, _ = ap.parse_known_args()  # run_all.py passes its own arguments to every script
    with tempfile.TemporaryDirectory(prefix="ckptrescue-bench-profiles-") as tmp:
        t = time.perf_counter()
        paths = build(Path(tmp), args.mib, args.shard_records)
        print(f"built {args.mib} MiB of JSONL and Parquet shards ({args.shard_records} records "
              f"each) in {time.perf_counter() - t:.1f} s", flush=True)
        ratios = {fmt: bench(fmt, Path(tmp) / fmt, paths[fmt], args.cprofile)
                  for fmt in ("jsonl", "parquet")}
    print("summary: profile / read per core: "
          + ", ".join(f"{fmt} {r:.3f}x" for fmt, r in ratios.items())
          + f"  (goal >= {GOAL}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
