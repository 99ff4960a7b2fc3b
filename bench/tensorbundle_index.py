"""Benchmark: probing a TensorBundle whose ``.index`` holds 100,000 entries vs TensorFlow's reader.

    python bench/tensorbundle_index.py [ENTRIES]     # default 100000 (issue 14)
    CKPTRESCUE_BENCH_TB_ENTRIES=20000 python bench/tensorbundle_index.py

Writes one checkpoint with ``tf.raw_ops.SaveV2`` (ENTRIES small float32 variables of 1-7
integer-valued elements, in a subprocess), warms the page cache, then runs, each in its own
process on the same files:

* anchor: ``tf.train.load_checkpoint`` + ``get_tensor`` of every variable (TF checks each
  tensor's CRC32C); timed inside the process, TF import excluded;
* ckptrescue probe: ``probe_paths([PREFIX])`` (what ``ckptrescue probe PREFIX`` runs: the
  ``.index`` parsed, every entry's CRC32C and the numeric scan), imports excluded.

Printed as a ratio against the anchor measured in the same run (goal: faster than TF's reader;
the issue's figures before the fix: 8k entries 4.3 s, 32k 18 s, 100k over 60 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_BUILD = r"""
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
n, prefix = int(sys.argv[1]), sys.argv[2]
names = [f"var_{i:06d}/.ATTRIBUTES/VARIABLE_VALUE" for i in range(n)]
tensors = [tf.constant(((np.arange(i % 7 + 1) + i * 3) % 17).astype(np.float32) / 4)
           for i in range(n)]
tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * n,
                  tensors=tensors)
print(json.dumps({"prefix": prefix, "entries": n}))
"""

_TF_READ = r"""
import json, os, resource, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
t0 = time.perf_counter()
import tensorflow as tf
t1 = time.perf_counter()
reader = tf.train.load_checkpoint(sys.argv[1])
n = 0
for name in reader.get_variable_to_shape_map():
    n += reader.get_tensor(name).nbytes
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "read_s": t2 - t1, "bytes": n,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_PROBE = r"""
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
from ckptrescue.checkpoints.probes.checkpoints import probe_paths
import numpy  # noqa: F401 - imported by the numeric scan; excluded like TF's import
t1 = time.perf_counter()
[report] = probe_paths([Path(sys.argv[1])])
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


def main() -> None:
    args = [a for a in sys.argv[1:] if a.isdigit()]
    n = int(args[0]) if args else int(os.environ.get("CKPTRESCUE_BENCH_TB_ENTRIES", "100000"))
    with tempfile.TemporaryDirectory(prefix="ckptrescue-bench-tb-") as tmp:
        prefix = str(Path(tmp) / "ckpt")
        _run([sys.executable, "-c", _BUILD, str(n), prefix])
        for p in Path(tmp).iterdir():
            p.read_bytes()  # warm the page cache
        index_mib = Path(prefix + ".index").stat().st_size / 2**20
        tf = _run([sys.executable, "-c", _TF_READ, prefix])
        mine = _run([sys.executable, "-c", _PROBE, prefix])
    anchor = tf["read_s"]
    ratio = anchor / mine["read_s"] if mine["read_s"] else float("inf")
    print(f"checkpoint: {n} entries, .index {index_mib:.1f} MiB")
    print(f"anchor  TF reader (load_checkpoint + get_tensor, all vars): {anchor:.2f} s "
          f"(+{tf['import_s']:.1f} s import), peak RSS {tf['rss_mib']:.0f} MiB")
    print(f"ckptrescue probe PREFIX (index + CRC32C + numerics): {mine['read_s']:.2f} s -> "
          f"{ratio:.2f}x the TF reader's speed; peak RSS {mine['rss_mib']:.0f} MiB")
    print(f"goal: faster than TF's reader: {'met' if ratio > 1 else 'NOT met'}")


if __name__ == "__main__":
    main()
