"""Benchmark: checkpoint probe vs torch.load, CRC pass vs zlib.crc32, probe peak RSS.

Usage: ``python bench/checkpoints.py [SIZE_MIB]`` (or ``CKPT_BENCH_MIB``; default 1024).

Builds a torch.save zip of float32 tensors totalling SIZE_MIB in a temp dir, then, in the same
run and with a warm page cache:

* probe (CRC + tensor map + numeric scan) wall time in a child process vs a full
  ``torch.load(weights_only=True, map_location="cpu")`` in a child, both as whole processes
  (goal: ratio <= 0.25);
  ``torch.load(mmap=True)`` for context only (it reads almost nothing);
* peak RSS of the probe child above its import baseline (goal: < 300 MiB whatever the size),
  next to torch.load's;
* the CRC pass alone (``zipwalk.crc_range`` over every record) vs ``zlib.crc32`` over an
  in-memory buffer (zlib's table CRC-32 on this machine; goal: >= 1.0 - the pass uses ISA-L's
  folded CRC, ``formats/crc32.py``, which also reads the file).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHILD_PROBE = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from ckptrescue.checkpoints.probes.checkpoints import probe_paths
import ckptrescue.checkpoints.formats.torch_zip, numpy  # import baseline
import ckptrescue.checkpoints.formats.numeric
from ckptrescue.checkpoints.probes.checkpoints import formats
formats()
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
base = hwm()
t = time.perf_counter()
r = probe_paths([Path(sys.argv[1])])[0]
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "verdict": str(r.verdict), "tensors": r.tensors_total,
                  "base_kib": base,
                  "peak_kib": hwm()}))
"""
CHILD_LOAD = r"""
import json, resource, sys, time
import torch
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
base = hwm()
t = time.perf_counter()
obj = torch.load(sys.argv[1], weights_only=True, map_location="cpu", mmap=sys.argv[2] == "1")
if sys.argv[2] == "1":
    n = len(obj)
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "base_kib": base,
                  "peak_kib": hwm()}))
"""


def child(code: str, *args: str) -> dict:
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True,
                         text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - t
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "process_s": wall}


def cli_probe(path: Path) -> float:
    """Wall time of ``ckptrescue probe --json PATH`` as a user runs it (the whole process)."""
    exe = Path(sys.executable).with_name("ckptrescue")
    t = time.perf_counter()
    subprocess.run([str(exe), "probe", "--json", str(path)], capture_output=True, check=False,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    return time.perf_counter() - t


def build(path: Path, mib: int) -> None:
    import torch

    sys.path.insert(0, str(REPO))
    from fixtures.checkpoints import exact_floats

    per = 4 * 1024 * 1024  # 16 MiB float32 tensors (values from the integer generator)
    n = max(1, mib * 1024 * 1024 // (per * 4))
    block = torch.as_tensor(exact_floats(0, 0, (1 << 20) - 1, bits=10, scale_log2=-16)
                            ).repeat(per // ((1 << 20) - 1) + 1)[:per]
    state = {f"layers.{i}.weight": block.roll(i) for i in range(n)}
    state["tail.bias"] = torch.zeros(1000)
    torch.save({"model": state, "step": 1}, path)


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("CKPT_BENCH_MIB", 1024))
    sys.path.insert(0, str(REPO))
    from ckptrescue.checkpoints.formats import zipwalk

    with tempfile.TemporaryDirectory(prefix="ckpt-bench-") as tmp:
        path = Path(tmp) / "bench.pt"
        build(path, mib)
        size = path.stat().st_size
        with open(path, "rb") as fh:  # warm the page cache for every contender
            while fh.read(1 << 24):
                pass
        load = min((child(CHILD_LOAD, str(path), "0") for _ in range(2)),
                   key=lambda r: r["seconds"])
        mm = child(CHILD_LOAD, str(path), "1")
        load_process = min(child(CHILD_LOAD, str(path), "0")["process_s"] for _ in range(2))
        cli = min(cli_probe(path) for _ in range(2))
        probe = min((child(CHILD_PROBE, str(path), str(REPO)) for _ in range(2)),
                    key=lambda r: r["seconds"])
        # CRC pass alone over every record, vs zlib.crc32 over an in-memory buffer
        with open(path, "rb") as fh:
            layout = zipwalk.read_central(fh)
            assert layout is not None
            t = time.perf_counter()
            nbytes = 0
            for rec in layout.records:
                if rec.data_offset is not None and rec.compressed_size:
                    crc, got = zipwalk.crc_range(fh, rec.data_offset, rec.compressed_size)
                    assert crc == rec.crc
                    nbytes += got
            crc_pass = nbytes / (time.perf_counter() - t)
        buf = os.urandom(64 * 1024 * 1024)
        t = time.perf_counter()
        reps = max(1, nbytes // len(buf))
        for _ in range(reps):
            zlib.crc32(buf)
        machine = reps * len(buf) / (time.perf_counter() - t)

    mb = 1024 * 1024
    print(f"checkpoint: {size / mb:.0f} MiB, {probe['tensors']} tensors, verdict "
          f"{probe['verdict']}")
    print(f"probe wall time            {probe['seconds']:8.3f} s")
    print(f"torch.load(weights_only)   {load['seconds']:8.3f} s   (anchor)")
    print(f"torch.load(mmap=True)      {mm['seconds']:8.3f} s   (context only: reads ~nothing)")
    print(f"  ratio probe / torch.load (in-process)    {probe['seconds'] / load['seconds']:6.2f}x")
    print(f"ckptrescue probe --json, whole process  {cli:8.3f} s")
    print(f"python -c torch.load, whole process     {load_process:8.3f} s   (anchor)")
    print(f"  ratio probe / torch.load (whole processes) {cli / load_process:6.2f}x"
          "   (goal <= 0.25)")
    probe_rss = (probe["peak_kib"] - probe["base_kib"]) / 1024
    load_rss = (load["peak_kib"] - load["base_kib"]) / 1024
    print(f"probe peak RSS above imports  {probe_rss:8.1f} MiB   (goal < 300)")
    print(f"torch.load peak RSS above imports {load_rss:8.1f} MiB")
    print(f"  ratio probe RSS / checkpoint size {probe_rss * mb / size:6.3f}")
    print(f"CRC pass    {crc_pass / mb:8.0f} MiB/s")
    print(f"zlib.crc32  {machine / mb:8.0f} MiB/s   (anchor: in-memory)")
    print(f"  ratio CRC pass / zlib.crc32       {crc_pass / machine:6.2f}   (goal >= 1.0)")


if __name__ == "__main__":
    main()
