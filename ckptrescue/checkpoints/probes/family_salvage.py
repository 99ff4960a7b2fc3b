"""Salvage of a multi-rank family step, rank by rank (``salvage STEP_DIR OUT [--fill-from PREV]``).

Each rank file of the step is probed with its own format (the family's exact extra globals) and
its verified tensors are written, streaming, to ``OUT_DIR/<rank label>/<file>.salvaged.safetensors``
(numerically suspect ones apart, as for one checkpoint). ``fill_from`` is an earlier COMPLETE step
(verdict ``intact``) of the same family: a tensor lost in a rank file, and every tensor of a rank
file that is missing or whose tensor map is unreadable, is taken from the same rank (same label
and role) of that step when the name, shape and dtype agree. ``OUT_DIR/salvage.json`` says per
rank and file what was recovered, lost and filled, and for each filled tensor where it came from
(rank, file, step). Memory stays flat in the number of ranks: one rank file's report at a time.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, TensorRecord, Verdict
from ckptrescue.checkpoints.families.base import Family, Member, StepLayout, member_format, probe_member_file
from ckptrescue.checkpoints.salvage import (
    Planned,
    SalvageResult,
    is_suspect,
    plan_tensor,
    suspect_reasons,
    verified_pairs,
    write_safetensors,
)
from ckptrescue.effects import beneath
from ckptrescue.errors import UsageError
from ckptrescue.model import JsonObject

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".pkl", ".distcp")


@dataclass
class FamilySalvageResult(SalvageResult):
    """A step's salvage: the flat lists of :class:`SalvageResult` (tensor names carry the rank
    label, as in the step's probe) plus ``ranks``: label -> what happened to each of its files."""

    family: str = ""
    step: int | None = None
    fill_step: int | None = None
    ranks: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        data = super().to_json()
        data.update({"family": self.family, "step": self.step, "fill_step": self.fill_step,
                     "ranks": self.ranks})
        return data


@dataclass
class _Source:
    """One rank file probed for salvage: its verified tensors and the rest with reasons."""

    member: Member
    report: CheckpointReport | None
    fmt: Any
    pairs: list[tuple[TensorRecord, str | None]]


def _probe(family: type[Family], member: Member) -> _Source:
    if not member.path.exists():
        return _Source(member, None, None, [])
    report = probe_member_file(member.path, ProbeOptions(
        numeric=True, extra_allowed=family.allowed_globals))
    fmt = member_format(member.path)
    pairs = verified_pairs(fmt, member.path, report)
    return _Source(member, report, fmt, pairs)


def _stem(path: Path) -> str:
    name = path.name
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _label(member: Member, shared: set[str]) -> str:
    """The tensor-name prefix the step's probe uses (role added when files share a label)."""
    return f"{member.rank}/{member.role}/" if member.rank in shared else f"{member.rank}/"


def _plan(src: _Source, rec: TensorRecord) -> Planned | str:
    assert src.report is not None
    reader = getattr(src.fmt, "read_tensor_bytes", None)
    p = plan_tensor(rec, src.report.extra.get("strides", {}), has_reader=reader is not None)
    if isinstance(p, str):
        return p
    p.reader, p.root, p.report = reader, src.member.path, src.report
    p.big_endian = src.report.extra.get("byteorder") == "big"
    return p


class _Fill:
    """The fill step: its members by (rank, role), probed lazily one at a time."""

    def __init__(self, family: type[Family], layout: StepLayout | None) -> None:
        self.family = family
        self.layout = layout
        self.by_key = {(m.rank, m.role): m for m in layout.members} if layout else {}
        self._cache: tuple[Path, _Source, dict[str, tuple[TensorRecord, str | None]]] | None = \
            None

    def source(self, member: Member) -> tuple[_Source, dict[str, tuple[TensorRecord,
                                                                         str | None]]] | None:
        other = self.by_key.get((member.rank, member.role))
        if other is None:
            return None
        if self._cache is None or self._cache[0] != other.path:
            src = _probe(self.family, other)
            self._cache = (other.path, src, {r.name: (r, why) for r, why in src.pairs})
        return self._cache[1], self._cache[2]


def _check_fill(family: type[Family], root: Path, step: int | None,
                fill_from: Path) -> tuple[StepLayout, int | None]:
    from ckptrescue.checkpoints.probes.checkpoints import discover
    from ckptrescue.checkpoints.probes.single import probe_one

    found = discover([Path(fill_from).absolute()])
    if len(found) != 1 or found[0][0] is not family:
        raise UsageError(f"{fill_from}: --fill-from must be one step of the same family "
                         f"({family.name}) as {root}")
    froot = found[0][1]
    if froot.resolve() == root.resolve():
        raise UsageError(f"{fill_from}: --fill-from is the damaged step itself")
    report = probe_one(family, froot, ProbeOptions(numeric=True))
    fstep = (report.extra.get("family") or {}).get("step")
    if report.verdict is not Verdict.INTACT:
        raise UsageError(f"{fill_from}: --fill-from must be a COMPLETE step (every rank "
                         f"verified); it is {report.verdict}",
                         hint="rank the run directory to find the newest complete step")
    if step is not None and fstep is not None and fstep >= step:
        raise UsageError(f"{fill_from}: --fill-from must be an earlier step (it records step "
                         f"{fstep}, the damaged step is {step})")
    return family.layout(froot), fstep


def salvage_step(family: type[Family], root: Path, out_dir: Path, *,
                 fill_from: Path | None = None, case: Case | None = None,
                 ) -> FamilySalvageResult:
    """Salvage the step at ``root`` rank by rank into ``out_dir`` (see the module docstring)."""
    layout = family.layout(root)
    result = FamilySalvageResult(source=str(root), source_verdict="?", output=str(out_dir),
                                 fill_from=str(fill_from) if fill_from else None,
                                 family=family.name, step=layout.step)
    fill = _Fill(family, None)
    if fill_from is not None:
        flayout, result.fill_step = _check_fill(family, root, layout.step, fill_from)
        fill = _Fill(family, flayout)
    present = {m.path for m in layout.members}
    members = list(layout.members) + [m for m in layout.expected
                                      if m.path not in present and not m.path.exists()]
    shared = {x for x, n in Counter(m.rank for m in members).items() if n > 1}
    beneath.makedirs(out_dir, out_dir)
    verdicts: list[Verdict] = []
    for member in members:
        entry = _salvage_member(family, member, out_dir, fill, result, _label(member, shared))
        result.ranks.setdefault(member.rank, {"files": []})["files"].append(entry)
        if entry.get("verdict"):
            verdicts.append(Verdict(entry["verdict"]))
    for info in result.ranks.values():
        files = info["files"]
        info["status"] = ("lost" if all(f["status"] == "lost" for f in files) else
                          "recovered" if all(f["status"] == "recovered" for f in files) else
                          "filled" if all(f["status"] in ("recovered", "filled") for f in files)
                          else "partial")
    from ckptrescue.checkpoints.base import worst_verdict

    result.source_verdict = str(worst_verdict(verdicts)) if len(verdicts) == len(members) \
        else str(worst_verdict([*verdicts, Verdict.INCOMPLETE]))
    if any(f["status"] == "lost" and not f.get("lost") for info in result.ranks.values()
           for f in info["files"]):
        result.unaccounted = ("rank file(s) missing or unreadable and nothing to fill them from: "
                              "their tensors cannot be named (see ranks)")
    beneath.write_text(out_dir, out_dir / "salvage.json",
                       json.dumps(result.to_json(), indent=2) + "\n")
    _record(result, out_dir)
    return result


def _salvage_member(family: type[Family], member: Member, out_dir: Path, fill: _Fill,  # noqa: C901
                    result: FamilySalvageResult, prefix: str) -> dict[str, Any]:
    src = _probe(family, member)
    entry: dict[str, Any] = {"source": str(member.path), "role": member.role,
                             "verdict": str(src.report.verdict) if src.report else None,
                             "output": None, "recovered": [], "lost": [], "filled": [],
                             "suspect": []}
    # missing, or its tensor map unreadable (a rank file that holds no tensor is not "whole")
    whole = src.report is None or (not src.pairs and src.report.verdict not in (
        Verdict.INTACT, Verdict.SUSPECT))
    planned: list[Planned] = []
    lost: dict[str, tuple[TensorRecord | None, str]] = {}
    if src.report is not None:
        for rec, why in src.pairs:
            p = _plan(src, rec) if why is None else why
            if isinstance(p, str):
                lost[rec.name] = (rec, p)
            else:
                planned.append(p)
    filled_from: dict[str, dict[str, Any]] = {}
    other = fill.source(member) if fill.layout is not None and (lost or whole) else None
    if other is not None:
        fsrc, fpairs = other
        names = list(fpairs) if whole else list(lost)
        for name in names:
            cand = fpairs.get(name)
            mine = lost.get(name, (None, ""))[0]
            if cand is None or cand[1] is not None or (fsrc.report is not None
                                                       and is_suspect(cand[0], fsrc.report)):
                if whole and name not in lost:
                    lost[name] = (cand[0] if cand else None, "rank file "
                                  + ("missing" if src.report is None else "unreadable")
                                  + "; not verified in the fill step")
                continue
            rrec = cand[0]
            if mine is not None and mine.shape is not None and (
                    rrec.shape != mine.shape or rrec.dtype != mine.dtype):
                lost[name] = (mine, lost[name][1] + "; the fill step's tensor differs in "
                              "shape/dtype")
                continue
            p = _plan(fsrc, rrec)
            if isinstance(p, str):
                continue
            p.filled = True
            planned.append(p)
            lost.pop(name, None)
            filled_from[name] = {"name": prefix + name, "rank": fsrc.member.rank,
                                 "file": str(fsrc.member.path), "step": result.fill_step}
    if whole and not planned and not lost:
        why = "rank file missing" if src.report is None else "rank file unreadable (" + (
            "; ".join(f.title for f in src.report.findings[:2]) or "no tensor map") + ")"
        entry.update(status="lost", reason=why + ("" if fill.layout is None else
                                                  "; the fill step has no such rank file"))
        return entry
    if not planned and not lost:
        entry.update(status="recovered", reason="the rank file holds no tensor")
        return entry
    suspects = {p.name for p in planned if not p.filled and src.report is not None
                and is_suspect(p.rec, src.report)}
    clean = sorted((p for p in planned if p.name not in suspects), key=lambda p: p.name)
    apart = sorted((p for p in planned if p.name in suspects), key=lambda p: p.name)
    rank_dir = out_dir / member.rank
    beneath.makedirs(out_dir, rank_dir)
    stem = _stem(member.path) if not member.path.is_dir() else member.path.name
    if member.role and len(list(rank_dir.glob(f"{stem}.salvaged.safetensors"))):
        stem = f"{stem}.{member.role}"
    meta = {"salvaged_from": str(member.path), "rank": member.rank, "role": member.role,
            "step": str(result.step), "filled_from": result.fill_from or "",
            "filled": json.dumps(sorted(filled_from))}
    out_path = rank_dir / f"{stem}.salvaged.safetensors"
    if beneath.lexists(out_dir, out_path):
        raise UsageError(f"{out_path}: already exists; choose a new OUT_DIR")
    write_safetensors(out_path, clean, meta)
    entry["output"] = str(out_path)
    if apart:
        suspect_path = rank_dir / f"{stem}.suspect.safetensors"
        write_safetensors(suspect_path, apart, {**meta, "suspect": "numerically suspect in the "
                                                "probe: not a verified recovery"})
        entry["suspect_output"] = str(suspect_path)
    entry["recovered"] = sorted(p.name for p in clean if not p.filled)
    entry["filled"] = [filled_from[n] | {"tensor": n} for n in sorted(filled_from)]
    entry["lost"] = [{"name": n, "reason": why} for n, (_r, why) in sorted(lost.items())]
    entry["suspect"] = [{"name": p.name, "reasons": suspect_reasons(p.name, src.report)}
                        for p in apart if src.report is not None]
    entry["status"] = ("lost" if not clean else "recovered" if not lost and not filled_from
                       and not apart else "filled" if not lost and not apart else "partial")
    result.recovered += [prefix + n for n in entry["recovered"]]
    result.filled += [prefix + n for n in sorted(filled_from)]
    result.lost += [{"name": prefix + x["name"], "reason": x["reason"]} for x in entry["lost"]]
    result.suspect += [{"name": prefix + x["name"], "reasons": x["reasons"]}
                       for x in entry["suspect"]]
    return entry


def iter_filled(result: FamilySalvageResult) -> Iterator[dict[str, Any]]:
    """Every filled tensor with where it came from (rank, file, step)."""
    for info in result.ranks.values():
        for f in info["files"]:
            yield from f["filled"]


def _record(result: FamilySalvageResult, out_dir: Path) -> None:
    """The step's audit record and SV findings, for the engine to record."""
    from ckptrescue.checkpoints.salvage import salvage_findings
    from ckptrescue.model import ArtifactData

    sha = result.store(ArtifactData.of_bytes((out_dir / "salvage.json").read_bytes(),
                                             name="salvage.json", kind="salvage-report"))
    result.record("checkpoint.salvaged", {"source": result.source, "output": str(out_dir),
                                          "family": result.family, "step": result.step,
                                          "recovered": len(result.recovered),
                                          "lost": [x["name"] for x in result.lost][:500],
                                          "filled": result.filled[:500],
                                          "fill_from": result.fill_from}, artifacts=[sha])
    result.findings_here()
    result.findings.extend(salvage_findings(
        result, result.source, f"{out_dir} ({len(result.ranks)} rank(s))",
        f"the same ranks of {result.fill_from}"))
