"""Benchmark: verifying a TensorFlow checkpoint vs reading it with TensorFlow's own reader.

    python bench/tensorflow.py [MIB]        # default 256; the issue's figure: 1024
    CKPTRESCUE_BENCH_TF_MIB=1024 python bench/tensorflow.py
    CKPTRESCUE_BENCH_SIZE=large python bench/run_all.py   # 1024 MiB, as ``make bench`` large

Builds one TensorBundle checkpoint of ~MIB MiB (float32 variables of 16 MiB, written by
tensorflow-cpu in a subprocess), warms the page cache, then runs, each in its own process:

* anchor: ``tf.train.load_checkpoint`` + ``get_tensor`` of every variable (TF checks each
  tensor's CRC32C and holds the tensor); timed inside the process, TF import excluded;
* ckptrescue CRC pass: every tensor's CRC32C streamed (``ProbeOptions(numeric=False)``);
* ckptrescue full probe: CRC pass + the numeric scan of every tensor (default ``probe``).

Each figure is printed as a ratio against the anchor measured in the same run, with the peak RSS
of every process. Goals (issue 4): CRC verification >= 5x faster than TF's reader; verifier peak
RSS < 300 MiB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_TF_READ = r"""
import json, resource, sys, time, os
t0 = time.perf_counter()
import tensorflow as tf
t1 = time.perf_counter()
reader = tf.train.load_checkpoint(sys.argv[1])
n = 0
for name in reader.get_variable_to_shape_map():
    n += reader.get_tensor(name).nbytes if name != "_CHECKPOINTABLE_OBJECT_GRAPH" else 0
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "read_s": t2 - t1, "bytes": n,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_VERIFY = r"""
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
from ckptrescue.checkpoints.base import ProbeOptions
from ckptrescue.checkpoints.formats.tensorbundle import probe_bundle
t1 = time.perf_counter()
report = probe_bundle(Path(sys.argv[1]), ProbeOptions(numeric=sys.argv[2] == "1"))
t2 = time.perf_counter()
assert str(report.verdict) == "intact", report.to_json()
print(json.dumps({"import_s": t1 - t0, "read_s": t2 - t1, "tensors": report.tensors_total,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _run(argv: list[str]) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": str(REPO)}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False,
                          timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _warm(prefix: Path) -> None:
    for p in prefix.parent.iterdir():
        with p.open("rb") as fh:
            while fh.read(1 << 24):
                pass


def main() -> None:
    default = "1024" if os.environ.get("CKPTRESCUE_BENCH_SIZE") == "large" else "256"
    args = [a for a in sys.argv[1:] if a.isdigit()]
    mib = int(args[0]) if args else int(os.environ.get("CKPTRESCUE_BENCH_TF_MIB", default))
    with tempfile.TemporaryDirectory(prefix="ckptrescue-bench-tf-") as tmp:
        built = _run([sys.executable, str(REPO / "fixtures" / "tensorflow.py"), "--bench", tmp,
                      str(mib)])
        prefix = Path(built["prefix"])
        size = sum(p.stat().st_size for p in prefix.parent.iterdir())
        _warm(prefix)
        tf = _run([sys.executable, "-c", _TF_READ, str(prefix)])
        crc = _run([sys.executable, "-c", _VERIFY, str(prefix), "0"])
        full = _run([sys.executable, "-c", _VERIFY, str(prefix), "1"])
    anchor = tf["read_s"]
    print(f"checkpoint: {size / 2**20:.0f} MiB, {built['variables']} float32 variables")
    print(f"anchor  TF reader (load_checkpoint + get_tensor, all vars): {anchor:.3f} s "
          f"(+{tf['import_s']:.1f} s import), peak RSS {tf['rss_mib']:.0f} MiB")
    for label, r in (("ckptrescue CRC32C pass", crc), ("ckptrescue probe (CRC + numerics)", full)):
        ratio = anchor / r["read_s"] if r["read_s"] else float("inf")
        print(f"{label}: {r['read_s']:.3f} s -> {ratio:.2f}x the TF reader's speed "
              f"(incl. imports: {(anchor + tf['import_s']) / (r['read_s'] + r['import_s']):.2f}x);"
              f" peak RSS {r['rss_mib']:.0f} MiB ({r['rss_mib'] / tf['rss_mib']:.2f}x TF's)")
    goal_speed = anchor / crc["read_s"] >= 5
    goal_rss = max(crc["rss_mib"], full["rss_mib"]) < 300
    print(f"goals: CRC pass >= 5x TF reader: {'met' if goal_speed else 'NOT met'}; "
          f"verifier peak RSS < 300 MiB: {'met' if goal_rss else 'NOT met'}")
    print(f"throughput: TF {size / 2**20 / anchor:.0f} MiB/s, CRC pass "
          f"{size / 2**20 / crc['read_s']:.0f} MiB/s, full probe "
          f"{size / 2**20 / full['read_s']:.0f} MiB/s")


if __name__ == "__main__":
    main()
