"""``probe --load`` on a multi-rank family step: every rank file through its real loader, in ONE
sandbox child (``sandbox_children/torch_load.py``, loader ``family``), each ``torch.load`` with
``weights_only=True`` and exactly the family's allowed globals registered as safe by qualified
name (``sandbox_children/safe_globals.py``: the training library is never imported).

Outcomes on the step report: LD001 when every rank file loads; LD002 per rank file the loader
refuses, naming the rank (``details["ranks"]``), and the rank joins ``extra.family.bad_ranks``;
when the static checks had found the step loadable that disagreement is LD007 and the verdict
becomes ``unreadable`` (never resumed from). LD004 when the load is skipped: a rank file the
static checks block (an off-list global, a damaged pickle), a rank file with no sandboxed
loader, or a family global that cannot be registered in the sandbox (its library is not
installed there) - the load is then skipped with that status, never widened to
``weights_only=False``. Sandbox refusals and crashes are recorded as for one checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.checkpoints.base import CheckpointReport
from ckptrescue.checkpoints.formats.tensormap import finding
from ckptrescue.checkpoints.probes.checkpoint_load import (
    BLOCKING,
    LOADABLE,
    LOADERS,
    budget,
    disagree,
    hook_globals,
    record_outcome,
    within,
)

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

MAX_NAMED = 64


def _skip(report: CheckpointReport, why: str, **extra: Any) -> None:
    report.load = {"status": "skipped", "reason": why, **extra}
    report.findings.append(finding("LD004", f"real load skipped: {why}", evidence=report.path,
                                   details=extra or None))


def load_family_step(report: CheckpointReport, family: type, *, case: Case | None = None,
                     memory_mb: int | None = None, timeout_s: float | None = None) -> None:
    """Load every rank file of the step at ``report.path`` in the sandbox (module docstring)."""
    from ckptrescue.checkpoints.families.base import member_format
    from ckptrescue.effects.sandbox import run_child

    if report.verdict not in LOADABLE:
        _skip(report, f"verdict {report.verdict}")
        return
    root = Path(report.path)
    layout = family.layout(root)
    blocked_files = {f.evidence for f in report.findings if f.code in BLOCKING}
    members: list[dict[str, str]] = []
    skipped: dict[str, str] = {}
    for m in layout.members:
        fmt = member_format(m.path)
        loader = LOADERS.get(getattr(fmt, "name", ""))
        if str(m.path) in blocked_files:
            skipped[m.rank] = "blocked by the static checks"
        elif loader is None or loader == "hf-sharded":
            skipped[m.rank] = f"no sandboxed loader for {getattr(fmt, 'name', 'unknown')}"
        else:
            members.append({"rank": m.rank, "path": str(m.path), "loader": loader})
    if not members:
        _skip(report, "no rank file can be loaded: " + "; ".join(
            f"{r}: {w}" for r, w in sorted(skipped.items())[:4]), ranks=sorted(skipped))
        return
    home = os.path.realpath(root if root.is_dir() else root.parent)
    strays = [m["path"] for m in members if not within(m["path"], home)]
    if strays:
        _skip(report, "rank files outside the step's directory: " + ", ".join(strays[:3]))
        return
    auto_mem, auto_time = budget(report)
    memory_mb = memory_mb if memory_mb is not None else auto_mem
    timeout_s = timeout_s if timeout_s is not None else auto_time
    files = [m["path"] for m in members]
    request = {"path": str(root), "loader": "family", "files": files, "members": members,
               "allowed_globals": sorted(getattr(family, "allowed_globals", frozenset())),
               **hook_globals(report)}  # (the hook's alone: torch never gets getattr)
    outcome = run_child("torch_load", request, case=case, memory_mb=memory_mb,
                        timeout_s=timeout_s, inputs=[str(root), *files])
    res = outcome.result or {}
    if outcome.status not in ("ok", "error") or ("members" not in res
                                                  and not res.get("skipped")):
        record_outcome(report, outcome, f"{family.name} (family)", memory_mb=memory_mb,
                       timeout_s=timeout_s)
        return
    if res.get("skipped"):
        _skip(report, str(res.get("message")), unresolved=res.get("unresolved", {}))
        return
    report.load = {**outcome.to_json(), "loader": "family", "memory_mb": memory_mb,
                   "timeout_s": timeout_s, "skipped_ranks": skipped}
    refused = [r for r in res["members"] if not r.get("ok")]
    if skipped:
        report.findings.append(finding(
            "LD004", f"{len(skipped)} rank file(s) not loaded: " + "; ".join(
                f"{r}: {w}" for r, w in sorted(skipped.items())[:4]), evidence=report.path,
            details={"ranks": sorted(skipped)[:256]}))
    if not refused:
        report.findings.append(finding(
            "LD001", f"{family.name} load succeeded: {len(res['members'])} rank file(s), "
            f"{res.get('tensors', '?')} tensors (weights_only, the family's exact globals "
            "registered)", evidence=report.path,
            details={"registered": res.get("registered", []),
                     "rank_files": len(res["members"])}))
        return
    for r in refused[:MAX_NAMED]:
        report.findings.append(finding(
            "LD002", f"{r['rank']} ({Path(r['path']).name}): the real loader raised "
            f"{r.get('exception')}: {str(r.get('message', ''))[:200]}", evidence=r["path"],
            details={"ranks": [r["rank"]], "exception": r.get("exception")}))
    if len(refused) > MAX_NAMED:
        report.findings.append(finding(
            "LD002", f"... and {len(refused) - MAX_NAMED} more rank file(s) the real loader "
            "refuses", evidence=report.path,
            details={"ranks": [r["rank"] for r in refused[MAX_NAMED:MAX_NAMED * 64]]}))
    fam = report.extra.get("family")
    if isinstance(fam, dict):
        fam["bad_ranks"] = sorted(set(fam.get("bad_ranks", [])) | {r["rank"] for r in refused})
        fam["load_refused"] = sorted(r["rank"] for r in refused)[:4096]
    disagree(report, f"the real loader refuses {len(refused)} rank file(s): "
             + ", ".join(r["rank"] for r in refused[:8]))
