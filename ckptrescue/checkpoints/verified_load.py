"""``load_verified``: ``torch.load`` for a training job, after the kit verified the file.

The checkpoint is probed statically first (structure, CRC-32 of every record, pickle globals
against the exact lists); only an ``intact`` verdict (or ``suspect`` with
``allow_suspect=True``) goes on to the real loader, in the caller's process, with
``weights_only=True`` unless the caller says otherwise. The file's identity (device, inode,
size, mtime) is compared before and after, so a file swapped or rewritten between the check
and the load is refused rather than trusted. Safetensors files load with ``safetensors``.

    from ckptrescue.checkpoints.verified_load import load_verified
    state = load_verified("ckpt/step_1200.pt")  # raises CheckpointRejected when damaged
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ckptrescue.errors import CkptRescueError, ExitCode


class CheckpointRejected(CkptRescueError):
    """The verification did not pass; ``report`` is the probe's report."""

    exit_code = ExitCode.FINDINGS

    def __init__(self, message: str, report: Any = None) -> None:
        super().__init__(message)
        self.report = report


def _identity(path: Path) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def load_verified(path: str | os.PathLike[str], *, allow_suspect: bool = False,
                  weights_only: bool = True, map_location: Any = "cpu", **kwargs: Any) -> Any:
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths

    path = Path(path)
    if not path.is_file():
        raise CheckpointRejected(f"{path}: not a checkpoint file (load_verified takes one file)")
    before = _identity(path)
    reports = probe_paths([path], numeric=True)
    if len(reports) != 1:
        raise CheckpointRejected(f"{path}: expected one checkpoint, found {len(reports)}")
    report = reports[0]
    allowed = {"intact", "suspect"} if allow_suspect else {"intact"}
    if str(report.verdict) not in allowed:
        worst = next((f.title for f in report.findings
                      if str(f.severity) in ("critical", "error")), "")
        raise CheckpointRejected(f"{path}: {report.verdict}" + (f": {worst}" if worst else ""),
                                 report)
    if report.format == "safetensors":
        from safetensors.torch import load_file

        loaded = load_file(str(path), device=str(map_location))
    else:
        import torch

        loaded = torch.load(path, weights_only=weights_only, map_location=map_location,
                            **kwargs)
    if _identity(path) != before:
        raise CheckpointRejected(f"{path}: changed while it was being verified and loaded; "
                                 "refusing what was read", report)
    return loaded
