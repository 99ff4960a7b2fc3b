"""Standalone pickle-bearing files in a run directory (``pickle``): every one gets a verdict.

What is covered (``docs/formats/pickle.md``): bare pickles whatever their name (``.pkl``,
``.pickle``, ``.dill``, ``.joblib``, ``optimizer.pkl``, a legacy-looking stream whose magic is
computed), numpy ``.npy`` files with object arrays (the pickle after the header), zips and 7z
archives holding pickles (each member that is a pickle: ``data.pkl``, ``*.pkl``, a member
starting with a PROTO opcode, or an object-array ``.npy`` of an ``.npz``; a zip member is read
from its bytes whatever its encryption/patch flags say; 7z needs the ``archives`` extra, py7zr),
and Accelerate's ``random_states_<rank>.pkl`` (a torch zip judged against the exact list of what Accelerate
writes). Several pickles in a row (``pickle.load`` called repeatedly) are all scanned. Nothing
is ever unpickled.
"""

from __future__ import annotations

import ast
import re
import struct
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, TensorRecord, Verdict
from ckptrescue.checkpoints.formats import pickle_policy, pickle_scan, tensormap
from ckptrescue.checkpoints.formats.pickle_verdict import judge
from ckptrescue.checkpoints.formats.tensormap import StorageSalvage, finding

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
    """The pickle members of a zip (None when it holds none or is not a readable zip).

    Members are read from their stored bytes whatever their general-purpose flags say: a
    member marked encrypted (0x1, 0x40) or patch data (0x20) whose bytes are a plain pickle
    (picklescan's ``malicious1_0x*.zip``) runs in any reader that ignores the flag. A member
    really encrypted does not parse as a pickle and is left out."""
    try:
        with zipfile.ZipFile(path) as zf, open(path, "rb") as fh:
            out: list[tuple[str, bytes]] = []
            for info in zf.infolist()[:_MAX_MEMBERS]:
                if info.file_size > pickle_scan.MAX_PICKLE_BYTES:
                    continue
                data = _member_bytes(fh, info)
                if data is None:
                    continue
                name = info.filename
                if data.startswith(_NPY_MAGIC):  # an .npz member: object arrays hold a pickle
                    off = _npy_pickle_offset(data)
                    if off is not None:
                        out.append((f"{name} (object array)", data[off:]))
                    continue
                if info.flag_bits & _FLAGS_HIDING and not _parses(data):
                    continue
                if not (name.endswith((".pkl", ".pickle", "data.pkl")) or _looks_pickle(data)):
                    continue
                out.append((name, data))
            return out or None
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError,
            RuntimeError, zipfile.LargeZipFile, zlib.error, struct.error):
        return None


_FLAGS_HIDING = 0x1 | 0x20 | 0x40  # encrypted, patch data, strong encryption


def _member_bytes(fh: BinaryIO, info: zipfile.ZipInfo) -> bytes | None:
    """A member's bytes from its local header on (stored, or deflated and inflated up to the
    pickle cap), ignoring the flags zipfile refuses; None for other methods."""
    fh.seek(info.header_offset)
    head = fh.read(30)
    if len(head) < 30 or head[:4] != b"PK\x03\x04":
        return None
    nlen, xlen = struct.unpack_from("<HH", head, 26)
    fh.seek(info.header_offset + 30 + nlen + xlen)
    raw = fh.read(min(info.compress_size, pickle_scan.MAX_PICKLE_BYTES))
    if info.compress_type == zipfile.ZIP_STORED:
        return raw
    if info.compress_type == zipfile.ZIP_DEFLATED:
        return zlib.decompressobj(-15).decompress(raw, pickle_scan.MAX_PICKLE_BYTES)
    return None


def _parses(data: bytes) -> bool:
    """True when ``data`` reads as a pickle (names a global or reaches STOP)."""
    scan = pickle_scan.scan_pickle(data, mode="memory", partial=True)
    return bool(scan.globals) or scan.error is None


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


class AccelerateRngFormat(StorageSalvage):
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


FORMATS = [AccelerateRngFormat, PickleFileFormat]
