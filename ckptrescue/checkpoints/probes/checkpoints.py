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
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, Verdict, first_detecting
from ckptrescue.checkpoints.base import formats as registry_formats
from ckptrescue.checkpoints.probes.single import probe_one
from ckptrescue.errors import EvidenceError, UsageError
from ckptrescue.model import AuditEvent, JsonObject
from ckptrescue.plugins import plugin_modules

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".pkl", ".tar", ".pt2",
                       ".distcp", ".model", ".weights", ".h5", ".keras", ".index", ".msgpack")
# compressed tar archives (formats/tar_archive.py) and zips named for the checkpoint they hold
# (formats/zip_archive.py): a damaged one no format detects any more is still reported, not
# skipped (a plain ``.zip`` may hold anything: only its content makes it a checkpoint archive)
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.zst", ".tzst", ".pt.zip", ".pth.zip", ".ckpt.zip",
                    ".bin.zip", ".safetensors.zip")
MAX_DEPTH = 6


def _named_like_a_checkpoint(entry: Path) -> bool:
    return entry.suffix.lower() in CHECKPOINT_SUFFIXES or \
        entry.name.lower().endswith(ARCHIVE_SUFFIXES)
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
    from ckptrescue.checkpoints import formats as pkg

    found: list[type] = [fmt for module in plugin_modules(pkg, broken=SKIPPED_FORMAT_MODULES)
                         for fmt in getattr(module, "FORMATS", [])]
    found.sort(key=lambda f: getattr(f, "priority", 100))
    return found


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
    return first_detecting(formats(), path)


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
            if _named_like_a_checkpoint(entry) and entry.exists():
                out.append((None, entry))  # a FIFO/device named like a checkpoint: IO002
            continue
        fmt = _detect(entry)
        if fmt is not None:
            out.append((fmt, entry))
        elif _named_like_a_checkpoint(entry):
            out.append((None, entry))
    return out


def probe_paths(
    paths: list[Path], *, reference: Path | None = None, load: bool = False,
    case: Case | None = None, numeric: bool = True, scheduler: str | None = None,
    jobs: int = 1, progress: Callable[[str, str, str], None] | None = None,
    cancel: Any = None,
) -> list[CheckpointReport]:
    """Probe every checkpoint under ``paths``; one report per checkpoint.

    ``reference``: a previous checkpoint to compare with (missing/added tensors, shape/dtype
    changes, tensors changed in only a few elements, single-bit XORs). ``load``: also run the
    real loader in the sandbox when the structural verdict allows (formats with a ``load_batch``
    hook, e.g. TensorFlow, get one sandbox child for all their checkpoints). ``case``: the case
    the sandboxed loads run for (their runs are audited); nothing else is written —
    :func:`probe_records` is what the engine records. ``scheduler``: a Dask scheduler address;
    each checkpoint is probed on a worker (which must see the same paths), results merge into
    the same reports as a local run; the rank files of a multi-rank family step are spread over
    the workers in batches. ``jobs``: the rank files of a multi-rank family step are probed in
    this many processes; ``progress(step_root, rank, verdict)`` is called after each rank file
    (local runs and, for family steps, cluster runs). Run-level findings on the families'
    newest-step pointers are added to the step reports (``probes/pointers.py``). ``cancel``: a
    ``threading.Event`` (the step's, set on Ctrl-C) that stops the worker processes at once
    (``families/workers.py``).
    """
    if not paths:
        raise UsageError("probe: give at least one PATH")
    options = ProbeOptions(numeric=numeric, jobs=max(1, jobs), cancel=cancel)
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
    options.progress = progress
    if scheduler:
        from ckptrescue.checkpoints.probes.cluster import probe_on_cluster

        probed = probe_on_cluster(scheduler, found, options)
    else:
        probed = [probe_one(fmt, path, options) for fmt, path in found]
    options.progress = None
    from ckptrescue.checkpoints.probes.pointers import attach_pointer_findings

    attach_pointer_findings(found, probed)
    reports: list[CheckpointReport] = []
    batched: dict[str, list[CheckpointReport]] = {}
    for (fmt, _path), report in zip(found, probed, strict=True):
        if ref_report is not None and report.verdict is not Verdict.UNREADABLE:
            from ckptrescue.checkpoints.probes.reference import compare

            compare(report, ref_report)
        if load:
            hook = getattr(fmt, "load_batch", None)
            if isinstance(hook, str):
                batched.setdefault(hook, []).append(report)
            else:
                from ckptrescue.checkpoints.probes.checkpoint_load import load_in_sandbox

                load_in_sandbox(report, case=case)
        reports.append(report)
    for hook, group in batched.items():
        import importlib

        module, _, name = hook.partition(":")
        getattr(importlib.import_module(module), name)(group, case=case)
    return reports


def probe_records(paths: list[Any], reports: list[CheckpointReport], *,
                  reference: Any = None, load: bool = False,
                  scheduler: str | None = None) -> list[AuditEvent]:
    """What a probe records in a case, in order, for the engine to write:
    ``checkpoint.probe.started``, then per checkpoint its findings and ``checkpoint.probed``
    (format, verdict, tensor counts, size, mtime). ``probe_paths`` writes nothing itself."""
    out = [AuditEvent("checkpoint.probe.started", {
        "paths": [str(p) for p in paths], "reference": str(reference) if reference else None,
        "load": load, "scheduler": scheduler, "checkpoints": [r.path for r in reports]})]
    for report in reports:
        out += [AuditEvent("finding", {"finding": f.to_json()}) for f in report.findings]
        out.append(AuditEvent("checkpoint.probed", {
            "path": report.path, "format": report.format, "verdict": str(report.verdict),
            "tensors_total": report.tensors_total,
            "damaged_tensors": report.damaged_tensors[:200],
            "missing_tensors": report.missing_tensors[:200],
            "suspect_tensors": report.suspect_tensors[:200], "size": _size(report.files),
            "mtime": _mtime(report.path)}))
    return out


def _mtime(path: str) -> str | None:
    from datetime import UTC, datetime

    try:
        return datetime.fromtimestamp(os.stat(path).st_mtime, UTC).isoformat().replace(
            "+00:00", "Z")
    except (OSError, ValueError):
        return None


def _size(files: list[str]) -> int:
    total = 0
    for f in files:
        try:
            total += os.path.getsize(f)
        except OSError:
            continue
    return total


def probe_json(reports: list[CheckpointReport], *, with_tensors: bool = False) -> JsonObject:
    """The stable ``probe --json`` shape."""
    return {"checkpoints": [r.to_json(with_tensors=with_tensors) for r in reports]}
