"""The one-line answer of an incident, computed from the case alone (pure over audit records).

Used at the end of a run, by ``case show``-like summaries, the report's first line and the TUI.
Example: ``resume from step-300; step-400 truncated; 2 tensors lost in step-200;
1 checkpoint unsafe (posix.system)``.
"""

from __future__ import annotations

import json
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, TypeVar

from ckptrescue.outputs import (
    ImageOutput,
    LocateOutput,
    ProbeOutput,
    RankOutput,
    S3HistoryOutput,
    SalvageOutput,
    StepOutputs,
)

if TYPE_CHECKING:
    from ckptrescue.case import Case

O = TypeVar("O", bound=StepOutputs)  # noqa: E741


def outputs_of(case: Case, kind: type[O]) -> list[O]:
    """The outputs of every finished step whose action records ``kind``, oldest first.

    Read by type: the action of each ``step.finished`` record names its output type
    (``Action.output_type``), whatever the action is called.
    """
    from ckptrescue.actions import registry

    actions = registry()
    results: list[O] = []
    for record in case.records("step.finished"):
        details = record["details"]
        action = actions.get(str(details.get("action") or ""))
        if action is None or not issubclass(action.output_type, kind) \
                or not details.get("outputs_sha256"):
            continue
        try:
            results.append(kind.from_json(json.loads(case.read_artifact(
                details["outputs_sha256"]))))
        except (OSError, ValueError):
            continue
    return results


def salvage_results(case: Case) -> list[dict[str, Any]]:
    """Every salvage result (one per checkpoint), oldest first."""
    return [r for out in outputs_of(case, SalvageOutput) for r in out.salvaged]


def _name(path: str) -> str:
    p = PurePath(path)
    if p.name.endswith(".index.json") or p.name == ".metadata":
        return p.parent.name  # a sharded/DCP checkpoint is named by its directory
    return p.name or path


def _order(path: str) -> tuple[int, str]:
    """Newest first by the step number in the name, then by name."""
    import re

    nums = re.findall(r"\d+", PurePath(path).name if not path.endswith(".json")
                      else PurePath(path).parent.name)
    return (-int(nums[-1]) if nums else 0, path)


def latest_checkpoints(case: Case) -> dict[str, dict[str, Any]]:
    """The newest probe result per checkpoint path."""
    by_path: dict[str, dict[str, Any]] = {}
    for out in outputs_of(case, ProbeOutput):
        for ckpt in out.checkpoints:
            by_path[ckpt["path"]] = ckpt
    return by_path


def answer_line(case: Case) -> str:
    parts: list[str] = []
    ranks = outputs_of(case, RankOutput)
    if ranks:
        resume = ranks[-1].resume_from
        parts.append(f"resume from {_name(resume)}" if resume
                     else "no checkpoint is safe to resume from")
    unsafe: list[str] = []
    lost: dict[str, int] = {}
    for out in salvage_results(case):
        n = len(out.get("lost", []))
        if n:
            lost[out.get("checkpoint", "?")] = n
    for path, ckpt in sorted(latest_checkpoints(case).items(), key=lambda kv: _order(kv[0])):
        verdict = ckpt.get("verdict")
        name = _name(path)
        if verdict in (None, "intact"):
            continue
        if verdict == "unsafe":
            globs = sorted({g for f in ckpt.get("findings", [])
                            for g in (f.get("details") or {}).get("globals", [])})
            unsafe.append(f"{name} ({', '.join(globs[:3]) or 'unsafe pickle'})")
            continue
        if path in lost:
            n = lost[path]
            parts.append(f"{name} {verdict}: {n} tensor{'s' if n != 1 else ''} lost")
            continue
        names = ckpt.get("damaged_tensors", []) + ckpt.get("missing_tensors", []) \
            + ckpt.get("suspect_tensors", [])
        if names:
            n = len(names)
            parts.append(f"{name} {verdict}: {n} tensor{'s' if n != 1 else ''}")
        else:
            parts.append(f"{name} {verdict}")
    if unsafe:
        parts.append(f"{len(unsafe)} checkpoint{'s' if len(unsafe) != 1 else ''} unsafe: "
                     f"{'; '.join(unsafe)}")
    for image in outputs_of(case, ImageOutput)[-1:]:
        bad = image.bad_ranges or []
        if bad:
            total = sum(end - start for start, end in bad)
            parts.append(f"{total} bytes unreadable on the source in {len(bad)} range(s)")
    for located in outputs_of(case, LocateOutput)[-1:]:
        hit = sorted({t for r in located.ranges for f in r.get("files", [])
                      for t in f.get("tensors", [])})
        if hit:
            parts.append(f"bad sectors hit {len(hit)} tensor{'s' if len(hit) != 1 else ''}")
    for history in outputs_of(case, S3HistoryOutput)[-1:]:
        for key in history.keys:
            if key.get("known_good"):
                parts.append(f"s3 {_name(key['key'])}: last known-good version "
                             f"{key['known_good']}")
    if not parts:
        return _no_answer(case)
    return "; ".join(parts)


EXAMINING = {"probe", "rank", "image", "locate", "fs.inspect", "s3.verify", "s3.history",
             "manifest.audit", "dataset.verify", "triage", "copy", "s3.preserve", "recover",
             "salvage", "exec"}


def _no_answer(case: Case) -> str:
    """No damage to name: say whether anything was examined at all, or what failed."""
    examined = False
    failed: list[str] = []
    for record in case.records("step.finished"):
        d = record["details"]
        if d.get("status") in {"ok", "findings"} and d.get("action") in EXAMINING:
            examined = True
        elif d.get("status") in {"failed", "refused"}:
            failed.append(f"{d.get('step')} {d.get('status')}: {d.get('error') or ''}".strip())
    serious = {(f.code, f.title, f.evidence, f.offset) for f in case.findings()
               if f.severity.rank >= 2}
    if serious:
        return f"{len(serious)} serious finding(s); see the report"
    if failed and not examined:
        return "nothing could be examined: " + "; ".join(failed[-3:])
    if not examined:
        return "nothing examined yet"
    if failed:
        return "no damage found in what was examined; " + "; ".join(failed[-3:])
    return "no damage found"


def main() -> None:  # pragma: no cover - `python -m ckptrescue.answer CASE`
    import sys
    from pathlib import Path

    from ckptrescue.case import Case

    print(answer_line(Case.open(Path(sys.argv[1]))))


if __name__ == "__main__":  # pragma: no cover
    main()
