"""Standalone pickle-bearing files in a run directory (``pickle``): every one gets a verdict.

What is covered (``docs/formats/pickle.md``): bare pickles whatever their name (``.pkl``,
``.pickle``, ``.dill``, ``.joblib``, ``optimizer.pkl``, a legacy-looking stream whose magic is
computed), numpy ``.npy`` files with object arrays (the pickle after the header), zips and 7z
archives holding pickles (each member that is a pickle: ``data.pkl``, ``*.pkl``, or a member
starting with a PROTO opcode; 7z needs the ``archives`` extra, py7zr), and Accelerate's
``random_states_<rank>.pkl`` (a torch zip judged against the exact list of what Accelerate
writes). Several pickles in a row (``pickle.load`` called repeatedly) are all scanned. Nothing
is ever unpickled.
"""

from __future__ import annotations

import ast
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, TensorRecord, Verdict
from ckptrescue.checkpoints.formats import pickle_policy, pickle_scan, tensormap
from ckptrescue.checkpoints.formats.pickle_verdict import judge
from ckptrescue.checkpoints.formats.tensormap import finding

SUFFIXES = (".pkl", ".pickle", ".dill", ".joblib", ".npy", ".pckl", ".p")
ACCELERATE_RNG = re.compile(r"^random_states_\d+\.pkl$")
_NPY_MAGIC = b"\x93NUMPY"
_7Z_MAGIC = b"7z\xbc\xaf\x27\x1c"
_MAX_MEMBERS = 64
_MAX_PICKLES = 16


def _head(path: Path, n: int = 16) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


def _looks_pickle(head: bytes) -> bool:
    return len(head) >= 2 and head[0] == 0x80 and head[1] <= 5


def _npy_pickle_offset(data: bytes) -> int | None:
    """Offset of the pickle in an object-array ``.npy`` (None: no pickle in this file)."""
    if not data.startswith(_NPY_MAGIC) or len(data) < 10:
        return None
    major = data[6]
    width = 2 if major == 1 else 4
    hlen = int.from_bytes(data[8:8 + width], "little")
    start = 8 + width
    try:
        header = ast.literal_eval(data[start:start + hlen].decode("latin-1"))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return start + hlen
    descr = header.get("descr") if isinstance(header, dict) else None
    return start + hlen if "O" in repr(descr) else None


class PickleFileFormat:
    """A standalone pickle-bearing file (``pickle``)."""

    name: ClassVar[str] = "pickle"
    priority: ClassVar[int] = 90

    @classmethod
    def detect(cls, path: Path) -> bool:
        if not path.is_file():
            return False
        head = _head(path)
        if head.startswith(_NPY_MAGIC):  # only object arrays hold a pickle
            with open(path, "rb") as fh:
                return _npy_pickle_offset(fh.read(65536 + 16)) is not None
        if head.startswith(b"PK"):
            return _zip_pickles(path) is not None
        if head.startswith(_7Z_MAGIC):
            return _seven_zip_pickles(path) is not None
        return _looks_pickle(head) or path.suffix.lower() in SUFFIXES

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        spath = str(path)
        report = CheckpointReport(path=spath, format=cls.name, verdict=Verdict.INTACT,
                                  files=[spath])
        verdicts: list[Verdict] = []
        def allowed(g: str) -> bool:
            return pickle_policy.standalone_allowed(g) or pickle_policy.extra_allowed(
                g, options.extra_allowed)

        parts: list[tuple[str, bytes]] = []
        with open(path, "rb") as fh:
            data = fh.read(pickle_scan.MAX_PICKLE_BYTES)
        if data.startswith(_NPY_MAGIC):
            off = _npy_pickle_offset(data)
            parts = [("object array", data[off:])] if off is not None else []
        elif data.startswith(b"PK"):
            parts = _zip_pickles(path) or []
        elif data.startswith(_7Z_MAGIC):
            parts = _seven_zip_pickles(path) or []
        else:
            parts = [("pickle", data)]
        if not parts:
            report.findings.append(finding("PK002", f"{path.name}: no pickle found",
                                           evidence=spath))
            report.verdict = Verdict.UNREADABLE
            return report
        seen: list[str] = []
        for label, blob in parts:
            pos, count = 0, 0
            while pos < len(blob) and count < _MAX_PICKLES:
                scan = pickle_scan.scan_pickle(blob[pos:], start=pos, mode="memory",
                                               partial=True)
                count += 1
                seen.extend(g for g in scan.globals if g not in seen)
                found, vs = judge(scan, spath, allowed=allowed, weights_only=False,
                                  standalone=True, label=f"{path.name} ({label})")
                report.findings.extend(found)
                verdicts.extend(vs)
                if scan.error or scan.end <= 0:
                    break
                pos += scan.end
                if not _looks_pickle(blob[pos:pos + 2]):
                    break  # trailing bytes (joblib arrays, padding) are not a pickle
        report.extra["globals"] = seen
        report.extra["unsafe_globals"] = sorted({g for f in report.findings if f.code == "PK001"
                                                 for g in f.details.get("globals", [])})
        tensormap.finalize(report, verdicts)
        return report

    @classmethod
    def iter_verified_tensors(cls, path: Path, report: CheckpointReport,
                              ) -> Iterator[tuple[TensorRecord, str | None]]:
        return iter(())


def _zip_pickles(path: Path) -> list[tuple[str, bytes]] | None:
    """The pickle members of a zip (None when it holds none or is not a readable zip)."""
    try:
        with zipfile.ZipFile(path) as zf:
            out: list[tuple[str, bytes]] = []
            for info in zf.infolist()[:_MAX_MEMBERS]:
                if info.file_size > pickle_scan.MAX_PICKLE_BYTES or info.flag_bits & 1:
                    continue
                name = info.filename
                with zf.open(info) as member:
                    head = member.read(2)
                if not (name.endswith((".pkl", ".pickle", "data.pkl")) or _looks_pickle(head)):
                    continue
                out.append((name, zf.read(info)))
            return out or None
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError,
            RuntimeError, zipfile.LargeZipFile):
        return None


def _seven_zip_pickles(path: Path) -> list[tuple[str, bytes]] | None:
    """The pickle members of a 7z archive, each decompressed to at most the pickle cap (None
    when it holds none, is encrypted or unreadable, or py7zr — the ``archives`` extra — is not
    installed)."""
    try:
        import py7zr
        from py7zr.io import BytesIOFactory
    except ImportError:
        return None
    try:
        with py7zr.SevenZipFile(path, "r") as z:
            if z.needs_password():
                return None
            infos = [i for i in z.list() if not i.is_directory][:_MAX_MEMBERS]
            targets = [i.filename for i in infos
                       if (i.uncompressed or 0) <= pickle_scan.MAX_PICKLE_BYTES]
            factory = BytesIOFactory(pickle_scan.MAX_PICKLE_BYTES)
            z.extract(targets=targets, factory=factory)
        out: list[tuple[str, bytes]] = []
        for name in targets:
            member = factory.products.get(name)
            if member is None:
                continue
            member.seek(0)
            data = member.read()
            if name.endswith((".pkl", ".pickle", "data.pkl")) or _looks_pickle(data[:2]):
                out.append((name, data))
        return out or None
    except Exception:  # noqa: BLE001 - a hostile archive is "not readable", never a crash
        return None


class AccelerateRngFormat:
    """Accelerate's ``random_states_<rank>.pkl``: a torch zip (``accelerate-rng``) whose pickle
    may name numpy's array reconstruction (``np.random.get_state()``) besides the weights-only
    list; anything else is judged as in any torch zip."""

    name: ClassVar[str] = "accelerate-rng"
    priority: ClassVar[int] = 15

    @classmethod
    def detect(cls, path: Path) -> bool:
        return bool(ACCELERATE_RNG.match(path.name)) and path.is_file() \
            and _head(path, 2) == b"PK"

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        from ckptrescue.checkpoints.formats.torch_zip import TorchZipFormat

        report = TorchZipFormat.probe(path, options)
        report.format = cls.name
        unsafe = report.extra.get("unsafe_globals") or []
        if unsafe and all(pickle_policy.accelerate_rng_allowed(g)
                          and not pickle_policy.dangerous(g) for g in unsafe):
            report.findings = [f for f in report.findings if f.code != "PK001"]
            report.extra["unsafe_globals"] = []
            report.extra["accelerate_globals"] = unsafe
            others = [Verdict.DAMAGED for f in report.findings
                      if str(f.severity) in ("error", "critical") and f.code.startswith("TZ")]
            report.verdict = Verdict.INTACT
            tensormap.finalize(report, others)
        return report

    @classmethod
    def iter_verified_tensors(cls, path: Path, report: CheckpointReport,
                              ) -> Iterator[tuple[TensorRecord, str | None]]:
        from ckptrescue.checkpoints.formats.torch_zip import tensormap_salvageable

        yield from tensormap_salvageable(report)


FORMATS = [AccelerateRngFormat, PickleFileFormat]
