"""``probe --load``: the real loader, in the sandbox child, only when the verdict allows.

Runs ``sandbox_children/torch_load.py`` through ``effects.sandbox.run_child`` (bubblewrap
namespaces with a read-only view of only the checkpoint's files, seccomp, audit hook,
memory/CPU/time limits, audited). Unsafe pickles, unreadable files, pickles that did not parse
statically and DCP metadata naming a global off the exact list are never handed to a loader.
The exact outcome is recorded in ``report.load`` and as an LD finding (:func:`record_outcome`):

* ``ok``: LD001, and the loaded tensors are compared with the static map (dtype, shape and the
  bytes salvage would write: ``load_compare.py``); a difference is LD008, verdict ``suspect``;
* the loader raised, crashed, was killed or timed out: LD002/LD003, and when the static checks
  had found the file loadable (``intact``/``suspect``) the disagreement is LD007 and the verdict
  becomes ``unreadable`` (a file the real loader refuses is never intact);
* ``blocked`` (the file made the loader try to run a program, open the network, write outside
  scratch, or resolve a forbidden global; or the seccomp filter killed it): LD005 (critical)
  naming what it tried, verdict ``unsafe``;
* ``sandbox-unavailable``: LD006, the load was not run (never an unconfined fallback).

A multi-rank family step is loaded rank file by rank file in one child
(``probes/family_load.py``): a rank the real loader refuses is named.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ckptrescue.checkpoints.base import CheckpointReport, Verdict, worst_verdict
from ckptrescue.checkpoints.formats.tensormap import finding
from ckptrescue.checkpoints.probes.load_compare import compare

if TYPE_CHECKING:
    from ckptrescue.effects.sandbox import ChildOutcome
    from ckptrescue.record.case import Case

LOADABLE = {Verdict.INTACT, Verdict.SUSPECT, Verdict.DAMAGED}
_BLOCKING = {"PK001", "PK002", "PK004", "TZ009", "TL004", "DC002"}
_LOADABLE_STATIC = {Verdict.INTACT, Verdict.SUSPECT}
LOADERS = {"torch-zip": "torch", "torch-legacy": "torch", "safetensors": "safetensors",
           "dcp": "dcp", "hf-sharded": "hf-sharded"}


def _budget(report: CheckpointReport) -> tuple[int, float]:
    """Memory (MiB) and time limits scaled to the checkpoint: torch.load needs ~1x its size
    resident plus torch itself; the address-space limit also covers torch's mappings."""
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

    family = family_of(report)
    if family is not None:
        from ckptrescue.checkpoints.probes.family_load import load_family_step

        load_family_step(report, family, case=case, memory_mb=memory_mb, timeout_s=timeout_s)
        return
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
    home = os.path.dirname(os.path.realpath(report.path)) if os.path.isfile(report.path) \
        else os.path.realpath(report.path)
    strays = [f for f in report.files if not _within(f, home)]
    if strays:  # the sandbox shows the loader the checkpoint, never a file beside the point
        why = "files outside the checkpoint's directory: " + ", ".join(strays[:3])
        report.load = {"status": "skipped", "reason": why}
        report.findings.append(finding("LD004", f"real load skipped: {why}",
                                       evidence=report.path))
        return
    outcome = run_child("torch_load", {"path": report.path, "loader": loader,
                                       "files": report.files, **hook_globals(report)},
                        case=case, memory_mb=memory_mb, timeout_s=timeout_s,
                        inputs=[report.path, *report.files])
    record_outcome(report, outcome, loader, memory_mb=memory_mb, timeout_s=timeout_s)


def hook_globals(report: CheckpointReport) -> dict[str, list[str]]:
    """The request's ``hook_globals`` (``sandbox_children/boundary.admitting``): ``getattr``,
    by either of its names, where the static scan of a DCP ``.metadata`` proved its every use an
    enum member looked up by name (``report.extra["member_lookups"]``); none otherwise."""
    if not report.extra.get("member_lookups"):
        return {}
    return {"hook_globals": ["builtins.getattr", "__builtin__.getattr"]}


def family_of(report: CheckpointReport) -> type | None:
    """The multi-rank family of a step report whose rank files are loaded one by one."""
    if not isinstance(report.extra.get("family"), dict):
        return None
    from ckptrescue.checkpoints.families import by_name

    family = by_name(report.format)
    if family is None or getattr(family, "single_file", False):
        return None
    return family


BLOCKING = _BLOCKING


def budget(report: CheckpointReport) -> tuple[int, float]:
    """Memory (MiB) and time limits for loading ``report``'s files (see :func:`_budget`)."""
    return _budget(report)


def within(path: str, home: str) -> bool:
    """``path`` (resolved) is ``home`` or inside it."""
    return _within(path, home)


def _within(path: str, home: str) -> bool:
    real = os.path.realpath(path)
    return real == home or real.startswith(home.rstrip("/") + "/")


def _attempt_text(attempt: dict[str, Any]) -> str:
    args = ", ".join(str(a) for a in attempt.get("args", [])[:2])
    return f"{attempt.get('event')}({args})"


def record_outcome(report: CheckpointReport, outcome: ChildOutcome, loader: str,
                   **limits: Any) -> None:
    """Record a sandboxed load's outcome on ``report`` (finding, and verdict when it follows)."""
    report.load = {**outcome.to_json(), "loader": loader, **limits}
    res = outcome.result
    if outcome.status == "blocked":
        tried = [_attempt_text(a) for a in outcome.attempts]
        report.findings.append(finding(
            "LD005", f"{loader} load blocked by the sandbox: the file made the loader try "
            + ("; ".join(tried[:5]) if tried else "a forbidden system call (killed by seccomp, "
               "SIGSYS)") + " - nothing ran", evidence=report.path,
            details={"attempts": outcome.attempts, "signal": outcome.signal_name,
                     "reason": outcome.reason}))
        report.verdict = Verdict.UNSAFE
        return
    if outcome.status == "sandbox-unavailable":
        report.findings.append(finding(
            "LD006", f"{loader} load not run: {outcome.reason}", evidence=report.path,
            details={"reason": outcome.reason}))
        return
    if outcome.status == "ok":
        loaded = res.pop("map", None)
        summary = compare(report, loaded) if isinstance(loaded, dict) else None
        if summary is not None:
            report.load["compared"] = {k: v for k, v in summary.items() if k != "mismatches"}
        report.findings.append(finding("LD001", f"{loader} load succeeded "
                                       f"({res.get('tensors', '?')} tensors"
                                       + (f", {summary['compared']} compared with the static "
                                          "map" if summary else "") + ")",
                                       evidence=report.path, details=res))
        if summary and summary["mismatches"]:
            differs(report, loader, summary["mismatches"])
        return
    if outcome.status == "error":
        what = f"raised {res.get('exception')}: {str(res.get('message', ''))[:300]}"
        report.findings.append(finding("LD002", f"{loader} load {what}", evidence=report.path,
                                       details=res))
    else:
        what = outcome.status + (f" ({outcome.signal_name})" if outcome.signal_name else "")
        report.findings.append(finding("LD003", f"{loader} loader child {what}",
                                       evidence=report.path, details=outcome.to_json()))
    disagree(report, f"{loader} {what}")


def differs(report: CheckpointReport, loader: str, mismatches: list[dict[str, Any]]) -> None:
    """The real loader's tensors differ from the static map (LD008): never ``intact``."""
    by_name = {m["name"]: m for m in mismatches}
    shown = "; ".join(f"{m['name']} {m['what']} {m['static']} (loaded: {m['loaded']})"
                      for m in mismatches[:5])
    report.findings.append(finding(
        "LD008", f"{loader} loads {len(mismatches)} tensor(s) differently from the static map: "
        f"{shown}", evidence=report.path, tensors=list(by_name)[:500],
        details={"mismatches": mismatches[:200]}))
    for rec in report.tensors:
        m = by_name.get(rec.name)
        if m is not None:
            if rec.status in ("ok", "unverified"):
                rec.status = "suspect"
            rec.reasons.append(f"the real loader gives another {m['what']}: {m['loaded']}")
    report.verdict = worst_verdict([report.verdict, Verdict.SUSPECT])


def disagree(report: CheckpointReport, what: str) -> None:
    """The real loader failed on a file the static checks found loadable: LD007, unreadable."""
    if report.verdict not in _LOADABLE_STATIC:
        return
    report.findings.append(finding(
        "LD007", f"the real loader refuses this checkpoint although the static checks found it "
        f"{report.verdict}: {what[:400]}", evidence=report.path,
        details={"static_verdict": str(report.verdict)}))
    report.verdict = worst_verdict([report.verdict, Verdict.UNREADABLE])
