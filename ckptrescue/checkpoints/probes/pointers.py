"""Run-level checks of multi-rank families: the newest-step pointer files.

For each directory in which a family claimed step roots, the family's ``pointers(dir)``
(``latest``, ``latest_checkpointed_iteration.txt``, ...) are compared with the steps as probed:

* ``FM023`` the pointer is unreadable or names no step;
* ``FM020`` it names a step that does not exist;
* ``FM021`` it names a step that is not intact (incomplete, damaged, torn);
* ``FM022`` it names an older step than the newest complete (intact) one.

Each finding spells out the fix in ``details``: ``{"pointer": file, "current": value,
"write": value, "target": step root}`` - the exact value to write into which file so that the
run resumes from the newest complete step. The kit never writes it. The finding is attached to
the report of the step the pointer names (else the newest step of that family in that
directory); it does not change any step's verdict. Pointers are checked only when every step
the family claims in that directory was probed (a single step given alone has no run answer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckptrescue.checkpoints.base import CheckpointReport, Verdict
from ckptrescue.checkpoints.families.base import Family, Pointer, finding
from ckptrescue.model import Finding

POINTER_CODES = ("FM020", "FM021", "FM022", "FM023")


def _step(fam: type[Family], report: CheckpointReport) -> int | None:
    info = report.extra.get("family") or {}
    step = info.get("step")
    return step if isinstance(step, int) else fam.step_of(Path(report.path))


def _target(fam: type[Family], pointer: Pointer, steps: dict[Path, CheckpointReport],
            ) -> Path | None:
    for root in steps:
        if root.name == pointer.value:
            return root
    if pointer.step is not None:
        for root, report in steps.items():
            if _step(fam, report) == pointer.step:
                return root
    return None


def check_pointers(fam: type[Family], run_dir: Path, steps: dict[Path, CheckpointReport],
                   ) -> list[tuple[Finding, Path]]:
    """Findings on ``fam``'s pointers in ``run_dir`` and the step root each belongs to."""
    try:
        pointers = fam.pointers(run_dir)
    except OSError:
        return []
    if not pointers or not steps:
        return []
    complete = [(s, root) for root, r in steps.items()
                if r.verdict is Verdict.INTACT and (s := _step(fam, r)) is not None]
    newest = max(complete)[1] if complete else None
    newest_step = max(complete)[0] if complete else None
    fallback = max(steps, key=lambda r: (_step(fam, steps[r]) or -1, r.name))
    out: list[tuple[Finding, Path]] = []
    for p in pointers:
        target = _target(fam, p, steps)
        fix: dict[str, Any] = {"pointer": str(p.file), "current": p.value,
                               "family": fam.name, "write": None, "target": None}
        if newest is not None:
            fix["write"] = fam.pointer_value(p, newest)
            fix["target"] = str(newest)
        todo = (f"write {fix['write']!r} to {p.file}" if fix["write"] is not None
                else "no complete step exists to point to")
        if target is None and p.step is None:
            code, what = "FM023", f"{p.file.name} holds {p.value[:80]!r}, not a step name"
        elif target is None:
            code, what = "FM020", f"{p.file.name} names {p.value!r}, which does not exist"
        elif steps[target].verdict is not Verdict.INTACT:
            bad = (steps[target].extra.get("family") or {}).get("bad_ranks", [])
            code, what = "FM021", (f"{p.file.name} names {p.value!r}, which is "
                                   f"{steps[target].verdict}"
                                   + (f" (bad ranks: {', '.join(bad[:8])})" if bad else ""))
        elif newest_step is not None and (_step(fam, steps[target]) or 0) < newest_step:
            code, what = "FM022", (f"{p.file.name} names {p.value!r}, older than the newest "
                                   f"complete step {newest.name if newest else '?'}")
        else:
            continue
        if fix["write"] == p.value:
            continue
        out.append((finding(code, f"{what}: {todo} (the kit does not write it)",
                            evidence=p.file, details=fix), target or fallback))
    return out


def attach_pointer_findings(found: list[tuple[Any, Path]],
                            reports: list[CheckpointReport]) -> None:
    """Run the pointer checks for every directory where a family claimed steps."""
    by_dir: dict[tuple[type[Family], Path], dict[Path, CheckpointReport]] = {}
    for (fmt, root), report in zip(found, reports, strict=True):
        if fmt is None or not getattr(fmt, "family", False):
            continue
        by_dir.setdefault((fmt, Path(root).parent), {})[Path(root)] = report
    for (fam, run_dir), steps in by_dir.items():
        try:
            claimed = {Path(r) for r in fam.claim(run_dir)}
        except OSError:
            continue
        if not claimed or not claimed <= set(steps):
            continue  # only some steps of that directory were probed: no run-level answer
        for f, root in check_pointers(fam, run_dir, steps):
            steps[root].findings.append(f)
            steps[root].extra.setdefault("pointers", []).append(f.details)
