"""The one-line answer of an incident, computed from the case alone (pure over audit records).

Used at the end of a run, by ``case show``-like summaries, the report's first line and the TUI.
Example: ``resume from step-300; step-400 truncated; 2 tensors lost in step-200;
1 checkpoint unsafe (posix.system)``.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from ckptrescue.engine.capability_answers import EXAMINING as CAPABILITY_EXAMINING
from ckptrescue.engine.capability_answers import capability_parts
from ckptrescue.engine.case_outputs import (
    CHECKPOINTS,
    DATASETS,
    STORAGE,
    STORES,
    domains_held,
    outputs_of,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from ckptrescue.checkpoints.outputs import CheckpointSummary, SalvageRecord
    from ckptrescue.record.case import Case


__all__ = ["answer_line", "latest_checkpoints", "outputs_of", "salvage_results"]

def salvage_results(case: Case) -> list[SalvageRecord]:
    """Every salvage result (one per checkpoint), oldest first."""
    from ckptrescue.checkpoints.outputs import SalvageOutput

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


def latest_checkpoints(case: Case) -> dict[str, CheckpointSummary]:
    """The newest probe result per checkpoint path."""
    from ckptrescue.checkpoints.outputs import ProbeOutput

    by_path: dict[str, CheckpointSummary] = {}
    for out in outputs_of(case, ProbeOutput):
        for ckpt in out.checkpoints:
            by_path[ckpt.path] = ckpt
    return by_path


def _namer(case: Case, paths: list[str]) -> Any:
    """Checkpoint names for the answer: the base name, or, when the checkpoints come from more
    than one evidence item, ``E002:run/step-300.pt`` (two images may each hold a
    ``run/step-100.pt``)."""
    from ckptrescue.record import provenance

    where = provenance.index(case)
    items = {found.evidence_id for p in paths if (found := where.locate(p)) is not None}
    if len(items) < 2:
        return _name

    def name(path: str) -> str:
        found = where.locate(path)
        return found.label if found else _name(path)
    return name


def answer_line(case: Case) -> str:
    held = domains_held(case)
    parts: list[str] = []
    name_of: Callable[[str], str] = _name
    if held(CHECKPOINTS):
        name_of = _checkpoint_parts(case, parts)
    parts += _other_domain_parts(case, name_of, held)
    parts += capability_parts(case, held)
    if held(DATASETS) or held(STORES):
        from ckptrescue.engine.evidence_answers import evidence_parts

        parts += evidence_parts(case, held)
    if not parts:
        return _no_answer(case)
    return "; ".join(parts)


def _checkpoint_parts(case: Case, parts: list[str]) -> Callable[[str], str]:
    """The parts about checkpoints (resume point, damage, salvage, unsafe pickles), appended to
    ``parts``; returns the namer of checkpoints for the other parts."""
    from ckptrescue.checkpoints.outputs import RankOutput

    ranks = outputs_of(case, RankOutput)
    _name = _namer(case, list(latest_checkpoints(case)) + [
        r.resume_from for r in ranks[-1:] if r.resume_from])
    if ranks:
        resume = ranks[-1].resume_from
        parts.append(f"resume from {_name(resume)}" if resume
                     else "no checkpoint is safe to resume from")
    unsafe: list[str] = []
    lost: dict[str, int] = {}
    mixed: dict[str, tuple[int, str]] = {}  # salvaged with tensors from another step
    for out in salvage_results(case):
        if out.filled:
            key = out.name
            mixed[key] = mixed[key.removesuffix(".index")] = (len(out.filled),
                                                             str(out.fill_from))
        n = len(out.lost)
        if n:
            key = out.name
            lost[key] = n
            lost[key.removesuffix(".index")] = n  # a TF checkpoint: salvaged by its .index
    for path, ckpt in sorted(latest_checkpoints(case).items(), key=lambda kv: _order(kv[0])):
        verdict = ckpt.verdict
        name = _name(path)
        if verdict in (None, "", "intact"):
            continue
        if verdict == "unsafe":
            globs = sorted({g for f in ckpt.findings
                            for g in (f.details or {}).get("globals", [])})
            unsafe.append(f"{name} ({', '.join(globs[:3]) or 'unsafe pickle'})")
            continue
        if path in lost or path in mixed:
            bits = []
            if path in lost:
                n = lost[path]
                bits.append(f"{n} tensor{'s' if n != 1 else ''} lost")
            if path in mixed:
                n, ref = mixed[path]
                bits.append(f"salvage mixed, {n} tensor{'s' if n != 1 else ''} from "
                            f"{_name(ref)}")
            parts.append(f"{name} {verdict}: " + ", ".join(bits))
            continue
        names = ckpt.not_intact_tensors
        if names:
            n = len(names)
            parts.append(f"{name} {verdict}: {n} tensor{'s' if n != 1 else ''}")
        else:
            parts.append(f"{name} {verdict}")
    if unsafe:
        parts.append(f"{len(unsafe)} checkpoint{'s' if len(unsafe) != 1 else ''} unsafe: "
                     f"{'; '.join(unsafe)}")
    return _name


def _other_domain_parts(case: Case, name_of: Any, held: Callable[[str], bool]) -> list[str]:
    """The parts about a source image, bad sectors, an object's history, training state and
    a dataset comparison (each domain's only when the case may hold its records)."""
    parts: list[str] = []
    if held(STORAGE):
        parts += _storage_parts(case)
    if held(STORES):
        from ckptrescue.stores.outputs import S3HistoryOutput

        for history in outputs_of(case, S3HistoryOutput)[-1:]:
            for key in history.keys:
                if key.known_good:
                    parts.append(f"s3 {name_of(key.key)}: last known-good version "
                                 f"{key.known_good}")
    if held(DATASETS):
        parts += _dataset_parts(case, held)
    return parts


def _storage_parts(case: Case) -> list[str]:
    from ckptrescue.storage.outputs import ImageOutput, LocateOutput

    parts: list[str] = []
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
    return parts


def _dataset_parts(case: Case, held: Callable[[str], bool]) -> list[str]:
    from ckptrescue.datasets.outputs import module_of

    if not held(module_of("TrainStateOutput")):  # the analysis records (and the comparison's)
        return []
    from ckptrescue.datasets.outputs import DatasetCompareOutput, TrainStateOutput

    parts: list[str] = []
    for state in outputs_of(case, TrainStateOutput)[-1:]:
        if state.findings:
            kinds = sorted({str(f.get("code")) for f in state.findings})
            parts.append(f"training state: {len(state.findings)} finding(s) "
                         f"({', '.join(kinds)}): {_clip(str(state.findings[0].get('title')))}")
    for compared in outputs_of(case, DatasetCompareOutput)[-1:]:
        if compared.compare.get("flagged"):
            parts.append(f"dataset: {compared.answer}")
    return parts


def _clip(text: str, limit: int = 160) -> str:
    """``text`` up to ``limit`` characters, cut after a whole word (never inside a tensor
    name) and marked with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = max(text.rfind(sep, 0, limit) for sep in (" ", ", "))
    return (text[:cut] if cut > 0 else text[:limit]).rstrip(" ,;:") + " …"


EXAMINING = {"probe", "rank", "image", "locate", "fs.inspect", "s3.verify", "s3.history",
             "manifest.audit", "dataset.verify", "triage", "copy", "s3.preserve", "recover",
             "salvage", "exec"} | CAPABILITY_EXAMINING


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
    serious = [f for f in case.findings() if f.severity.rank >= 2]
    if serious:
        from ckptrescue.engine.evidence_answers import serious_named

        return serious_named(serious)
    if failed and not examined:
        return "nothing could be examined: " + "; ".join(failed[-3:])
    if not examined:
        return "nothing examined yet"
    if failed:
        return "no damage found in what was examined; " + "; ".join(failed[-3:])
    return "no damage found"


def main() -> None:  # pragma: no cover - `python -m ckptrescue.engine.answer CASE`
    import sys
    from pathlib import Path

    from ckptrescue.display import shown
    from ckptrescue.record.case import Case

    print(shown(answer_line(Case.open(Path(sys.argv[1])))))  # names shown, never obeyed


if __name__ == "__main__":  # pragma: no cover
    main()
