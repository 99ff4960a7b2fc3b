"""Benchmark: the case record at scale (issue 26), each figure a whole process.

    python bench/records.py [--records 100000] [--damaged 20000] [--truncated 100000]

1. records per second appended into a case by one writer (group commit, a commit every 1,000
   records as a step would), then ``ckptrescue case verify`` of that case (must exit 0);
2. ``ckptrescue probe PREFIX --case C`` of a TensorBundle whose N variables (default 20,000) all
   fail their CRC32C (goal: <= 10 s, < 200 MiB peak RSS; 29 s before the fix);
3. the same for a 100,000-entry bundle whose data file is cut in half (goal: <= 20 s; 78 s and
   644 MiB before the fix); each probe's case must verify, its answer must name the damage.

The bundles are written without TensorFlow (``tests/tensorflow/bundlewriter.py``, the writer
the hostile-input tests check against TensorFlow's reader); the damage is byte flips and a
truncation, never CPU math.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXE = str(Path(sys.executable).with_name("ckptrescue"))

_APPEND = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from ckptrescue.record.case import Case
case = Case.open(Path(sys.argv[1]))
n = int(sys.argv[2])
t0 = time.perf_counter()
with case.writer():
    for i in range(n):
        case.log("tool.run", {"argv": ["xfs_db", "-r", f"/dev/loop{i % 8}"], "returncode": 0,
                              "stdout_sha256": f"{i:064x}", "i": i})
        if i % 1000 == 999:
            case.commit()
t1 = time.perf_counter()
print(json.dumps({"append_s": t1 - t0,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_RSS = r"""
import json, os, resource, subprocess, sys, time
t0 = time.perf_counter()
res = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
print(json.dumps({"wall_s": time.perf_counter() - t0, "exit": res.returncode,
                  "stderr": res.stderr[-400:],
                  "rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                     else "")
    return env


def _measured(*argv: str) -> dict[str, float | int | str]:
    """Run argv as a whole process; its wall time, exit code and peak RSS."""
    out = subprocess.run([sys.executable, "-c", _RSS, *argv], capture_output=True, text=True,
                         env=_env(), check=True).stdout
    return dict(json.loads(out))


def _verify(case: Path) -> tuple[float, bool]:
    t0 = time.perf_counter()
    res = subprocess.run([EXE, "case", "verify", str(case)], capture_output=True, text=True,
                         env=_env(), check=False)
    return time.perf_counter() - t0, res.returncode == 0


def _new_case(path: Path) -> None:
    subprocess.run([EXE, "case", "new", str(path)], check=True, capture_output=True, env=_env())


def bench_append(tmp: Path, n: int) -> bool:
    case = tmp / "append-case"
    _new_case(case)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _APPEND, str(case), str(n), str(REPO)],
                         capture_output=True, text=True, env=_env(), check=True).stdout
    whole = time.perf_counter() - t0
    data = json.loads(out)
    verify_s, ok = _verify(case)
    print(f"append {n} records: {n / data['append_s']:,.0f} records/s "
          f"(whole process {whole:.1f} s, peak {data['rss_mib']:.0f} MiB); "
          f"case verify {verify_s:.1f} s: {'green' if ok else 'BROKEN'}")
    return ok


def _bundle(prefix: Path, n: int) -> None:
    sys.path.insert(0, str(REPO / "tests" / "tensorflow"))
    from bundlewriter import write_bundle  # the TF-free writer the tests check against TF

    write_bundle(prefix, n)


def bench_probe(tmp: Path, label: str, n: int, damage: str, goal_s: float,
                goal_mib: float | None) -> bool:
    prefix = tmp / label / "ckpt"
    prefix.parent.mkdir(parents=True)
    _bundle(prefix, n)
    data = prefix.with_name(prefix.name + ".data-00000-of-00001")
    if damage == "flip":
        raw = bytearray(data.read_bytes())
        for i in range(0, len(raw), 4):
            raw[i] ^= 0x01  # one bit in every float: every variable fails its CRC32C
        data.write_bytes(bytes(raw))
    else:
        os.truncate(data, data.stat().st_size // 2)
    case = tmp / f"{label}-case"
    _new_case(case)
    got = _measured(EXE, "probe", str(prefix), "--case", str(case))
    verify_s, ok = _verify(case)
    answer = subprocess.run([sys.executable, "-m", "ckptrescue.engine.answer", str(case)],
                            capture_output=True, text=True, env=_env(), check=False).stdout
    rss_goal = f" (goal < {goal_mib:.0f} MiB)" if goal_mib else ""
    print(f"probe {label} ({n} variables) into a case: {got['wall_s']:.1f} s (goal <= "
          f"{goal_s:.0f} s), peak {got['rss_mib']:.0f} MiB{rss_goal}, exit {got['exit']}; "
          f"case verify {verify_s:.1f} s: {'green' if ok else 'BROKEN'}; "
          f"answer: {answer.strip()[:100]}")
    if got["exit"] not in (0, 1):
        print(f"  probe failed: {got['stderr']}", file=sys.stderr)
    return ok and got["exit"] in (0, 1) and "tensors" in answer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int,
                        default=int(os.environ.get("CKPTRESCUE_BENCH_RECORDS", "100000")))
    parser.add_argument("--damaged", type=int,
                        default=int(os.environ.get("CKPTRESCUE_BENCH_DAMAGED", "20000")))
    parser.add_argument("--truncated", type=int,
                        default=int(os.environ.get("CKPTRESCUE_BENCH_TRUNCATED", "100000")))
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="ckr-bench-records-") as tmp:
        ok &= bench_append(Path(tmp), args.records)
        ok &= bench_probe(Path(tmp), "damaged", args.damaged, "flip", 10, 200)
        ok &= bench_probe(Path(tmp), "truncated", args.truncated, "truncate", 20, None)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
