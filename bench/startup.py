"""Start-up time: `ckptrescue --help` and `--version`, and two short commands (a manifest of one
file, a probe of one small safetensors file: start-up is all they cost), against a bare Python
interpreter start (the anchor), measured in the same run; also checks that nothing heavy is
imported."""

from __future__ import annotations

import json
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXE = str(Path(sys.executable).with_name("ckptrescue"))


def timed(argv: list[str], runs: int = 7, fresh: Path | None = None) -> float:
    """Median wall time of ``argv``; ``fresh``: a folder emptied before each run (the
    command's output must not be there already)."""
    samples = []
    for _ in range(runs):
        for old in fresh.iterdir() if fresh is not None else ():
            old.unlink()
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    anchor = timed([sys.executable, "-c", "pass"])
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "data").mkdir()
        (work / "out").mkdir()
        (work / "data" / "a.bin").write_bytes(bytes(range(256)) * 4)
        header = json.dumps({"w": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}})
        small = work / "small.safetensors"
        small.write_bytes(struct.pack("<Q", len(header)) + header.encode()
                          + struct.pack("<16f", *range(16)))
        for label, argv in (
                ("ckptrescue --help", [EXE, "--help"]),
                ("ckptrescue --version", [EXE, "--version"]),
                ("manifest build (1 file)", [EXE, "manifest", "build", str(work / "data"),
                                             "-o", str(work / "out" / "m.sha256"), "--no-progress"]),
                ("probe (1 small file)", [EXE, "probe", str(small)])):
            t = timed(argv, fresh=work / "out")
            print(f"{label:<24} {t * 1000:7.1f} ms  = {t / anchor:5.1f}x python -c pass "
                  f"({anchor * 1000:.1f} ms)")
    code = ("import sys; import ckptrescue.cli.main; print(sorted(m for m in ('torch','tensorflow',"
            "'boto3','textual','pyarrow','dask','pydantic','yaml') if m in sys.modules))")
    heavy = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    print(f"heavy modules imported at CLI start: {heavy.strip()}")


if __name__ == "__main__":
    main()
