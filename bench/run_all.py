"""`make bench`: run every benchmark script in this folder, in the same run, one after another.

Each script prints its figures as ratios against an anchor it measures itself (torch.load,
sha256sum, zlib.crc32, a sequential head-object loop, TensorFlow's reader, ...). Sizes default to
small values; set CKPTRESCUE_BENCH_SIZE=large for the sizes the issues name (~1-2 GiB).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["speed_table", "startup", "checkpoints", "families", "tensorflow", "tensorbundle_index", "records",
         "storage", "s3", "datasets", "tui"]
# CKPTRESCUE_BENCH_SIZE=large: the sizes the issues name, passed on in each script's own knob
LARGE = {"CKPT_BENCH_MIB": "1024", "CKPTRESCUE_BENCH_TF_MIB": "1024",
         "CKPTRESCUE_BENCH_DATASET_MIB": "2048", "CKPTRESCUE_BENCH_AUDIT_FILES": "100000",
         "S3_BENCH_N": "5000", "CKPTRESCUE_BENCH_SCALE_FILES": "1000000",
         "CKPTRESCUE_BENCH_DASK_MIB": "2048", "CKPTRESCUE_BENCH_BUILD_FILES": "1000000"}


def main() -> int:
    scripts = [HERE / f"{name}.py" for name in ORDER if (HERE / f"{name}.py").exists()]
    scripts += sorted(p for p in HERE.glob("*.py")
                      if p.stem not in ORDER and p.name != "run_all.py")
    import os

    env = dict(os.environ)
    if env.get("CKPTRESCUE_BENCH_SIZE") == "large":
        for key, value in LARGE.items():
            env.setdefault(key, value)
    else:
        env.setdefault("S3_BENCH_N", "1000")  # the default run stays short; large uses 5000
    failed = []
    for script in scripts:
        print(f"\n=== {script.stem} ===", flush=True)
        start = time.perf_counter()
        res = subprocess.run([sys.executable, str(script), *sys.argv[1:]], check=False, env=env)
        print(f"--- {script.stem}: {time.perf_counter() - start:.1f} s (exit {res.returncode})",
              flush=True)
        if res.returncode != 0:
            failed.append(script.stem)
    if failed:
        print(f"\nbenchmarks that failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
