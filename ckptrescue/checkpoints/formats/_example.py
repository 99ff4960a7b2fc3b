"""A documented example checkpoint format: copy this file to add a format.

Modules in ``ckptrescue/checkpoints/formats/`` whose name does not start with ``_`` are imported by
``ckptrescue.checkpoints.base.formats()``; each may define ``FORMATS = [Class, ...]``. Nothing else
needs editing: ``probe`` (``probes/checkpoints.py``), ``salvage`` and ``rank`` find the new
format through the registry. This module starts with ``_`` so it is NOT registered.

The contract (see ``checkpoint.CheckpointFormat``):

``name`` (ClassVar[str])
    Short registry key, lowercase: ``"torch-zip"``, ``"safetensors"``, ``"tf-bundle"``.
``priority`` (ClassVar[int], optional, default 100)
    Lower goes first when several formats could detect the same path. Directory formats that
    claim companions (DCP, HF sharded) use 10; single-file formats 20-30.
``detect(path) -> bool`` (classmethod)
    True when ``path`` (file or directory) is this format, judged from structure, never from
    the extension or the first four bytes alone; a damaged file of this format still returns
    True (scan from the end, look for names, ...). Must not raise on arbitrary input.
``probe(path, options) -> CheckpointReport`` (classmethod)
    Verify streaming with bounded memory, never execute anything. Fill ``report.tensors`` with
    one ``TensorRecord`` per tensor: ``name`` (dotted/stored key), canonical ``dtype`` name
    (``formats/dtypes.py``: "float32", "bfloat16", ...), ``shape``, ``file`` (the file holding
    the bytes), absolute byte ``offset`` and ``length`` (``storage locate`` maps bad sectors to
    tensors with these), ``status`` (ok, unverified, damaged, truncated, missing, suspect) and
    ``reasons``. Damage is a ``Finding`` (``formats.tensormap.finding(code, ...)``; codes live in
    ``ckptrescue/codes/<area>.py``). ``tensormap.finalize(report, verdicts)`` derives the
    damaged/suspect/missing lists and the verdict from the statuses.

Optional hooks:

``claim(directory) -> list[Path]`` (classmethod)
    The checkpoint roots this format owns inside ``directory`` (not recursive). Return
    ``[directory]`` when the whole directory is one checkpoint (DCP); return files for
    checkpoints that are a group of files (an HF ``*.index.json``; a TF ``PREFIX.index`` with
    ``PREFIX.data-*`` and the ``checkpoint`` state file). The walker probes each root once with
    this format.
``companions(root) -> list[Path]`` (classmethod)
    Every file that belongs to ``root`` (shards, data files, state files), so the walker does
    not probe them again on their own. Default: the root itself (all files under it for a
    directory).
``iter_verified_tensors(path, report) -> Iterator[(TensorRecord, reason | None)]``
    For ``salvage``: each tensor of ``report`` with ``None`` when its bytes verified (they are
    copied from ``file``/``offset``, C-contiguous ``prod(shape) x itemsize`` bytes; a
    non-contiguous view lists its element strides in ``report.extra["strides"][name]``), or a
    one-line reason it is lost. Default: status ok/unverified/suspect and a known location.
``read_tensor_bytes(path, report, rec) -> Iterator[bytes]``
    For ``salvage``, when a tensor's C-contiguous little-endian bytes are not a plain byte range
    of ``rec.file`` (byte-swapped, sliced, encoded): yield them in chunks.

Sandboxed real loads (``probe --load``) are mapped by format name in
``probes/checkpoint_load.py``; a new loader is a child module in ``ckptrescue/sandbox_children``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, TensorRecord, Verdict
from ckptrescue.checkpoints.formats import tensormap
from ckptrescue.checkpoints.formats.tensormap import finding

MAGIC = b"EXMPL001"


class ExampleFormat:
    """A made-up format: ``EXMPL001`` + u32 count + (u32 name length, name, u32 nbytes, f32s)."""

    name: ClassVar[str] = "example"
    priority: ClassVar[int] = 100

    @classmethod
    def detect(cls, path: Path) -> bool:
        try:
            with open(path, "rb") as fh:
                return path.is_file() and fh.read(len(MAGIC)) == MAGIC
        except OSError:
            return False

    @classmethod
    def claim(cls, directory: Path) -> list[Path]:
        return []  # single-file format: nothing to group

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        report = CheckpointReport(path=str(path), format=cls.name, verdict=Verdict.INTACT,
                                  files=[str(path)])
        size = path.stat().st_size
        with open(path, "rb") as fh:
            fh.seek(len(MAGIC))
            count = int.from_bytes(fh.read(4), "little")
            for _ in range(count):
                nlen = int.from_bytes(fh.read(4), "little")
                name = fh.read(nlen).decode("utf-8", "replace")
                nbytes = int.from_bytes(fh.read(4), "little")
                rec = TensorRecord(name=name, dtype="float32", shape=(nbytes // 4,),
                                   file=str(path), offset=fh.tell(), length=nbytes,
                                   status="unverified")
                if fh.tell() + nbytes > size:
                    rec.status = "truncated"
                    rec.reasons.append("file ends inside this tensor")
                    report.findings.append(finding("TZ006", f"{name} cut off",
                                                   evidence=str(path), offset=rec.offset,
                                                   tensors=[name]))
                report.tensors.append(rec)
                fh.seek(nbytes, 1)
        tensormap.finalize(report, [Verdict.TRUNCATED] if report.damaged_tensors else [])
        return report

    @classmethod
    def iter_verified_tensors(cls, path: Path, report: CheckpointReport,
                              ) -> Iterator[tuple[TensorRecord, str | None]]:
        for rec in report.tensors:
            yield rec, None if rec.status == "unverified" else "; ".join(rec.reasons)


# FORMATS = [ExampleFormat]   # <- a real format module ends with this line
