"""Node-local replicas against the persistent copy of a step, tensor by tensor, without loading.

Fault-tolerant training keeps node-local copies of each rank's checkpoint beside the persistent
one (and fetches a lost node's copy from a peer), and nothing checks that a replica holds what
the persistent copy holds. This compares every rank file a replica holds with the persistent
file of the same name: each tensor by name, dtype, shape and CRC-32 of its bytes — the CRC the
format records and the probe verified (torch zip records), else computed over the tensor's bytes
(safetensors, legacy torch) — never loading anything.

Per rank file it says which copies are intact and agree, which replica of which rank differs
(and in which tensors), which are damaged, and which copy to resume from: the persistent file
when it is intact; else the replica that is intact and agreed on by the most copies (a tie
between differing intact replicas is named, not decided).
"""

from __future__ import annotations

import os
import stat
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.checkpoints.base import ProbeOptions, Verdict
from ckptrescue.checkpoints.families.base import Family, Member, probe_member_file
from ckptrescue.checkpoints.formats.chunked import iter_chunks
from ckptrescue.errors import UsageError
from ckptrescue.model import Finding, JsonObject, Recorded, Severity

CHUNK = 1 << 20
MAX_FILES = 100_000
MAX_LISTED = 50  # differing tensors named per replica file
_GOOD = (Verdict.INTACT, Verdict.SUSPECT)

Signature = dict[str, tuple[str | None, tuple[int, ...] | None, str | None]]


@dataclass
class Copy:
    where: str  # "persistent" or the replica directory
    path: str
    verdict: str = ""
    tensors: int = 0
    status: str = ""  # same, differs, damaged, unreadable (replicas); intact, damaged (persistent)
    differing: list[str] = field(default_factory=list)
    differing_total: int = 0
    only_here: list[str] = field(default_factory=list)
    only_persistent: list[str] = field(default_factory=list)
    signature: Signature = field(default_factory=dict, repr=False)

    def to_json(self) -> JsonObject:
        return {"where": self.where, "path": self.path, "verdict": self.verdict,
                "tensors": self.tensors, "status": self.status,
                "differing": self.differing[:MAX_LISTED], "differing_total": self.differing_total,
                "only_here": self.only_here[:MAX_LISTED],
                "only_persistent": self.only_persistent[:MAX_LISTED]}


@dataclass
class RankFile:
    relpath: str
    persistent: Copy | None
    replicas: list[Copy] = field(default_factory=list)
    resume_from: str | None = None
    decision: str = ""

    def to_json(self) -> JsonObject:
        return {"relpath": self.relpath,
                "persistent": self.persistent.to_json() if self.persistent else None,
                "replicas": [c.to_json() for c in self.replicas],
                "resume_from": self.resume_from, "decision": self.decision}


@dataclass
class ReplicaResult(Recorded):
    persistent: str
    replicas: list[str]
    files: list[RankFile] = field(default_factory=list)
    replica_only: list[str] = field(default_factory=list)  # files no persistent copy has

    def counts(self) -> dict[str, int]:
        c: Counter[str] = Counter()
        for f in self.files:
            for r in f.replicas:
                c[r.status] += 1
        return dict(c)

    @property
    def ok(self) -> bool:
        return all(r.status == "same" for f in self.files for r in f.replicas) and all(
            f.persistent is not None and f.persistent.status == "intact" for f in self.files)

    def answer(self) -> str:
        c = self.counts()
        held = sum(len(f.replicas) for f in self.files)
        text = (f"{held} replica file(s) compared with {self.persistent}: "
                f"{c.get('same', 0)} identical")
        bad = [(f, r) for f in self.files for r in f.replicas if r.status != "same"]
        if bad:
            text += "; differ: " + ", ".join(
                f"{Path(r.where).name}/{f.relpath} ({r.status}"
                + (f", {r.differing_total} tensor(s)" if r.differing_total else "") + ")"
                for f, r in bad[:4]) + (" ..." if len(bad) > 4 else "")
        elsewhere = [f for f in self.files if f.resume_from and f.persistent is not None
                     and f.resume_from != f.persistent.path]
        undecided = [f for f in self.files if f.resume_from is None]
        if undecided:
            text += f"; no copy to resume from for {', '.join(f.relpath for f in undecided[:3])}"
        elif elsewhere:
            text += "; resume from the persistent copy except " + ", ".join(
                f"{f.relpath} from {f.resume_from}" for f in elsewhere[:3])
        else:
            text += "; resume from the persistent copy"
        return text

    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        src = "resume.replicas"
        for f in self.files:
            for r in f.replicas:
                if r.status == "differs":
                    out.append(Finding(
                        "RP001", Severity.ERROR, f"replica {r.path} differs from the persistent "
                        f"{f.relpath} in {r.differing_total} tensor(s): "
                        + ", ".join(r.differing[:8]), evidence=r.path, source=src,
                        tensors=tuple(r.differing[:MAX_LISTED]),
                        details={"persistent": f.persistent.path if f.persistent else None,
                                 "only_here": r.only_here[:MAX_LISTED],
                                 "only_persistent": r.only_persistent[:MAX_LISTED]}))
                elif r.status in ("damaged", "unreadable"):
                    out.append(Finding("RP002", Severity.ERROR, f"replica {r.path} is "
                                       f"{r.verdict or r.status}", evidence=r.path, source=src))
            if f.persistent is not None and f.persistent.status != "intact":
                out.append(Finding("RP003", Severity.ERROR if f.resume_from is None
                                   else Severity.WARNING,
                                   f"the persistent {f.relpath} is {f.persistent.verdict}; "
                                   + (f"resume it from {f.resume_from}" if f.resume_from
                                      else "no replica can stand in: " + f.decision),
                                   evidence=f.persistent.path, source=src,
                                   details={"resume_from": f.resume_from}))
        for rel in self.replica_only[:50]:
            out.append(Finding("RP004", Severity.INFO, f"a replica holds {rel}, which the "
                               "persistent copy does not", evidence=rel, source=src))
        return out

    def to_json(self) -> JsonObject:
        return {"persistent": self.persistent, "replicas": self.replicas,
                "files": [f.to_json() for f in self.files], "counts": self.counts(),
                "replica_only": self.replica_only[:200], "answer": self.answer()}


# -- reading one copy -------------------------------------------------------------------------

def _crc_range(path: str, offset: int, length: int) -> str | None:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            crc = 0
            left = length
            for block in iter_chunks(fh, length, CHUNK):
                crc = zlib.crc32(block, crc)
                left -= len(block)
            if left > 0:
                return None
    except OSError:
        return None
    return f"crc32:{crc:08x}"


def read_copy(path: Path, where: str, family: type[Family] = Family) -> Copy:
    """One copy's tensors: name -> (dtype, shape, CRC), from the probe (nothing loaded), with
    the step family's exact extra globals (a DeepSpeed optimizer partition names its loss
    scaler class)."""
    copy = Copy(where=where, path=str(path))
    try:
        st = path.lstat()
    except OSError as exc:
        copy.status, copy.verdict = "unreadable", exc.strerror or str(exc)
        return copy
    if not stat.S_ISREG(st.st_mode):
        copy.status, copy.verdict = "unreadable", "not a regular file (never opened)"
        return copy
    report = probe_member_file(path, ProbeOptions(numeric=False,
                                                  extra_allowed=family.allowed_globals))
    copy.verdict = str(report.verdict)
    summary = Family.summarize(Member(path, "", ""), report)
    for rec in report.tensors:
        crc = summary.checksums.get(rec.name)
        if crc is None and rec.file and rec.offset is not None and rec.length is not None:
            crc = _crc_range(rec.file, rec.offset, rec.length)
        copy.signature[rec.name] = (rec.dtype, tuple(rec.shape) if rec.shape is not None
                                    else None, crc)
    copy.tensors = len(copy.signature)
    copy.status = "intact" if report.verdict in _GOOD else "damaged"
    return copy


def _compare(replica: Copy, persistent: Copy) -> None:
    if replica.status in ("unreadable", "damaged"):
        return
    mine, theirs = replica.signature, persistent.signature
    replica.only_here = sorted(set(mine) - set(theirs))
    replica.only_persistent = sorted(set(theirs) - set(mine))
    diff = sorted(n for n in set(mine) & set(theirs) if mine[n] != theirs[n])
    replica.differing, replica.differing_total = diff[:MAX_LISTED], len(diff)
    same = not diff and not replica.only_here and not replica.only_persistent
    replica.status = "same" if same else "differs"


def _decide(f: RankFile) -> None:
    p = f.persistent
    if p is not None and p.status == "intact":
        f.resume_from, f.decision = p.path, "the persistent copy is intact"
        return
    good = [r for r in f.replicas if r.status not in ("damaged", "unreadable")
            and r.verdict in ("intact", "suspect")]
    if not good:
        f.decision = "no intact copy"
        return
    groups: dict[tuple[Any, ...], list[Copy]] = {}
    for r in good:
        key = tuple(sorted(r.signature.items()))
        groups.setdefault(key, []).append(r)
    ranked = sorted(groups.values(), key=len, reverse=True)
    if len(ranked) > 1 and len(ranked[0]) == len(ranked[1]):
        f.decision = ("intact replicas disagree: " + " vs ".join(
            g[0].path for g in ranked[:2]) + " (not decided)")
        return
    f.resume_from = ranked[0][0].path
    f.decision = f"{len(ranked[0])} intact replica(s) agree"


def _family(step: Path) -> type[Family]:
    """The step's multi-rank family (its exact globals apply to its rank files), else the
    plain base (no extra globals)."""
    from ckptrescue.checkpoints.families import detecting

    return detecting(step) or Family


def _rank_files(root: Path) -> dict[str, Path]:
    """Every regular file under ``root`` by its path relative to it (no symlink followed)."""
    out: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            out[p.relative_to(root).as_posix()] = p
            if len(out) >= MAX_FILES:
                return out
    return out


def compare_replicas(persistent: str | os.PathLike[str],
                     replicas: list[str | os.PathLike[str]], *, progress: Any = None
                     ) -> ReplicaResult:
    """Compare each replica directory's rank files with the persistent step's."""
    pers = Path(persistent)
    if not pers.is_dir():
        raise UsageError(f"{pers}: not a directory (the persistent copy of a step)")
    if not replicas:
        raise UsageError("name at least one replica directory (--replica DIR)")
    result = ReplicaResult(persistent=str(pers), replicas=[str(r) for r in replicas])
    family = _family(pers)
    theirs = _rank_files(pers)
    held: dict[str, list[tuple[str, Path]]] = {}
    for r in replicas:
        rp = Path(r)
        if not rp.is_dir():
            raise UsageError(f"{rp}: not a directory (a replica of the step)")
        for rel, path in _rank_files(rp).items():
            if rel in theirs:
                held.setdefault(rel, []).append((str(rp), path))
            else:
                result.replica_only.append(f"{rp}/{rel}")
    for i, (rel, copies) in enumerate(sorted(held.items())):
        if progress is not None:
            progress(i, len(held))
        f = RankFile(relpath=rel, persistent=read_copy(theirs[rel], "persistent", family))
        for where, path in copies:
            copy = read_copy(path, where, family)
            if copy.status == "intact":
                # a damaged persistent file still records what it should hold (its CRCs)
                if f.persistent is not None and f.persistent.signature:
                    _compare(copy, f.persistent)
                else:
                    copy.status = "differs"
            f.replicas.append(copy)
        _decide(f)
        result.files.append(f)
    result.record("checkpoint.replicas", {"persistent": str(pers), "replicas": len(replicas),
                                          "answer": result.answer()})
    result.findings_here()
    return result
