"""A small damaged training run for the TUI tests, built from real torch saves.

``build_run(dir)`` writes ``step-100.pt`` (intact), ``step-200.pt`` (one bit flipped inside the
first tensor's storage record, so its zip CRC-32 no longer matches) and ``step-300.pt``
(truncated to 60 % of its size: a torn write) with the helpers of ``fixtures/checkpoints.py``.
Seeds are fixed, so the bytes are the same on every run.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fixtures import checkpoints as fx  # noqa: E402


def build_run(run: Path) -> dict[str, str]:
    """Write the run; returns checkpoint name -> the verdict the damage must produce."""
    run.mkdir(parents=True, exist_ok=True)
    for step, seed in ((100, 1), (200, 2), (300, 3)):
        fx.save_zip(run / f"step-{step}.pt", fx.training_state(seed))
    flipped = run / "step-200.pt"
    offset, size = fx.zip_data_offset(flipped, fx.zip_member(flipped, "data/0"))
    fx.flip_bit(flipped, offset + size // 2, 3)
    torn = run / "step-300.pt"
    fx.truncate(torn, int(torn.stat().st_size * 0.6))
    return {"step-100.pt": "intact", "step-200.pt": "damaged", "step-300.pt": "truncated"}


if __name__ == "__main__":
    print(build_run(Path(sys.argv[1])))
