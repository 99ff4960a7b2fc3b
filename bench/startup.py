"""Start-up time: `ckptrescue --help` and `--version` against a bare Python interpreter start
(the anchor), measured in the same run; also checks that nothing heavy is imported."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

EXE = str(Path(sys.executable).with_name("ckptrescue"))


def timed(argv: list[str], runs: int = 7) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    anchor = timed([sys.executable, "-c", "pass"])
    for label, argv in (("ckptrescue --help", [EXE, "--help"]),
                        ("ckptrescue --version", [EXE, "--version"])):
        t = timed(argv)
        print(f"{label:<24} {t * 1000:7.1f} ms  = {t / anchor:5.1f}x python -c pass "
              f"({anchor * 1000:.1f} ms)")
    code = ("import sys; import ckptrescue.cli.main; print(sorted(m for m in ('torch','tensorflow',"
            "'boto3','textual','pyarrow','dask') if m in sys.modules))")
    heavy = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    print(f"heavy modules imported at CLI start: {heavy.strip()}")


if __name__ == "__main__":
    main()
