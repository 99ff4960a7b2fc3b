"""Salvage the intact tensors of a damaged checkpoint into a new safetensors file.

``salvage(checkpoint, out_dir)`` probes the checkpoint (statically, never executing it), asks
its format which tensors verify (optional format method ``iter_verified_tensors(path, report)``
yielding ``(TensorRecord, reason_or_None)``; formats without it get the generic rule: tensors
whose status is ok/unverified/suspect and whose bytes are located), and writes, streaming:

* ``OUT_DIR/<name>.salvaged.safetensors`` — every recovered tensor, C-contiguous, with
  ``__metadata__`` naming the source and the tensors filled from a reference;
* ``OUT_DIR/salvage.json`` — ``{"recovered": [...], "lost": [{"name", "reason"}],
  "filled": [...]}`` plus the source's verdict.

A multi-rank family step (DeepSpeed ``global_stepN/``, Megatron ``iter_N/``, ...) is salvaged rank
by rank into ``OUT_DIR/<rank label>/`` with one ``salvage.json`` for the step, and ``fill_from``
is then an earlier complete step of the same family (``probes/family_salvage.py``).

``fill_from`` takes lost tensors (same shape and dtype) from a reference checkpoint. The output
directory must not be the input's directory or inside it (unless ``allow_next_to_input``) and
must not be on a read-only mount (evidence is mounted read-only).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ckptrescue.checkpoints.base import CheckpointReport, TensorRecord, Verdict
from ckptrescue.checkpoints.formats import dtypes, view_bits
from ckptrescue.checkpoints.formats.tensormap import finding
from ckptrescue.effects import beneath
from ckptrescue.effects.output_dirs import refuse_aliasing
from ckptrescue.errors import RefusedError, UsageError
from ckptrescue.model import ArtifactData, Finding, JsonObject, Recorded

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

CHUNK = 1 << 20
NOT_STORABLE = "has no safetensors equivalent"


@dataclass
class SalvageResult(Recorded):
    """What was recovered, lost and filled, and where it was written. The audit record
    (``checkpoint.salvaged`` naming the stored ``salvage.json``) and the SV findings are
    carried for the engine to record (:class:`~ckptrescue.model.Recorded`)."""

    source: str
    source_verdict: str
    output: str | None
    recovered: list[str] = field(default_factory=list)
    lost: list[dict[str, str]] = field(default_factory=list)
    filled: list[str] = field(default_factory=list)
    fill_from: str | None = None
    structure_from: str | None = None  # tensor map rebuilt from this sibling checkpoint
    # numerically suspect in the probe: written apart (``suspect_output``), never "recovered"
    suspect: list[dict[str, Any]] = field(default_factory=list)
    suspect_output: str | None = None
    # verified, but of a dtype safetensors cannot hold (a TensorFlow checkpoint's object graph,
    # string tensors): left out of the file and out of ``lost`` - nothing was lost
    not_storable: list[dict[str, str]] = field(default_factory=list)
    torch_save_output: str | None = None  # --torch-save: the original key structure
    # a loss no tensor name stands for (a truncated or incomplete source whose lost tensors
    # cannot all be named, e.g. HDF5 groups past the cut)
    unaccounted: str | None = None
    findings: list[Finding] = field(default_factory=list, compare=False, repr=False)

    @property
    def mixed(self) -> bool:
        """Some tensors came from the ``fill_from`` reference (another step of the run)."""
        return bool(self.filled)

    @property
    def clean(self) -> bool:
        """Every tensor came back verified from the checkpoint itself: something recovered,
        nothing lost, suspect or filled from another step (a mixed result is never clean)."""
        return bool(self.recovered) and not self.lost and not self.suspect \
            and not self.filled and self.unaccounted is None

    def sources(self) -> dict[str, list[str]]:
        """Which tensors came from which checkpoint: ``{source: [...], fill_from: [...]}``."""
        out = {self.source: list(self.recovered)}
        if self.filled:
            out[self.fill_from or "fill_from"] = list(self.filled)
        return out

    def to_json(self) -> JsonObject:
        return {"source": self.source, "source_verdict": self.source_verdict,
                "output": self.output, "recovered": self.recovered, "lost": self.lost,
                "filled": self.filled, "fill_from": self.fill_from,
                "structure_from": self.structure_from, "suspect": self.suspect,
                "suspect_output": self.suspect_output, "unaccounted": self.unaccounted,
                "not_storable": self.not_storable, "mixed": self.mixed,
                "sources": self.sources(), "torch_save_output": self.torch_save_output,
                "clean": self.clean}


def _inside(child: Path, parent: Path) -> bool:
    try:
        child.relative_to(parent)
    except ValueError:
        return False
    return True


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_out_dir(checkpoint: Path, out_dir: Path, *, allow_next_to_input: bool) -> None:
    """Refuse output locations that could touch evidence."""
    src = checkpoint.resolve()
    src_dir = src if src.is_dir() else src.parent
    out = out_dir.resolve()
    if not allow_next_to_input and _inside(out, src_dir):
        raise RefusedError(f"{out_dir}: output would be written next to (or inside) the "
                           f"input's directory {src_dir}",
                           hint="choose a recovery location on other media, or pass "
                           "--allow-next-to-input")
    anc = _existing_ancestor(out)
    if os.statvfs(anc).f_flag & os.ST_RDONLY:
        raise RefusedError(f"{out_dir}: on a read-only mount (evidence?); refusing to write")


def _rebuild_map(report: CheckpointReport, ref_path: Path) -> list[TensorRecord] | str:
    """Names/dtypes/shapes from a sibling checkpoint whose storages have the same keys and
    sizes; bytes (and their CRC status) from the damaged one."""
    from ckptrescue.checkpoints.base import ProbeOptions
    from ckptrescue.checkpoints.probes.checkpoints import discover, probe_one

    found = discover([ref_path])
    if len(found) != 1:
        return "the reference must be exactly one checkpoint"
    ref = probe_one(*found[0], ProbeOptions(numeric=False))
    mine, theirs = report.extra["storages"], ref.extra.get("storages") or {}
    if not theirs or not mine or not set(mine) <= set(theirs):
        return "the reference's storage records differ (not a sibling of the same run)"
    for key, st in theirs.items():
        if st["length"] is not None and mine[key]["length"] is not None and \
                st["length"] != mine[key]["length"]:
            return f"storage {key} is {mine[key]['length']} bytes, {st['length']} in the reference"
    out: list[TensorRecord] = []
    for t in ref.tensors:
        if t.storage not in theirs or t.offset is None or theirs[t.storage]["offset"] is None:
            continue
        if t.storage not in mine:
            out.append(TensorRecord(name=t.name, dtype=t.dtype, shape=t.shape,
                                    storage=t.storage, status="missing",
                                    reasons=[f"storage record {t.storage} lost"]))
            continue
        st = mine[t.storage]
        rel = t.offset - theirs[t.storage]["offset"]
        rec = TensorRecord(name=t.name, dtype=t.dtype, shape=t.shape, file=st["file"],
                           offset=st["offset"] + rel if st["offset"] is not None else None,
                           length=t.length, storage=t.storage, status=st["status"],
                           reasons=[f"storage {t.storage} {st['status']}",
                                    "name/shape from the reference"])
        out.append(rec)
    report.extra["strides"] = ref.extra.get("strides", {})
    return out


def _default_verified(report: CheckpointReport) -> Iterator[tuple[TensorRecord, str | None]]:
    for rec in report.tensors:
        ok = rec.status in ("ok", "unverified", "suspect") and rec.offset is not None \
            and rec.shape is not None
        yield rec, None if ok else ("; ".join(rec.reasons) or rec.status)


@dataclass
class _Planned:
    name: str
    rec: TensorRecord
    code: str
    nbytes: int
    strides: list[int] | None
    filled: bool = False
    big_endian: bool = False
    reader: Any = None  # the format's read_tensor_bytes(path, report, rec), when it has one
    root: Path | None = None
    report: CheckpointReport | None = None


def _plan(rec: TensorRecord, strides: dict[str, list[int]], *,
          has_reader: bool = False, storable: bool = True) -> _Planned | str:
    """How to copy ``rec``'s values, or why not (``storable=False``: also a dtype safetensors
    has no code for, to hash its bytes)."""
    info = dtypes.lookup(rec.dtype)
    if info is None or (storable and info.safetensors is None):
        return f"dtype {rec.dtype} {NOT_STORABLE}"
    if rec.shape is None or (not has_reader and (rec.offset is None or rec.file is None)):
        return "byte location unknown"
    why = view_bits.unresolvable(rec.dtype, view_bits.bits_of(rec.reasons))
    if why:
        return why
    numel = 1
    for s in rec.shape:
        numel *= s
    return _Planned(rec.name, rec, info.safetensors or "", numel * info.itemsize,
                    strides.get(rec.name))


def _copy(out: BinaryIO, p: _Planned) -> None:
    """Write the tensor's C-contiguous little-endian bytes: the values the loaded tensor holds
    (a negative or conjugate view resolved, ``view_bits``)."""
    rec = p.rec
    bits = view_bits.bits_of(rec.reasons)
    info = dtypes.lookup(rec.dtype)
    if bits and info is not None:
        out = view_bits.Resolving(out, info, bits)  # type: ignore[assignment]
    if p.big_endian:
        _copy_swapped(out, p)
        return
    if p.reader is not None:
        written = 0
        for block in p.reader(p.root, p.report, rec):
            out.write(block)
            written += len(block)
        if written != p.nbytes:
            raise UsageError(f"{rec.name}: format reader gave {written} of {p.nbytes} bytes")
        return
    assert rec.file is not None and rec.offset is not None
    with open(rec.file, "rb") as src:
        if p.strides is None:
            done = 0
            while done < p.nbytes:
                data = os.pread(src.fileno(), min(CHUNK, p.nbytes - done), rec.offset + done)
                if not data:
                    raise UsageError(f"{rec.file}: short read at {rec.offset + done}")
                out.write(data)
                done += len(data)
            return
        import numpy as np

        info = dtypes.lookup(rec.dtype)
        assert info is not None and rec.length is not None and rec.shape is not None
        raw = os.pread(src.fileno(), rec.length, rec.offset)
        base = np.frombuffer(raw, dtype=f"u{info.itemsize}" if info.itemsize in (1, 2, 4, 8)
                             else "u1")
        view = np.lib.stride_tricks.as_strided(
            base, shape=rec.shape, strides=[s * base.itemsize for s in p.strides])
        out.write(np.ascontiguousarray(view).tobytes())


def _copy_swapped(out: BinaryIO, p: _Planned) -> None:
    """Big-endian source (torch ``byteorder`` = big): byte-swap each element while copying."""
    import numpy as np

    rec = p.rec
    info = dtypes.lookup(rec.dtype)
    assert info is not None and rec.file is not None and rec.offset is not None
    size = info.itemsize
    if info.kind == "complex":  # two floats per element, each swapped on its own
        size //= 2
    code = {1: "u1", 2: "u2", 4: "u4", 8: "u8"}[size]
    with open(rec.file, "rb") as src:
        if p.strides is None:
            done = 0
            step = CHUNK - CHUNK % info.itemsize
            while done < p.nbytes:
                data = os.pread(src.fileno(), min(step, p.nbytes - done), rec.offset + done)
                if not data:
                    raise UsageError(f"{rec.file}: short read at {rec.offset + done}")
                out.write(np.frombuffer(data, dtype=">" + code).astype("<" + code).tobytes())
                done += len(data)
            return
        assert rec.length is not None and rec.shape is not None
        raw = os.pread(src.fileno(), rec.length, rec.offset)
        base = np.frombuffer(raw, dtype=">" + code)
        per = info.itemsize // size
        view = np.lib.stride_tricks.as_strided(
            base, shape=(*rec.shape, per), strides=[s * info.itemsize for s in p.strides]
            + [size])
        out.write(np.ascontiguousarray(view).astype("<" + code).tobytes())


def salvage(checkpoint: Path, out_dir: Path, *, fill_from: Path | None = None,
            case: Case | None = None, allow_next_to_input: bool = False,
            torch_save: bool = False) -> SalvageResult:
    """Write the verified tensors of ``checkpoint`` into ``out_dir`` (see module docstring).

    The phases: where it may write (:func:`_checked_target`), the probe and the tensor map
    (:func:`_probed`), what can be written (:func:`_plan_tensors`), what the reference
    fills (:func:`_fill`), then the files and the report (:func:`_write_salvage`)."""
    from ckptrescue.checkpoints.base import ProbeOptions
    from ckptrescue.checkpoints.probes.checkpoints import discover, probe_one

    checkpoint, out_dir = _checked_target(checkpoint, out_dir, case,
                                          allow_next_to_input=allow_next_to_input)
    if fill_from is not None:  # a reference that is not there is said now, not only when a
        # tensor needed filling (it passed unnoticed on an intact checkpoint)
        discover([Path(fill_from)])
    found = discover([checkpoint])
    if len(found) != 1:
        raise UsageError(f"{checkpoint}: salvage takes exactly one checkpoint "
                         f"(found {len(found)})")
    fmt, root = found[0]
    if getattr(fmt, "family", False) and not getattr(fmt, "single_file", False):
        # a multi-rank family step: per rank, fill from the same rank of an earlier step
        from ckptrescue.checkpoints.probes.family_salvage import salvage_step

        return salvage_step(fmt, root, out_dir, fill_from=fill_from, case=case)
    # with the numeric scan: a tensor suspect in ``probe`` is suspect here (never laundered)
    report = probe_one(fmt, root, ProbeOptions(numeric=True))
    if report.verdict is Verdict.UNREADABLE or fmt is None:
        raise UsageError(f"{checkpoint}: cannot be identified; nothing to salvage")
    result = SalvageResult(source=str(checkpoint), source_verdict=str(report.verdict),
                           output=None, fill_from=str(fill_from) if fill_from else None)
    if not report.tensors and report.extra.get("storages"):
        _rebuild_tensor_map(checkpoint, report, result, fill_from)
    planned, lost = _plan_tensors(fmt, root, report, result)
    if fill_from is not None and lost:
        planned += _fill(Path(fill_from).absolute(), lost, result)
    return _write_salvage(checkpoint, out_dir, fmt, root, report, result, planned, lost,
                          torch_save=torch_save)


def _checked_target(checkpoint: Path, out_dir: Path, case: Case | None, *,
                    allow_next_to_input: bool) -> tuple[Path, Path]:
    """The checkpoint (a TensorFlow one by its prefix) and the output directory, absolute;
    refused when the directory could touch evidence or holds an earlier salvage."""
    checkpoint = Path(checkpoint).absolute()
    if not checkpoint.exists() and Path(f"{checkpoint}.index").exists():
        checkpoint = Path(f"{checkpoint}.index")  # a TensorFlow checkpoint named by its prefix
    if not checkpoint.exists():
        raise UsageError(f"{checkpoint}: no such checkpoint")
    out_dir = Path(out_dir).absolute()
    check_out_dir(checkpoint, out_dir, allow_next_to_input=allow_next_to_input)
    if (out_dir / "salvage.json").exists():
        raise UsageError(f"{out_dir}: already holds a salvage.json; salvage into a new directory "
                         "so no earlier salvage report is overwritten")
    if case is not None:  # by identity and place, through symlinks, bind mounts, overlays
        refuse_aliasing(out_dir, evidence=case.evidence_paths(),
                        protected=case.protected_paths())
    return checkpoint, out_dir


def _rebuild_tensor_map(checkpoint: Path, report: CheckpointReport, result: SalvageResult,
                        fill_from: Path | None) -> None:
    """The tensor map is lost (pickle unreadable) but storage records verify on their own:
    names from a sibling checkpoint of the same run."""
    if fill_from is None:
        raise UsageError(f"{checkpoint}: tensor names are lost (pickle unreadable); "
                         "nothing can be named", hint="pass --fill-from a sibling "
                         "checkpoint of the same run to rebuild the tensor map")
    rebuilt = _rebuild_map(report, Path(fill_from).absolute())
    if isinstance(rebuilt, str):
        raise UsageError(f"{checkpoint}: cannot rebuild the tensor map: {rebuilt}")
    report.tensors = rebuilt
    result.structure_from = str(fill_from)


def verified_pairs(fmt: Any, root: Path, report: CheckpointReport
                   ) -> list[tuple[TensorRecord, str | None]]:
    """(tensor, why it is not verified or None) for every tensor of the report: the format's
    ``iter_verified_tensors`` where it has one, else each tensor's own status."""
    verified = getattr(fmt, "iter_verified_tensors", None)
    return list(verified(root, report) if verified else _default_verified(report))


def _plan_tensors(fmt: Any, root: Path, report: CheckpointReport, result: SalvageResult
                  ) -> tuple[list[_Planned], dict[str, tuple[TensorRecord, str]]]:
    """(the verified tensors to write, the lost ones with why); verified tensors safetensors
    cannot hold go to ``result.not_storable``."""
    strides = report.extra.get("strides", {})
    planned: list[_Planned] = []
    lost: dict[str, tuple[TensorRecord, str]] = {}
    reader = getattr(fmt, "read_tensor_bytes", None)
    for rec, reason in verified_pairs(fmt, root, report):
        if reason is not None:
            lost[rec.name] = (rec, reason)
            continue
        p = _plan(rec, strides, has_reader=reader is not None)
        if isinstance(p, str) and p.endswith(NOT_STORABLE):
            result.not_storable.append({"name": rec.name, "reason": p})
        elif isinstance(p, str):
            lost[rec.name] = (rec, p)
        else:
            p.reader, p.root, p.report = reader, root, report
            p.big_endian = report.extra.get("byteorder") == "big"
            planned.append(p)
    return planned, lost


def _fill(fill_from: Path, lost: dict[str, tuple[TensorRecord, str]],
          result: SalvageResult) -> list[_Planned]:
    """The lost tensors the reference holds verified, not suspect, of the same shape and
    dtype: planned from it (``filled``), taken out of ``lost``."""
    from ckptrescue.checkpoints.base import ProbeOptions
    from ckptrescue.checkpoints.probes.checkpoints import discover, probe_one

    ref_found = discover([fill_from])
    if len(ref_found) != 1:
        raise UsageError(f"{result.fill_from}: --fill-from takes exactly one checkpoint")
    rfmt, rroot = ref_found[0]
    ref = probe_one(rfmt, rroot, ProbeOptions(numeric=True))
    rpairs = {r.name: (r, why) for r, why in verified_pairs(rfmt, rroot, ref)}
    rstrides = ref.extra.get("strides", {})
    rreader = getattr(rfmt, "read_tensor_bytes", None)
    planned: list[_Planned] = []
    for name in list(lost):
        rec, _ = lost[name]
        cand = rpairs.get(name)
        if cand is None or cand[1] is not None or _is_suspect(cand[0], ref):
            continue  # a suspect reference tensor is no fill
        rrec = cand[0]
        if rec.shape is not None and (rrec.shape != rec.shape or rrec.dtype != rec.dtype):
            lost[name] = (rec, lost[name][1] + "; reference differs in shape/dtype")
            continue
        p = _plan(rrec, rstrides, has_reader=rreader is not None)
        if isinstance(p, str):
            continue
        p.reader, p.root, p.report = rreader, rroot, ref
        p.big_endian = ref.extra.get("byteorder") == "big"
        p.filled = True
        planned.append(p)
        result.filled.append(name)
        del lost[name]
    return planned


def _stem(checkpoint: Path) -> str:
    """The name the salvaged files take (a directory checkpoint: its directory's)."""
    stem = checkpoint.parent.name if checkpoint.name.endswith(".index.json") else checkpoint.name
    for suffix in (".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".index", ".keras", ".h5"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    return stem


def _write_salvage(checkpoint: Path, out_dir: Path, fmt: Any, root: Path,
                   report: CheckpointReport, result: SalvageResult, planned: list[_Planned],
                   lost: dict[str, tuple[TensorRecord, str]], *, torch_save: bool
                   ) -> SalvageResult:
    """The salvaged file (and the suspect tensors apart, and the torch.save file), then
    salvage.json, its record and the findings."""
    suspects = {p.name for p in planned if not p.filled and _is_suspect(p.rec, report)}
    clean = sorted((p for p in planned if p.name not in suspects), key=lambda p: p.name)
    apart = sorted((p for p in planned if p.name in suspects), key=lambda p: p.name)
    pickled = _torch_save_plan(fmt, root, lost, apart, clean) if torch_save else None
    meta = {"salvaged_from": str(checkpoint), "structure_from": result.structure_from or "",
            "source_verdict": str(report.verdict), "filled_from": result.fill_from or "",
            "filled": json.dumps(sorted(result.filled))}
    beneath.makedirs(out_dir, out_dir)
    stem = _stem(checkpoint)
    out_path = out_dir / f"{stem}.salvaged.safetensors"
    suspect_path = out_dir / f"{stem}.suspect.safetensors"
    for p in (out_path, suspect_path):
        if beneath.lexists(out_dir, p):
            raise UsageError(f"{p}: already exists; choose a new OUT_DIR")
    _write(out_path, clean, meta)
    result.output = str(out_path)
    if pickled is not None:
        result.torch_save_output = str(_write_torch_save(out_dir, f"{stem}.salvaged.pt",
                                                         pickled, clean))
    if apart:
        _write(suspect_path, apart, {**meta, "suspect": "numerically suspect in the probe: "
                                     "not a verified recovery"})
        result.suspect_output = str(suspect_path)
    result.recovered = sorted(p.name for p in clean if not p.filled)
    result.suspect = [{"name": p.name, "reasons": _suspect_reasons(p.name, report)}
                      for p in apart]
    result.lost = [{"name": n, "reason": why} for n, (_, why) in sorted(lost.items())]
    if report.verdict in (Verdict.TRUNCATED, Verdict.INCOMPLETE) and not result.lost:
        result.unaccounted = (f"the source is {report.verdict}: what it lost cannot be named "
                              "tensor by tensor (see the probe's findings)")
    report_bytes = (json.dumps(result.to_json(), indent=2) + "\n").encode()
    beneath.write_bytes(out_dir, out_dir / "salvage.json", report_bytes)
    sha = result.store(ArtifactData.of_bytes(report_bytes,
                                             name="salvage.json", kind="salvage-report"))
    result.record("checkpoint.salvaged", {"source": str(checkpoint), "output": str(out_path),
                                          "recovered": len(result.recovered),
                                          "lost": [x["name"] for x in result.lost][:500],
                                          "filled": result.filled[:500]}, artifacts=[sha])
    result.findings_here()
    result.findings.extend(salvage_findings(result, str(checkpoint), f"{out_path}",
                                            f"{result.fill_from}"))
    return result


def _torch_save_plan(fmt: Any, root: Path, lost: dict[str, tuple[TensorRecord, str]],
                     apart: list[_Planned], planned: list[_Planned],
                     ) -> tuple[bytes, dict[str, str]]:
    """For ``--torch-save``: the new ``data.pkl`` (the source's pickle read statically again,
    written back with the salvaged tensors) and each tensor's storage key - refused, before
    anything is written, unless the source is a torch.save zip whose every tensor was recovered
    or filled and whose structure is plain data."""
    from ckptrescue.checkpoints import torch_save_writer

    if getattr(fmt, "name", None) != "torch-zip":
        raise UsageError(f"--torch-save needs a torch.save (zip) checkpoint; this one is "
                         f"{getattr(fmt, 'name', 'unknown')}")
    if lost or apart:
        raise UsageError(f"--torch-save needs every tensor recovered or filled: {len(lost)} "
                         f"lost, {len(apart)} numerically suspect",
                         hint="pass --fill-from an earlier step, or load the .safetensors "
                              "output with strict=False (docs/checkpoints.md)")
    from ckptrescue.checkpoints.formats.tolerant_read import open_evidence
    from ckptrescue.checkpoints.formats.torch_zip import probe_zip

    with open_evidence(root) as fh:
        part = probe_zip(fh, str(root), do_numeric=False)
    if part.root is None:
        raise UsageError(f"{root}: its data.pkl does not read: the key structure is lost")
    try:
        return torch_save_writer.plan(part.root, {p.name: (tuple(p.rec.shape or ()),
                                                           str(p.rec.dtype)) for p in planned})
    except torch_save_writer.Unwritable as exc:
        raise UsageError(f"--torch-save: {exc}") from None


def _write_torch_save(out_dir: Path, name: str, pickled: tuple[bytes, dict[str, str]],
                      planned: list[_Planned]) -> Path:
    from ckptrescue.checkpoints import torch_save_writer

    by_name = {p.name: p for p in planned}
    out_path = out_dir / name
    if beneath.lexists(out_dir, out_path):
        raise UsageError(f"{out_path}: already exists; choose a new OUT_DIR")
    # whole or not at all: a full disk or a read error leaves no file at OUT
    with beneath.creating(out_dir, out_path) as out:
        torch_save_writer.write(out, pickled[0], pickled[1],
                                lambda n, sink: _copy(sink, by_name[n]))
    return out_path


def salvage_findings(result: SalvageResult, evidence: str, written: str,
                     filled_from: str) -> list[Finding]:
    """SV001-SV005 for one salvage: what was recovered, lost, filled, set apart, or nothing."""
    out = [finding("SV001", f"{len(result.recovered)} tensor(s) salvaged into {written}",
                   evidence=evidence)]
    if result.lost:
        out.append(finding("SV002", f"{len(result.lost)} tensor(s) could not be salvaged",
                           evidence=evidence, tensors=[x["name"] for x in result.lost][:500]))
    if result.filled:
        out.append(finding("SV003", f"{len(result.filled)} tensor(s) filled from {filled_from}",
                           evidence=evidence, tensors=result.filled[:500]))
    if result.suspect:
        out.append(finding(
            "SV004", f"{len(result.suspect)} tensor(s) numerically suspect: written apart "
            f"to {result.suspect_output or 'the suspect file'}, not counted as recovered",
            evidence=evidence, tensors=[x["name"] for x in result.suspect][:500]))
    if not (result.recovered or result.filled):
        out.append(finding("SV005", "no tensor could be salvaged"
                           + (f" ({len(result.lost)} lost)" if result.lost else
                              ": none could be named or verified"), evidence=evidence))
    return out


def _is_suspect(rec: TensorRecord, report: CheckpointReport) -> bool:
    return rec.status == "suspect" or rec.name in report.suspect_tensors


def _suspect_reasons(name: str, report: CheckpointReport) -> list[str]:
    """The probe's numeric findings that name this tensor (code: title)."""
    out = [f"{f.code}: {f.title}" for f in report.findings
           if f.code.startswith(("NM", "RF004")) and name in f.tensors]
    return out or ["numerically suspect in the probe"]


def _write(out_path: Path, planned: list[_Planned], meta: dict[str, str]) -> None:
    """One safetensors file of ``planned`` tensors (:func:`beneath.creating`: whole or absent)."""
    header: dict[str, Any] = {}
    pos = 0
    for p in planned:
        header[p.name] = {"dtype": p.code, "shape": list(p.rec.shape or ()),
                          "data_offsets": [pos, pos + p.nbytes]}
        pos += p.nbytes
    header["__metadata__"] = meta
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with beneath.creating(out_path.parent, out_path) as out:  # whole or not at all
        out.write(len(text).to_bytes(8, "little"))
        out.write(text)
        for p in planned:
            _copy(out, p)


class _Digest:
    """A write-only sink that hashes what ``_copy`` writes (SHA-256)."""

    def __init__(self) -> None:
        import hashlib

        self.sha = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        return len(data)


def tensor_digest(rec: TensorRecord, report: CheckpointReport, root: Path, *,
                  reader: Any = None) -> str | None:
    """SHA-256 prefix (16 hex digits) of the C-contiguous little-endian bytes salvage would
    write for ``rec`` (what the real loader's tensor holds when the static map is right); None
    when its bytes cannot be located."""
    p = _plan(rec, report.extra.get("strides", {}) or {}, has_reader=reader is not None,
              storable=False)
    if isinstance(p, str):
        return None
    p.reader, p.root, p.report = reader, root, report
    p.big_endian = report.extra.get("byteorder") == "big"
    sink = _Digest()
    try:
        _copy(sink, p)  # type: ignore[arg-type]
    except (OSError, UsageError, ValueError):
        return None
    return sink.sha.hexdigest()[:16]


# Public names for the family salvage (``probes/family_salvage.py``): the same planning, copying and
# writing rules as a single checkpoint, per rank file.
Planned = _Planned
plan_tensor = _plan
write_safetensors = _write
is_suspect = _is_suspect
suspect_reasons = _suspect_reasons
