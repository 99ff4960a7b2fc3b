"""``probe --load``: the real loader, in the sandbox child, only when the verdict allows.

Runs ``sandbox_children/torch_load.py`` through ``effects.sandbox.run_child`` (memory/CPU/time
limits, own process group, audited). Unsafe pickles, unreadable files and pickles that did not
parse statically are never handed to torch. The exact outcome (exception class and message, or a
crash/kill/timeout of the child) is recorded in ``report.load`` and as an LD finding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptrescue.checkpoint import CheckpointReport, Verdict
from ckptrescue.formats.tensormap import finding

if TYPE_CHECKING:
    from ckptrescue.case import Case

LOADABLE = {Verdict.INTACT, Verdict.SUSPECT, Verdict.DAMAGED}
_BLOCKING = {"PK001", "PK002", "TZ009", "TL004", "DC002"}
LOADERS = {"torch-zip": "torch", "torch-legacy": "torch", "safetensors": "safetensors",
           "dcp": "dcp", "hf-sharded": "hf-sharded"}


def _budget(report: CheckpointReport) -> tuple[int, float]:
    """Memory (MiB) and time limits scaled to the checkpoint: torch.load needs ~1x its size
    resident plus torch itself; the address-space limit also covers torch's mappings."""
    import os

    size = 0
    for f in report.files or [report.path]:
        try:
            size += os.path.getsize(f)
        except OSError:
            continue
    mib = size // (1024 * 1024)
    return 4096 + 2 * mib, 300.0 + mib / 50.0


def load_in_sandbox(report: CheckpointReport, *, case: Case | None = None,
                    memory_mb: int | None = None, timeout_s: float | None = None) -> None:
    """Run the real loader on ``report.path`` in a child and record the outcome.

    Limits default to :func:`_budget` (so a big checkpoint is not reported as an OOM of the
    loader because of our own limit).
    """
    from ckptrescue.effects.sandbox import run_child

    auto_mem, auto_time = _budget(report)
    memory_mb = memory_mb if memory_mb is not None else auto_mem
    timeout_s = timeout_s if timeout_s is not None else auto_time

    blocked = sorted({f.code for f in report.findings} & _BLOCKING)
    loader = LOADERS.get(report.format)
    if report.verdict not in LOADABLE or blocked or loader is None:
        why = (f"verdict {report.verdict}" + (f", findings {', '.join(blocked)}" if blocked
                                               else "")
               if loader else f"no sandboxed loader for format {report.format}")
        report.load = {"status": "skipped", "reason": why}
        report.findings.append(finding("LD004", f"real load skipped: {why}",
                                       evidence=report.path))
        return
    outcome = run_child("torch_load", {"path": report.path, "loader": loader,
                                       "files": report.files},
                        case=case, memory_mb=memory_mb, timeout_s=timeout_s)
    report.load = {**outcome.to_json(), "memory_mb": memory_mb, "timeout_s": timeout_s}
    res = outcome.result
    if outcome.status == "ok":
        report.findings.append(finding("LD001", f"{loader} load succeeded "
                                       f"({res.get('tensors', '?')} tensors)",
                                       evidence=report.path, details=res))
    elif outcome.status == "error":
        report.findings.append(finding(
            "LD002", f"{loader} load raised {res.get('exception')}: "
            f"{str(res.get('message', ''))[:300]}", evidence=report.path, details=res))
    else:
        report.findings.append(finding(
            "LD003", f"{loader} loader child {outcome.status}"
            + (f" ({outcome.signal_name})" if outcome.signal_name else ""),
            evidence=report.path, details=outcome.to_json()))
