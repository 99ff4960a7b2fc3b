"""Benchmark: a multi-rank family step at scale (issue 15).

Usage: ``python bench/families.py [RANKS]`` (or ``CKPTRESCUE_BENCH_RANKS``; default 4096; the
scaling reference is a quarter of it, 1024 by default).

Builds synthetic DeepSpeed ZeRO-2 steps (``fixtures/families/deepspeed_synth.py``: ``torch.save``
in DeepSpeed's dict shape, tiny integer-valued tensors, one model-states file + one optimizer
file per dp rank) in a temp dir and measures, each in a fresh child process with a warm page
cache:

* ``probe`` of the step and ``rank`` of its run directory at ``jobs=1`` and ``jobs=2``: wall
  time, peak RSS of the child (``VmHWM``) and of its largest pool worker (``RUSAGE_CHILDREN``);
* scaling: time per rank file at N ranks vs at N/4 ranks (goal: near-linear, ratio ~1.0);
* goal: peak RSS < 200 MiB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOAL_RSS_MIB = 200
CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
what, path, jobs = sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
from ckptrescue.checkpoints.probes.checkpoints import formats, probe_paths
from ckptrescue.checkpoints.rank import rank
formats()
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
base = hwm()
t = time.perf_counter()
if what == "probe":
    r = probe_paths([path], jobs=jobs)[0]
    out = {"verdict": str(r.verdict), "members": r.extra["family"]["members"],
           "bad": len(r.extra["family"]["bad_ranks"])}
else:
    res = rank(path, jobs=jobs)
    out = {"resume_from": res.resume_from, "candidates": len(res.checkpoints)}
dt = time.perf_counter() - t
out.update(seconds=dt, base_kib=base, peak_kib=hwm(),
           worker_kib=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps(out))
"""


def build(base: Path, ranks: int) -> Path:
    """A run directory with one synthetic step of ``ranks`` dp ranks (built in a child)."""
    run = base / f"run{ranks}"
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fixtures.families.deepspeed_synth", str(run),
                    str(ranks), "1"], cwd=REPO, check=True, capture_output=True)
    size = sum(f.stat().st_size for f in (run / "global_step1").iterdir())
    print(f"built {ranks} ranks ({ranks + 1} files, {size / 2**20:.1f} MiB) in "
          f"{time.perf_counter() - t:.1f} s", flush=True)
    return run


def measure(what: str, path: Path, jobs: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(REPO), what, str(path), str(jobs)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{what} jobs={jobs} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ranks = int(sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "CKPTRESCUE_BENCH_RANKS", "4096"))
    small = max(1, ranks // 4)
    results: dict[tuple[int, str, int], dict] = {}
    with tempfile.TemporaryDirectory(prefix="ckptrescue-bench-families-") as tmp:
        runs = {n: build(Path(tmp), n) for n in (small, ranks)}
        for n, run in runs.items():
            for what in ("probe", "rank"):
                for jobs in (1, 2):
                    target = run / "global_step1" if what == "probe" else run
                    measure(what, target, jobs) if (n, what, jobs) == (small, "probe", 1) \
                        else None  # warm the page cache and the import caches once
                    r = measure(what, target, jobs)
                    results[(n, what, jobs)] = r
                    print(f"{what:5s} {n:5d} ranks jobs={jobs}: {r['seconds']:7.2f} s "
                          f"({r['seconds'] / (n + 1) * 1000:.2f} ms/file), peak RSS "
                          f"{r['peak_kib'] / 1024:6.1f} MiB (import baseline "
                          f"{r['base_kib'] / 1024:.1f}), largest worker "
                          f"{r['worker_kib'] / 1024:6.1f} MiB", flush=True)
    ok = True
    print()
    for what in ("probe", "rank"):
        for jobs in (1, 2):
            a, b = results[(small, what, jobs)], results[(ranks, what, jobs)]
            scale = (b["seconds"] / (ranks + 1)) / (a["seconds"] / (small + 1))
            print(f"{what} jobs={jobs}: time per rank file at {ranks} vs {small} ranks: "
                  f"{scale:.2f}x (goal ~1.0: near-linear)")
        speed = results[(ranks, what, 1)]["seconds"] / results[(ranks, what, 2)]["seconds"]
        print(f"{what}: jobs=2 vs jobs=1 at {ranks} ranks: {speed:.2f}x faster "
              f"(2 cores, shared with other work)")
    peak = max(max(r["peak_kib"], r["worker_kib"]) for r in results.values()) / 1024
    print(f"peak RSS over every run (child or its largest worker): {peak:.1f} MiB "
          f"(goal < {GOAL_RSS_MIB} MiB): {'met' if peak < GOAL_RSS_MIB else 'NOT met'}")
    ok = ok and peak < GOAL_RSS_MIB
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
