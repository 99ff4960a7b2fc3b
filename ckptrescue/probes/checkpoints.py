"""Probe checkpoints: find them under the given paths, verify each, compare, optionally load.

Library entry point for ``ckptrescue probe``, the engine, playbooks and ``rank``/``salvage``:
:func:`probe_paths`. A PATH is a file, a checkpoint directory (DCP, HF sharded) or a run
directory holding many checkpoints; each checkpoint gets one :class:`CheckpointReport`.

Discovery uses the ``checkpoint.formats()`` registry only, so a format added later is picked up
without editing this module (see ``formats/_example.py``):

* a format may define ``claim(directory) -> list[Path]``: the checkpoint roots it owns in that
  directory (a DCP directory, an HF index, a TF ``PREFIX.index``), and
  ``companions(root) -> list[Path]``: every file belonging to a root, so the walker does not
  probe those files again on their own;
* every other file is offered to each format's ``detect(path)`` in priority order.

Nothing here executes a checkpoint: formats inspect bytes statically; ``load=True`` runs the
real loaders in the sandbox child (``sandbox_children/torch_load.py``) only when the structural
verdict allows it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.checkpoint import CheckpointReport, ProbeOptions, Verdict
from ckptrescue.checkpoint import formats as registry_formats
from ckptrescue.errors import EvidenceError, UsageError
from ckptrescue.formats.tensormap import finding

if TYPE_CHECKING:
    from ckptrescue.case import Case

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".pkl", ".tar", ".pt2",
                       ".distcp", ".model", ".weights", ".h5", ".keras", ".index", ".msgpack")
MAX_DEPTH = 6
LOADABLE = {Verdict.INTACT, Verdict.SUSPECT, Verdict.DAMAGED}


SKIPPED_FORMAT_MODULES: dict[str, str] = {}


def formats() -> list[type]:
    """The registry's formats; if one format module fails to import, skip only that module.

    ``checkpoint.formats()`` imports every module and fails as a whole; a broken or
    half-installed format (missing optional dependency) must not stop the others.
    """
    try:
        return list(registry_formats())
    except Exception as exc:  # noqa: BLE001 - fall back to per-module discovery below
        SKIPPED_FORMAT_MODULES["<registry>"] = f"{type(exc).__name__}: {exc}"
    import importlib
    import pkgutil

    from ckptrescue import formats as pkg

    found: list[type] = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{pkg.__name__}.{info.name}")
        except Exception as exc:  # noqa: BLE001
            SKIPPED_FORMAT_MODULES[info.name] = f"{type(exc).__name__}: {exc}"
            continue
        found.extend(getattr(module, "FORMATS", []))
    found.sort(key=lambda f: getattr(f, "priority", 100))
    return found


def _identify_unknown(path: Path) -> str:
    """Say what a file that no format recognises looks like."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(512)
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    if size == 0:
        return "empty file (0 bytes)"
    if head.startswith(b"version https://git-lfs"):
        m = re.search(rb"oid sha256:([0-9a-f]{64})", head)
        oid = m.group(1).decode() if m else "?"
        return f"Git-LFS pointer file (oid sha256:{oid}), not the checkpoint's bytes"
    text = head.lstrip().lower()
    if text.startswith((b"<!doctype html", b"<html", b"<?xml")):
        return "HTML/XML text (an error page saved under a checkpoint's name?)"
    if not head.strip(b"\x00"):
        return "all-zero bytes at the start"
    if head.startswith(b"PK"):
        return "a zip archive without torch records"
    return "no known checkpoint structure"


def _unreadable(path: Path) -> CheckpointReport:
    what = _identify_unknown(path)
    report = CheckpointReport(path=str(path), format="unknown", verdict=Verdict.UNREADABLE,
                              files=[str(path)])
    report.findings.append(finding("TZ020", f"{path.name}: {what}", evidence=str(path)))
    return report


def _claims(directory: Path) -> list[tuple[type, Path]]:
    found: list[tuple[type, Path]] = []
    seen: set[Path] = set()
    for fmt in formats():
        claim = getattr(fmt, "claim", None)
        if claim is None:
            continue
        try:
            roots = claim(directory)
        except OSError:
            continue
        for root in roots:
            root = Path(root)
            if root not in seen:
                seen.add(root)
                found.append((fmt, root))
    return found


def _companions(fmt: type, root: Path) -> set[Path]:
    comp = getattr(fmt, "companions", None)
    if comp is not None:
        return {Path(p) for p in comp(root)}
    if root.is_dir():
        return {p for p in root.rglob("*") if p.is_file()}
    return {root}


def _detect(path: Path) -> type | None:
    for fmt in formats():
        try:
            if fmt.detect(path):
                return fmt
        except (OSError, ValueError):
            continue
    return None


def discover(paths: Iterable[Path]) -> list[tuple[type | None, Path]]:
    """Every checkpoint under ``paths``: (format or None when unidentified, root path)."""
    out: list[tuple[type | None, Path]] = []
    for path in paths:
        path = Path(path).absolute()
        if not path.exists():
            fmt = _detect(path)  # a TensorFlow PREFIX names files that exist, not a file
            if fmt is None:
                raise EvidenceError(f"{path}: no such file or directory")
            out.append((fmt, path))
            continue
        if path.is_dir():
            out.extend(_walk(path, 0, explicit=True))
        elif not path.is_file():  # a FIFO, socket or device: opening it could block forever
            raise EvidenceError(f"{path}: not a regular file or directory (a device, FIFO or "
                                "socket); image a device first (ckptrescue image)")
        else:
            out.append((_detect(path), path))
    unique: list[tuple[type | None, Path]] = []
    seen: set[Path] = set()
    for fmt, root in out:
        if root.resolve() not in seen:  # the same checkpoint named twice is probed once
            seen.add(root.resolve())
            unique.append((fmt, root))
    return unique


def _walk(directory: Path, depth: int, *, explicit: bool) -> list[tuple[type | None, Path]]:
    out: list[tuple[type | None, Path]] = []
    claims = _claims(directory)
    covered: set[Path] = set()
    for fmt, root in claims:
        if root == directory:
            return [(fmt, directory)]
    for fmt, root in claims:
        out.append((fmt, root))
        covered |= _companions(fmt, root)
        covered.add(root)
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        raise EvidenceError(f"{directory}: cannot list ({exc.strerror})") from exc
    for entry in entries:
        if entry in covered or entry.is_symlink():
            continue
        if entry.is_dir():
            if depth < MAX_DEPTH:
                out.extend(_walk(entry, depth + 1, explicit=False))
            continue
        if not entry.is_file():
            continue
        fmt = _detect(entry)
        if fmt is not None:
            out.append((fmt, entry))
        elif entry.suffix.lower() in CHECKPOINT_SUFFIXES:
            out.append((None, entry))
    return out


def probe_one(fmt: type | None, path: Path, options: ProbeOptions) -> CheckpointReport:
    """Probe one checkpoint root with its format (or report it unreadable)."""
    if fmt is None:
        return _unreadable(path)
    from ckptrescue.formats.tolerant_read import collect_unreadable

    with collect_unreadable() as unreadable:
        try:
            report: CheckpointReport = fmt.probe(path, options)
        except OSError as exc:
            report = CheckpointReport(path=str(path), format=getattr(fmt, "name", "?"),
                                      verdict=Verdict.UNREADABLE, files=[str(path)])
            report.findings.append(finding("TZ020", f"{path}: read failed: {exc}",
                                           evidence=str(path)))
    if unreadable:
        mark_unreadable(report, unreadable)
    return report


def mark_unreadable(report: CheckpointReport, unreadable: dict[str, list[tuple[int, int]]]
                    ) -> None:
    """Tensors whose bytes lie in unreadable (EIO) ranges are damaged; one IO001 per file."""
    import os

    from ckptrescue.formats import tensormap

    all_hit: set[str] = set()
    for fpath, ranges in sorted(unreadable.items()):
        hit: list[str] = []
        for rec in report.tensors:
            if (rec.file is None or rec.offset is None or rec.length is None
                    or os.path.realpath(rec.file) != fpath):
                continue
            if any(a < rec.offset + rec.length and rec.offset < b for a, b in ranges):
                if rec.status not in ("truncated", "missing"):
                    rec.status = "damaged"
                reason = "bytes unreadable (I/O error)"
                if reason not in rec.reasons:
                    rec.reasons.append(reason)
                hit.append(rec.name)
        total = sum(b - a for a, b in ranges)
        shown = ", ".join(f"[{a}, {b})" for a, b in ranges[:8])
        report.findings.append(finding(
            "IO001", f"{os.path.basename(fpath)}: {total} bytes unreadable (I/O error) at "
            f"{shown}{' ...' if len(ranges) > 8 else ''}; tensors there: "
            f"{', '.join(sorted(hit)) or 'none (metadata or padding)'}",
            evidence=fpath, offset=ranges[0][0], length=total, tensors=sorted(hit),
            details={"ranges": [list(r) for r in ranges]}))
        all_hit.update(hit)
    # unreadable units read as zeros: the zero-page warnings on those tensors are ours
    report.findings = [f for f in report.findings
                       if not (f.code == "NM003" and f.tensors and set(f.tensors) <= all_hit)]
    for rec in report.tensors:
        if rec.name in all_hit:
            rec.reasons = [r for r in rec.reasons if "zero-filled" not in r]
    tensormap.finalize(report)


def probe_paths(
    paths: list[Path], *, reference: Path | None = None, load: bool = False,
    case: Case | None = None, numeric: bool = True, scheduler: str | None = None,
) -> list[CheckpointReport]:
    """Probe every checkpoint under ``paths``; one report per checkpoint.

    ``reference``: a previous checkpoint to compare with (missing/added tensors, shape/dtype
    changes, tensors changed in only a few elements, single-bit XORs). ``load``: also run the
    real loader in the sandbox when the structural verdict allows (formats with a ``load_batch``
    hook, e.g. TensorFlow, get one sandbox child for all their checkpoints). ``case``: findings
    and the run are recorded in the case's audit log. ``scheduler``: a Dask scheduler address;
    each checkpoint is probed on a worker (which must see the same paths), results merge into
    the same reports as a local run.
    """
    if not paths:
        raise UsageError("probe: give at least one PATH")
    options = ProbeOptions(numeric=numeric)
    ref_report = None
    if reference is not None:
        ref_found = discover([reference])
        if len(ref_found) != 1:
            raise UsageError(f"{reference}: the reference must be exactly one checkpoint "
                             f"(found {len(ref_found)})")
        ref_report = probe_one(*ref_found[0], ProbeOptions(numeric=False))
        if ref_report.verdict is Verdict.UNREADABLE:
            raise UsageError(f"{reference}: the reference is not a checkpoint ckptrescue can read "
                             "(verdict unreadable)")
        options.reference, options.reference_path = ref_report, str(reference)
    found = discover(paths)
    if case is not None:
        case.log("checkpoint.probe.started", {
            "paths": [str(p) for p in paths], "reference": str(reference) if reference else None,
            "load": load, "scheduler": scheduler,
            "checkpoints": [str(p) for _, p in found]})
    if scheduler:
        from ckptrescue.probes.cluster import probe_on_cluster

        probed = probe_on_cluster(scheduler, found, options)
    else:
        probed = [probe_one(fmt, path, options) for fmt, path in found]
    reports: list[CheckpointReport] = []
    batched: dict[str, list[CheckpointReport]] = {}
    for (fmt, _path), report in zip(found, probed, strict=True):
        if ref_report is not None and report.verdict is not Verdict.UNREADABLE:
            from ckptrescue.probes.reference import compare

            compare(report, ref_report)
        if load:
            hook = getattr(fmt, "load_batch", None)
            if isinstance(hook, str):
                batched.setdefault(hook, []).append(report)
            else:
                from ckptrescue.probes.checkpoint_load import load_in_sandbox

                load_in_sandbox(report, case=case)
        reports.append(report)
    for hook, group in batched.items():
        import importlib

        module, _, name = hook.partition(":")
        getattr(importlib.import_module(module), name)(group, case=case)
    if case is not None:
        for report in reports:
            case.add_findings(report.findings)
            case.log("checkpoint.probed", {"path": report.path, "format": report.format,
                                           "verdict": str(report.verdict),
                                           "tensors_total": report.tensors_total,
                                           "damaged_tensors": report.damaged_tensors[:200],
                                           "missing_tensors": report.missing_tensors[:200],
                                           "suspect_tensors": report.suspect_tensors[:200],
                                           "size": _size(report.files)})
    return reports


def _size(files: list[str]) -> int:
    total = 0
    for f in files:
        try:
            total += os.path.getsize(f)
        except OSError:
            continue
    return total


def probe_json(reports: list[CheckpointReport], *, with_tensors: bool = False) -> dict[str, Any]:
    """The stable ``probe --json`` shape."""
    return {"checkpoints": [r.to_json(with_tensors=with_tensors) for r in reports]}
