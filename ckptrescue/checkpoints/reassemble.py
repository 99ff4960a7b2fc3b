"""Scattered and half-written ranks: can a multi-rank step that lacks rank files be reassembled
from the copies a crashed save or an earlier copy left elsewhere?

A save killed part-way leaves a step directory (DeepSpeed ``global_stepN``, Megatron
``iter_NNNNNNN``, ...) without some rank files, and often the missing files complete somewhere
else: the staging directory the trainer writes before renaming (``tmp-checkpoint-N/`` of the
Hugging Face Trainer, ``global_stepN.tmp``, ``iter_N_partial``), a second copy of the run
(``run.bak/``, a synced mirror). This looks there, never further than two levels above the step,
never through a symlink:

* for each ancestor ``A`` of the step (its parent and grandparent), every sibling ``C`` of the
  step's path under ``A`` gives the candidate ``C/<rest of the path>`` (``run/tmp-checkpoint-3/
  global_step3`` for ``run/checkpoint-3/global_step3``);
* every directory beside the step whose name is the step's name with a temporary or partial
  decoration (``tmp``, ``temp``, ``partial``, ``incomplete``, ``staging``, ``bak``, ``old``,
  ``copy``) is a candidate too.

A candidate rank file counts only when **verified**: it is probed with its own format (CRCs,
structure: intact), its own metadata records the same step, and the reassembled set passes the
family's own cross-rank rules (world sizes, ZeRO stage, per-rank tensor layouts, the step each
rank records) — the same rules the probe applies to a step as saved. Present rank files that
are damaged are replaced the same way when a verified copy exists.

Nothing is moved or copied: the result is a plan (``PLAN.json`` + ``PLAN.sh`` for review): the
script builds a NEW directory holding the complete step (``cp --reflink=auto`` of each chosen
file, then ``sha256sum -c`` of every copy against the hashes taken when the plan was written),
by default beside the plan; the evidence stays as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.families.base import (
    Family,
    Member,
    MemberSummary,
    StepLayout,
    summarize_in_worker,
    verdict_of,
)
from ckptrescue.errors import UsageError
from ckptrescue.model import Finding, JsonObject, Recorded, Severity

PLAN_SCHEMA = "ckptrescue.reassembly-plan/1"
_DECORATION = re.compile(r"(tmp|temp|partial|incomplete|staging|stage|bak|backup|old|copy|"
                         r"orig|saving|inprogress|in_progress)", re.I)
MAX_CANDIDATES = 256  # candidate directories looked at per step
_BAD = {Verdict.DAMAGED, Verdict.TRUNCATED, Verdict.INCOMPLETE, Verdict.UNREADABLE,
        Verdict.UNSAFE}


@dataclass
class Tried:
    path: str
    outcome: str  # verified, or why not

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "outcome": self.outcome}


@dataclass
class RankPlan:
    rank: str
    role: str
    relpath: str
    status: str  # present, replaced, missing, damaged
    source: str | None = None
    sha256: str | None = None
    size: int | None = None
    tried: list[Tried] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        return {"rank": self.rank, "role": self.role, "relpath": self.relpath,
                "status": self.status, "source": self.source, "sha256": self.sha256,
                "size": self.size, "tried": [t.to_json() for t in self.tried[:20]]}


@dataclass
class ReassemblyResult(Recorded):
    step_dir: str
    family: str = ""
    step: int | None = None
    world: dict[str, int] = field(default_factory=dict)
    candidates: list[str] = field(default_factory=list)
    ranks: list[RankPlan] = field(default_factory=list)
    check_problems: list[str] = field(default_factory=list)
    plan_file: str | None = None
    plan_script: str | None = None
    dest: str | None = None

    @property
    def needed(self) -> list[RankPlan]:
        return [r for r in self.ranks if r.status != "present"]

    @property
    def complete_as_saved(self) -> bool:
        return not self.needed

    @property
    def reassemblable(self) -> bool:
        return all(r.status in ("present", "replaced") for r in self.ranks) \
            and not self.check_problems and bool(self.ranks)

    def answer(self) -> str:
        name = Path(self.step_dir).name
        if self.complete_as_saved:
            return f"{name}: every rank file is present and intact; nothing to reassemble"
        replaced = [r for r in self.ranks if r.status == "replaced"]
        lost = [r for r in self.ranks if r.status in ("missing", "damaged")]
        if self.reassemblable:
            return (f"{name} can be reassembled: {len(replaced)} rank file(s) from "
                    + ", ".join(sorted({str(Path(r.source or '').parent) for r in replaced}))
                    + " (each verified)"
                    + (f"; plan {self.plan_file}" if self.plan_file else ""))
        text = f"{name} cannot be reassembled: {len(lost)} rank file(s) with no verified copy"
        if lost:
            text += " (" + ", ".join(f"{r.rank} {r.role}" for r in lost[:4]) + ")"
        if self.check_problems:
            text += f"; the assembled set fails the family's checks: {self.check_problems[0]}"
        return text

    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        src = "resume.reassemble"
        if self.complete_as_saved:
            return out
        if self.reassemblable:
            out.append(Finding("RA001", Severity.WARNING, self.answer(), evidence=self.step_dir,
                               source=src, details={"replaced": [
                                   r.to_json() for r in self.ranks if r.status == "replaced"],
                                   "plan": self.plan_file}))
        else:
            out.append(Finding("RA002", Severity.ERROR, self.answer(), evidence=self.step_dir,
                               source=src, details={"lost": [
                                   r.to_json() for r in self.ranks
                                   if r.status in ("missing", "damaged")],
                                   "check": self.check_problems[:10]}))
        for r in self.ranks:
            for t in r.tried:
                if t.outcome != "verified" and not t.outcome.startswith("not present"):
                    out.append(Finding("RA003", Severity.INFO, f"{r.rank} {r.role}: candidate "
                                       f"{t.path} rejected: {t.outcome}", evidence=t.path,
                                       source=src))
        return out

    def to_json(self) -> JsonObject:
        return {"step_dir": self.step_dir, "family": self.family, "step": self.step,
                "world": self.world, "candidates": self.candidates,
                "ranks": [r.to_json() for r in self.ranks],
                "needed": len(self.needed), "reassemblable": self.reassemblable,
                "check_problems": self.check_problems, "plan_file": self.plan_file,
                "plan_script": self.plan_script, "dest": self.dest, "answer": self.answer()}


# -- finding the step and its candidates ------------------------------------------------------

def family_of(step: Path) -> type[Family]:
    from ckptrescue.checkpoints.families import detecting

    fam = detecting(step)
    if fam is not None:
        return fam
    raise UsageError(f"{step}: not a step directory of a multi-rank family (DeepSpeed "
                     "global_stepN, Megatron iter_N, ...)")


def _listdirs(d: Path) -> list[Path]:
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return []
    out = []
    for n in names:
        p = d / n
        try:
            if stat.S_ISDIR(p.lstat().st_mode):  # no symlink followed
                out.append(p)
        except OSError:
            continue
    return out


def candidates(step: Path) -> list[Path]:
    """Directories that may hold copies of this step's rank files (see the module docstring)."""
    step = Path(os.path.abspath(step))
    found: list[Path] = []
    seen = {step}

    def add(p: Path) -> None:
        if p not in seen and len(found) < MAX_CANDIDATES:
            try:
                if stat.S_ISDIR(p.lstat().st_mode):
                    seen.add(p)
                    found.append(p)
            except OSError:
                return

    for level in (1, 2):
        ancestor = step.parents[level - 1] if len(step.parents) >= level else None
        if ancestor is None or ancestor == Path("/"):
            continue
        rel = step.relative_to(ancestor)
        head, rest = rel.parts[0], Path(*rel.parts[1:]) if len(rel.parts) > 1 else Path()
        for sibling in _listdirs(ancestor):
            if sibling.name == head:
                continue
            if level == 1:
                if step.name in sibling.name and _DECORATION.search(
                        sibling.name.replace(step.name, "")):
                    add(sibling)
            else:
                add(sibling / rest)
                for inner in _listdirs(sibling):  # tmp-checkpoint-3/global_step3.tmp
                    if step.name in inner.name and inner.name != step.name and \
                            _DECORATION.search(inner.name.replace(step.name, "")):
                        add(inner)
    return found


# -- verifying ------------------------------------------------------------------------------

def _sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def _summary(fam: type[Family], member: Member) -> MemberSummary:
    return summarize_in_worker(fam, member, True, fam.allowed_globals)[0]


def _verify(fam: type[Family], layout: StepLayout, member: Member, path: Path) -> tuple[
        str, MemberSummary | None]:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return "not present", None
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}", None
    if stat.S_ISLNK(st.st_mode):
        return "a symlink (not followed)", None
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        return "not a regular file (never opened)", None
    summary = _summary(fam, Member(path, member.rank, member.role))
    if summary.verdict in _BAD:
        bad = [f.code for f in summary.findings if f.severity.rank >= 2]
        return f"{summary.verdict} ({', '.join(sorted(set(bad))[:4])})", None
    if layout.step is not None and summary.step is not None and summary.step != layout.step:
        return f"records step {summary.step}, not {layout.step}", None
    return "verified", summary


def _world_from(fam: type[Family], step: Path, cands: list[Path]) -> StepLayout:
    """The step's layout; when its own metadata is gone, what a candidate copy of the same
    step says must exist."""
    layout = fam.layout(step)
    if layout.world and layout.expected:
        return layout
    for c in cands:
        try:
            other = fam.layout(c)
        except (OSError, ValueError):
            continue
        if other.world and other.expected and (other.step == layout.step
                                               or layout.step is None):
            layout.world = other.world
            layout.expected = [Member(step / m.path.relative_to(c), m.rank, m.role)
                               for m in other.expected]
            break
    return layout


def reassemble(step_dir: str | os.PathLike[str], *, plan: str | os.PathLike[str] | None = None,
               dest: str | os.PathLike[str] | None = None,
               progress: Any = None) -> ReassemblyResult:
    """Whether the step at ``step_dir`` can be completed from verified copies elsewhere; with
    ``plan``, write the plan (JSON + a script that copies into ``dest``)."""
    step = Path(os.path.abspath(step_dir))
    try:
        if not stat.S_ISDIR(step.lstat().st_mode):
            raise UsageError(f"{step}: not a directory (a step directory is)")
    except OSError as exc:
        raise UsageError(f"{step}: cannot read: {exc.strerror or exc}") from exc
    fam = family_of(step)
    cands = candidates(step)
    layout = _world_from(fam, step, cands)
    result = ReassemblyResult(step_dir=str(step), family=fam.name, step=layout.step,
                              world=dict(layout.world), candidates=[str(c) for c in cands])
    present = {m.path: m for m in layout.members}
    wanted = list(layout.expected) or list(layout.members)
    summaries: dict[str, MemberSummary] = {}  # relpath -> the chosen file's summary
    chosen: dict[str, Member] = {}
    rows: dict[str, RankPlan] = {}
    # the present files first: what is intact stays, the rest is looked for elsewhere
    for member in wanted:
        rel = member.path.relative_to(step).as_posix()
        row = rows[rel] = RankPlan(member.rank, member.role, rel, "missing")
        if member.path in present:
            outcome, summary = _verify(fam, layout, member, member.path)
            if summary is not None:
                row.status, row.source = "present", str(member.path)
                summaries[rel], chosen[rel] = summary, member
            else:
                row.status = "damaged"
                row.tried.append(Tried(str(member.path), outcome))

    def conflicts(rel: str, member: Member, summary: MemberSummary) -> str | None:
        """A finding of the family's cross-rank rules that the candidate brings in."""
        trial = {**summaries, rel: summary}
        members = [*(m for r, m in chosen.items() if r != rel), summary.member]
        virtual = StepLayout(fam.name, step, layout.step, members=members, expected=[],
                             world=dict(layout.world))
        for f in fam.check(virtual, list(trial.values())):
            v = verdict_of(f)
            if v is not None and v in _BAD and member.rank in (f.details.get("ranks") or []):
                return f"{f.code}: {f.title}"
        return None

    for i, member in enumerate(wanted):
        if progress is not None:
            progress(i, len(wanted))
        rel = member.path.relative_to(step).as_posix()
        row = rows[rel]
        if row.status == "present":
            continue
        for c in cands:
            path = c / rel
            outcome, summary = _verify(fam, layout, member, path)
            if summary is not None:
                why = conflicts(rel, member, summary)
                if why is not None:
                    outcome, summary = f"fails the family's cross-rank check: {why}", None
            row.tried.append(Tried(str(path), outcome))
            if summary is not None:
                summaries[rel] = summary
                chosen[rel] = Member(path, member.rank, member.role)
                row.status, row.source = "replaced", str(path)
                break
    result.ranks = list(rows.values())
    chosen_list = list(chosen.values())
    summaries_list = list(summaries.values())
    # the family's own cross-rank rules on the set as it would be assembled
    virtual = StepLayout(fam.name, step, layout.step, members=chosen_list, expected=[],
                         world=dict(layout.world))
    for f in fam.check(virtual, summaries_list):
        v = verdict_of(f)
        if v is not None and v in _BAD:
            result.check_problems.append(f"{f.code} {f.title}")
    for r in result.ranks:
        if r.source and (r.status == "replaced" or plan):
            try:
                src = Path(r.source)
                if src.is_file():
                    r.sha256, r.size = _sha256(src)
            except OSError as exc:
                r.status, r.source = "missing", None
                r.tried.append(Tried(str(src), f"unreadable while hashed: {exc}"))
    if plan is not None and result.needed:
        if not result.reassemblable:
            result.record("checkpoint.reassemble", {"step": str(step), "plan": None,
                                                    "answer": result.answer()})
            result.findings_here()
            return result
        write_plan(result, Path(plan), Path(dest) if dest else None)
    result.record("checkpoint.reassemble", {"step": str(step), "plan": result.plan_file,
                                            "answer": result.answer()})
    result.findings_here()
    return result


# -- the plan ---------------------------------------------------------------------------------

def _atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    from ckptrescue.record.atomic import write_atomic

    write_atomic(path, data, mode=mode)


def write_plan(result: ReassemblyResult, plan: Path, dest: Path | None) -> None:
    """PLAN (JSON) and PLAN.sh: copy every chosen file into DEST/<step name>/ (a new
    directory), then check each copy's SHA-256. Nothing is run by the kit."""
    from ckptrescue.datasets.recover_plan import bash_word

    step = Path(result.step_dir)
    target = (dest or plan.parent / f"{step.name}.reassembled") / step.name
    if str(os.path.abspath(target)).startswith(str(step) + os.sep) or \
            os.path.abspath(target) == str(step):
        raise UsageError(f"{target}: inside the step being reassembled; choose --dest elsewhere")
    if target.exists():
        raise UsageError(f"{target}: exists already; the plan builds a new directory")
    for above in target.parents:  # the first that is there must be a folder: a plan whose
        # script's mkdir can only fail is refused now, not when the responder runs it
        if above.exists() or above.is_symlink():
            if not above.is_dir():
                raise UsageError(f"{above}: not a directory; --dest names the folder the "
                                 "step is copied into")
            break
    entries = [r.to_json() for r in result.ranks]
    doc = {"schema": PLAN_SCHEMA, "step_dir": str(step), "family": result.family,
           "step": result.step, "world": result.world, "dest": str(target),
           "ranks": entries}
    script = ["#!/bin/bash", "# ckptrescue reassembly plan: builds a NEW directory holding the "
              "complete step;", "# nothing in the evidence is moved or changed. Review, then "
              "run: bash THIS_FILE", "set -euo pipefail",
              f"dest={bash_word(os.fsencode(str(target)))}",
              'if [ -e "$dest" ]; then echo "$dest exists: refusing" >&2; exit 1; fi',
              'mkdir -p "$dest"']
    sums = []
    for r in result.ranks:
        if not r.source or not r.sha256:
            continue
        rel = bash_word(os.fsencode(r.relpath))
        script.append(f'mkdir -p "$(dirname "$dest"/{rel})"')
        script.append(f'cp --reflink=auto -p -- {bash_word(os.fsencode(r.source))} '
                      f'"$dest"/{rel}')
        sums.append(f"{r.sha256}  {r.relpath}")
    script.append('cd "$dest"')
    script.append("sha256sum -c --strict <<'EOF'")
    script += sums
    script.append("EOF")
    plan.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(plan, (json.dumps(doc, indent=2, ensure_ascii=True) + "\n").encode())
    sh = plan.with_suffix(".sh") if plan.suffix == ".json" else Path(str(plan) + ".sh")
    _atomic_write(sh, ("\n".join(script) + "\n").encode(), 0o755)
    result.plan_file, result.plan_script, result.dest = str(plan), str(sh), str(target)
