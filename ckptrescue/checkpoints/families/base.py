"""The multi-rank checkpoint family contract and its generic probe (pure: bytes in, findings out).

A *family* is what a distributed trainer writes for one step: a directory (or an archive) of
rank files plus metadata, and a pointer to the newest step in the run directory. A family class
says how to find its steps (``claim``), what a step must hold (``layout``: the members present and
the members its own metadata says must exist), what each rank file's own metadata records
(``summarize``), and how ranks must agree (``check``). :meth:`Family.probe` is generic: each
member is probed with its own single-file format from the registry (torch zip, legacy, DCP, ...)
with the family's exact extra globals, summarised at once (memory flat in the number of ranks),
cross-checked, and merged into ONE :class:`CheckpointReport` per step whose tensor names carry
the rank label (``mp_rank_01/module.layers.0.weight``) and whose ``file`` is the rank file, so
``salvage`` and ``locate`` work unchanged.

See ``families/_example.py`` for how to add a family.
"""

from __future__ import annotations

import functools
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, TensorRecord, Verdict, first_detecting
from ckptrescue.checkpoints.base import formats as registry_formats
from ckptrescue.checkpoints.formats.regular_file import not_regular, open_regular
from ckptrescue.checkpoints.formats.tolerant_read import add_unreadable
from ckptrescue.model import Finding, JsonObject

SOURCE = "ckptrescue.checkpoints.families"
# Above this many members, tensor records are kept only for members that are not intact.
KEEP_ALL_TENSORS = 64
# Tensor entries kept per member summary (dtype, shape) for the cross-rank checks.
MAX_SUMMARY_TENSORS = 4096


@dataclass
class Member:
    """One file of a step: where it is, which rank it belongs to, what it holds."""

    path: Path
    rank: str  # "mp_rank_00", "tp01_pp002", "zero_pp_rank_5_mp_rank_00", "rank3"
    role: str  # "model", "optim", "rng", "common", "metadata", "data", "scheduler", ...


@dataclass
class StepLayout:
    """One step as its family lays it out: members present and members that must exist."""

    family: str
    root: Path
    step: int | None
    members: list[Member] = field(default_factory=list)
    expected: list[Member] = field(default_factory=list)
    world: dict[str, int] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)


@dataclass
class MemberSummary:
    """What the cross-rank check keeps of one member after its own probe (small)."""

    member: Member
    verdict: Verdict
    step: int | None = None  # the step/iteration the member's OWN metadata records
    tensors: dict[str, tuple[str | None, tuple[int, ...] | None]] = field(default_factory=dict)
    scalars: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    # name -> "crc32:xxxxxxxx" of the tensor's storage record when the format records one
    checksums: dict[str, str] = field(default_factory=dict)
    # the member's tensor records (dropped by the merge for intact members of large families)
    records: list[TensorRecord] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    format: str = ""


# (family, layout, options) -> the present members' summaries, in any order
SummarySource = Callable[[type["Family"], "StepLayout", ProbeOptions], Iterator["MemberSummary"]]


@dataclass
class Pointer:
    """A run directory's newest-step pointer (``latest``, ``latest_checkpointed_iteration.txt``)."""

    file: Path
    value: str
    step: int | None
    family: str


@functools.cache
def _codes() -> dict[str, tuple[Any, str]]:
    from ckptrescue.codes import all_codes

    return all_codes()


@functools.cache
def _verdicts() -> dict[str, Verdict]:
    """code -> the step verdict it gives (``VERDICT`` in ``codes/family*.py``)."""
    import importlib

    out: dict[str, Verdict] = {}
    for module in ("ckptrescue.codes.family", "ckptrescue.codes.family_more"):
        try:
            table = getattr(importlib.import_module(module), "VERDICT", {})
        except ImportError:
            continue
        out.update({code: Verdict(v) for code, v in table.items()})
    return out


def finding(code: str, title: str, *, evidence: str | Path | None = None,
            ranks: list[str] | tuple[str, ...] = (), tensors: list[str] | tuple[str, ...] = (),
            details: JsonObject | None = None, offset: int | None = None,
            length: int | None = None) -> Finding:
    """A family finding with the catalogue's severity; ``ranks`` go to ``details["ranks"]``."""
    data = dict(details or {})
    if ranks:
        data["ranks"] = list(ranks)
    return Finding(code=code, severity=_codes()[code][0], title=title,
                   evidence=str(evidence) if evidence is not None else None, offset=offset,
                   length=length, source=SOURCE, tensors=tuple(tensors), details=data)


def verdict_of(f: Finding) -> Verdict | None:
    """The step verdict a family finding gives (None: it does not change the verdict)."""
    return _verdicts().get(f.code)


@functools.cache
def _single_file_formats() -> tuple[type, ...]:
    """The registry's single-file formats, once per process (a rank file at a time, thousands
    of times: the registry is not walked again for each)."""
    return tuple(f for f in registry_formats() if not getattr(f, "family", False))


def member_format(path: Path) -> type | None:
    """The single-file format of a rank file, from the registry (never a family)."""
    return first_detecting(_single_file_formats(), path)


def number_in(m: re.Match[str] | None) -> int | None:
    """The number a name's match captured in its first group (a step, an iteration, a rank),
    None without a match."""
    return int(m.group(1)) if m else None


def shorten(items: list[str], n: int = 8) -> str:
    """``a, b, c ... (+N more)``: a bounded list for a finding title."""
    shown = ", ".join(items[:n])
    return shown + (f" ... (+{len(items) - n} more)" if len(items) > n else "")


def _unreadable_report(path: Path, why: str, code: str = "TZ020") -> CheckpointReport:
    from ckptrescue.checkpoints.formats.tensormap import finding as fmt_finding

    report = CheckpointReport(path=str(path), format="unknown", verdict=Verdict.UNREADABLE,
                              files=[str(path)])
    report.findings.append(fmt_finding(code, f"{path.name}: {why}", evidence=str(path)))
    return report


def probe_member_file(path: Path, options: ProbeOptions) -> CheckpointReport:
    """Probe one rank file with its own format (an unknown file is ``unreadable``; a FIFO,
    device or socket is never opened by a format: ``IO002``)."""
    kind = not_regular(path)
    if kind is not None and kind != "a directory":  # a DCP member is its directory
        return _unreadable_report(path, f"{kind} in place of a rank file: not opened", "IO002")
    fmt = member_format(path)
    if fmt is None:
        try:
            size = path.stat().st_size
        except OSError as exc:
            return _unreadable_report(path, f"unreadable: {exc.strerror or exc}")
        return _unreadable_report(path, "empty file (0 bytes)" if size == 0
                                  else "no known checkpoint structure")
    try:
        report: CheckpointReport = fmt.probe(path, options)
    except OSError as exc:
        report = _unreadable_report(path, f"read failed: {exc}")
    return report


def summarize_in_worker(family: type[Family], member: Member, numeric: bool,
                        extra_allowed: frozenset[str],
                        ) -> tuple[MemberSummary, dict[str, list[tuple[int, int]]]]:
    """Process-pool entry: probe and summarise one member; unreadable ranges come back too."""
    from ckptrescue.checkpoints.formats.tolerant_read import collect_unreadable

    options = ProbeOptions(numeric=numeric, extra_allowed=extra_allowed)
    with collect_unreadable() as unreadable:
        report = probe_member_file(member.path, options)
    summary = family.summarize(member, report)
    if unreadable:
        summary.verdict = max(summary.verdict, Verdict.DAMAGED, key=lambda v: v.rank)
    return summary, dict(unreadable)


def _crc_of(report: CheckpointReport, rec: TensorRecord) -> str | None:
    if rec.checksum:
        return rec.checksum
    storages = report.extra.get("storages") or {}
    st = storages.get(rec.storage) if rec.storage is not None else None
    if isinstance(st, dict) and st.get("crc32") is not None:
        return f"crc32:{int(st['crc32']):08x}"
    return None


class Family:
    """Base class of a multi-rank checkpoint family (classmethods only; see module docstring).

    Registered as a checkpoint FORMAT through ``formats/families.py``; ``family = True`` tells
    the registry users (and :func:`member_format`) it is not a single-file format.
    """

    name: ClassVar[str] = "family"
    priority: ClassVar[int] = 5
    family: ClassVar[bool] = True
    allowed_globals: ClassVar[frozenset[str]] = frozenset()
    # the step number in a step root's name, as the pattern's first group (None: not named so)
    step_name: ClassVar[re.Pattern[str] | None] = None

    # -- discovery -----------------------------------------------------------------------------
    @classmethod
    def claim(cls, directory: Path) -> list[Path]:
        """Step roots directly in ``directory`` (``[directory]`` when it is itself a step)."""
        return []

    @classmethod
    def detect(cls, path: Path) -> bool:
        try:
            return path.is_dir() and cls.claim(path) == [path]
        except OSError:
            return False

    @classmethod
    def companions(cls, root: Path) -> list[Path]:
        if root.is_dir():
            return [p for p in root.rglob("*") if p.is_file()]
        return [root]

    @classmethod
    def step_of(cls, root: Path) -> int | None:
        """The step number ``root``'s name carries (``step_name``'s first group), else None."""
        return number_in(cls.step_name.search(root.name)) if cls.step_name else None

    @classmethod
    def pointers(cls, run_dir: Path) -> list[Pointer]:
        return []

    @classmethod
    def pointer_value(cls, pointer: Pointer, root: Path) -> str:
        """What ``pointer.file`` must hold to name the step at ``root`` (default: its name)."""
        return root.name

    # -- per step ------------------------------------------------------------------------------
    @classmethod
    def layout(cls, root: Path) -> StepLayout:
        raise NotImplementedError

    @classmethod
    def summarize(cls, member: Member, report: CheckpointReport) -> MemberSummary:
        """Default: verdict, tensor dtype/shape map, record checksums, the report's records."""
        tensors: dict[str, tuple[str | None, tuple[int, ...] | None]] = {}
        checksums: dict[str, str] = {}
        for rec in report.tensors[:MAX_SUMMARY_TENSORS]:
            tensors[rec.name] = (rec.dtype, rec.shape)
            crc = _crc_of(report, rec)
            if crc is not None:
                checksums[rec.name] = crc
        return MemberSummary(member=member, verdict=report.verdict, tensors=tensors,
                             findings=list(report.findings), checksums=checksums,
                             records=list(report.tensors), files=list(report.files),
                             format=report.format,
                             scalars={"unsafe_globals": report.extra.get("unsafe_globals", []),
                                      "member_lookups": report.extra.get("member_lookups", [])})

    @classmethod
    def check(cls, layout: StepLayout, summaries: list[MemberSummary]) -> list[Finding]:
        """Cross-rank rules. Default: each member's own step agrees with the step's, and a
        member that is not intact is named (FM007)."""
        out: list[Finding] = []
        if layout.step is not None:
            other = [s for s in summaries if s.step is not None and s.step != layout.step]
            for s in other:
                out.append(finding(
                    "FM002", f"{s.member.rank} ({s.member.path.name}) records step {s.step}, "
                    f"the step is {layout.step}: a rank file from another step",
                    evidence=s.member.path, ranks=[s.member.rank],
                    details={"recorded": s.step, "expected": layout.step}))
        for s in summaries:
            if s.verdict is not Verdict.INTACT and s.verdict is not Verdict.SUSPECT:
                out.append(finding(
                    "FM007", f"{s.member.rank} ({s.member.path.name}) is {s.verdict}: the "
                    "step cannot resume from it", evidence=s.member.path,
                    ranks=[s.member.rank], details={"verdict": str(s.verdict)}))
        return out

    # -- the generic probe ---------------------------------------------------------------------
    @classmethod
    def iter_summaries(cls, layout: StepLayout, options: ProbeOptions):  # noqa: ANN206
        """Yield each present member's summary (in a process pool when ``options.jobs > 1``)."""
        extra = cls.allowed_globals | options.extra_allowed
        members = layout.members
        if options.jobs <= 1 or len(members) <= 1:
            for m in members:
                summary, unreadable = summarize_in_worker(cls, m, options.numeric, extra)
                add_unreadable(unreadable)
                yield summary
            return
        from ckptrescue.checkpoints.families import workers

        pending: set[Any] = set()
        queue = iter(members)
        limit = max(2, options.jobs * 2)  # bounded in-flight futures: memory flat in ranks
        # workers die with the kit, ignore Ctrl-C, and are killed when the step is cancelled
        with workers.pool(options.jobs) as pool:
            while True:
                for m in queue:
                    pending.add(pool.submit(summarize_in_worker, cls, m, options.numeric,
                                            extra))
                    if len(pending) >= limit:
                        break
                if not pending:
                    break
                done, pending = workers.completed(pending, options.cancel)
                for fut in done:
                    summary, unreadable = fut.result()
                    add_unreadable(unreadable)
                    yield summary

    @classmethod
    def probe(cls, root: Path, options: ProbeOptions) -> CheckpointReport:
        """Layout -> probe each member -> summarise -> check -> ONE report for the step."""
        return cls.probe_with(root, options, None)

    @classmethod
    def probe_with(cls, root: Path, options: ProbeOptions,
                   source: SummarySource | None) -> CheckpointReport:
        """:meth:`probe` with the member summaries from ``source(family, layout, options)``
        (``probes/cluster.py``: members probed on Dask workers); None: :meth:`iter_summaries`.
        The merge does not depend on the order summaries arrive in: tensors and findings are
        put in member order, so jobs=N and a cluster give the report a serial run gives."""
        from ckptrescue.checkpoints.formats import tensormap

        layout = cls.layout(root)
        report = CheckpointReport(path=str(root), format=cls.name, verdict=Verdict.INTACT)
        present = {m.path for m in layout.members}
        shared = {label for label, n in Counter(m.rank for m in layout.members).items()
                  if n > 1}
        big = len(layout.members) > KEEP_ALL_TENSORS
        order = {m.path: i for i, m in enumerate(layout.members)}
        summaries: list[MemberSummary] = []
        verdicts: list[Verdict] = []
        kept: dict[int, tuple[list[TensorRecord], list[Finding]]] = {}
        elided = 0
        stream = source(cls, layout, options) if source is not None else \
            cls.iter_summaries(layout, options)
        for s in stream:
            m = s.member
            prefix = f"{m.rank}/{m.role}/" if m.rank in shared else f"{m.rank}/"
            recs: list[TensorRecord] = []
            verdicts.append(s.verdict)
            if big and s.verdict is Verdict.INTACT:
                elided += len(s.records)
            else:
                for rec in s.records:
                    rec.name = prefix + rec.name
                    if rec.file is None:
                        rec.file = str(m.path)
                    recs.append(rec)
            if recs or s.findings:
                kept[order.get(m.path, len(order))] = (recs, s.findings)
            s.records = []  # the summary stays small
            s.findings = [f for f in s.findings if f.code.startswith("FM")]
            summaries.append(s)
            if options.progress is not None:
                options.progress(str(root), m.rank, str(s.verdict))
        for i in sorted(kept):
            recs, member_findings = kept[i]
            report.tensors.extend(recs)
            report.findings.extend(member_findings)
        del kept
        summaries.sort(key=lambda s: order.get(s.member.path, 0))
        family_findings = list(layout.findings)
        missing = [m for m in layout.expected if m.path not in present and not m.path.exists()]
        if missing:
            family_findings.append(finding(
                "FM001", f"{len(missing)} rank file(s) missing for the recorded world size "
                f"{layout.world or '?'}: " + shorten([f"{m.rank} ({m.path.name})"
                                                      for m in missing]),
                evidence=root, ranks=sorted({m.rank for m in missing}),
                details={"missing": [str(m.path) for m in missing[:256]],
                         "count": len(missing)}))
        family_findings.extend(cls.check(layout, summaries))
        report.findings.extend(family_findings)
        verdicts.extend(v for v in (verdict_of(f) for f in family_findings) if v is not None)
        files = [str(m.path) for m in layout.members]
        if root.is_dir():
            files += [str(p) for p in cls.companions(root) if p not in present]
        report.files = sorted(set(files))
        ranks: dict[str, str] = {}
        for s in summaries:
            prev = ranks.get(s.member.rank)
            if prev is None or Verdict(prev).rank < s.verdict.rank:
                ranks[s.member.rank] = str(s.verdict)
        for m in missing:
            ranks[m.rank] = "missing"
        bad = {r for r, v in ranks.items() if v != str(Verdict.INTACT)}
        for f in family_findings:
            if verdict_of(f) is not None:
                bad.update(f.details.get("ranks", []))
        report.extra["family"] = {
            "family": cls.name, "step": layout.step, "world": layout.world, "ranks": ranks,
            "bad_ranks": sorted(bad), "members": len(layout.members),
            "expected": len(layout.expected), "tensors_elided": elided,
            "steps_recorded": sorted({s.step for s in summaries if s.step is not None}),
        }
        unsafe = sorted({g for s in summaries for g in s.scalars.get("unsafe_globals", [])})
        report.extra["unsafe_globals"] = unsafe
        lookups = sorted({m for s in summaries for m in s.scalars.get("member_lookups", [])})
        if lookups:  # (a DCP member's enums by name: its sandboxed load admits getattr)
            report.extra["member_lookups"] = lookups
        tensormap.finalize(report, verdicts)
        return report

    @classmethod
    def iter_verified_tensors(cls, path: Path, report: CheckpointReport):  # noqa: ANN206
        """Salvage: tensors whose bytes verified in their rank file."""
        from ckptrescue.checkpoints.formats.tensormap import salvageable

        return salvageable(report)


def read_text(path: Path, limit: int = 4096) -> str | None:
    """A small text file's content (pointer files), None when unreadable."""
    try:
        with open_regular(path) as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def text_pointer(path: Path, family: str, step: Callable[[str], int | None]) -> list[Pointer]:
    """The run's pointer file at ``path`` holding the newest step as text (stripped; ``step``
    reads its number), [] when there is no such file."""
    if not is_file(path):
        return []
    value = (read_text(path) or "").strip()
    return [Pointer(path, value, step(value), family)]


def is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def listdir(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def claim_steps(directory: Path, is_step: Callable[[Path], bool], *,
                links: bool = True) -> list[Path]:
    """A family's ``claim``: ``[directory]`` when ``is_step`` takes it, else the entries directly
    in it that ``is_step`` takes, in name order (``links=False``: none reached through a symbolic
    link)."""
    if is_step(directory):
        return [directory]
    return [directory / n for n in listdir(directory)
            if (links or not (directory / n).is_symlink()) and is_step(directory / n)]


class DirectoryStepFamily(Family):
    """A family whose step is one directory that :meth:`is_step` recognises on its own (FSDP's
    DCP step, Orbax's step): ``detect`` is ``is_step`` (False when it cannot be read), ``claim``
    the directory itself or the steps directly in it."""

    @classmethod
    def is_step(cls, path: Path) -> bool:
        raise NotImplementedError

    @classmethod
    def detect(cls, path: Path) -> bool:
        try:
            return cls.is_step(path)
        except OSError:
            return False

    @classmethod
    def claim(cls, directory: Path) -> list[Path]:
        return claim_steps(directory, cls.detect)
