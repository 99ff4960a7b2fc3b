"""torch.save zip archives (torch >= 1.6): structure, CRC per record, tensor map, numerics.

Detected from structure: an end-of-central-directory record whose entries include
``<prefix>/data.pkl`` or ``<prefix>/data/<key>``, or, when the tail is gone, local headers with
those names near the start. So a truncated or partly zeroed archive is still a damaged torch zip
(torch itself only sniffs the first four bytes, reference §1.1).

The central directory is authoritative; without it local headers are walked forward using the
pickle's declared sizes (``numel x itemsize``) and data descriptors (§1.9). Each storage record's
CRC-32 is streamed and compared (0 = not recorded: unverifiable, not damaged; §1.4); record
sizes are compared with the pickle; ``.data/serialization_id`` is cross-checked as a warning.
The pickle is inspected by ``pickle_scan`` (never executed); a global outside the weights-only
allowlist makes the verdict ``unsafe``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, Verdict
from ckptrescue.checkpoints.formats import (
    pickle_policy,
    pickle_scan,
    tensormap,
    torch_rebuild,
    torch_zip_shadow,
    torch_zip_view,
    zipinflate,
    zipwalk,
)
from ckptrescue.checkpoints.formats.pickle_verdict import judge
from ckptrescue.checkpoints.formats.tensormap import StorageCheck, StorageSalvage
from ckptrescue.checkpoints.formats.tolerant_read import open_evidence
from ckptrescue.checkpoints.formats.torch_zip_records import (
    Bounded,
    ZipProbe,
    byteorder_of,
    check_records,
    check_serialization_id,
    declared_sizes,
    read_pickle,
    storage_alignment,
)
from ckptrescue.checkpoints.formats.torch_zip_view import finding

_DATA_RE = re.compile(r"^(?P<prefix>(?:.*/)?)data/(?P<key>[^/]+)$")
_META = ("version", ".data/version", "byteorder", ".format_version", ".storage_alignment",
         ".data/serialization_id")


def _prefix_of(names: list[str]) -> str | None:
    for name in names:
        if name.endswith("data.pkl") and (name == "data.pkl" or name.endswith("/data.pkl")):
            return name[: -len("data.pkl")]
    for name in names:
        m = _DATA_RE.match(name)
        if m:
            return m.group("prefix")
    return None


def looks_like_torch_zip(fh: BinaryIO, start: int = 0, end: int | None = None) -> bool:
    """Structure-based detection (EOCD names, else local header names near the start)."""
    try:
        layout = zipwalk.read_central(fh, start, end, local_headers=False)  # names only
    except Exception:  # noqa: BLE001 - detection never raises: a hostile file is just not ours
        layout = None
    if layout is not None and _prefix_of([r.name for r in layout.records]) is not None:
        return True
    try:
        head = zipwalk.find_local_names(fh) if start == 0 else []
    except Exception:  # noqa: BLE001
        return False
    return _prefix_of(head) is not None


def probe_zip(fh: BinaryIO, path: str, *, start: int = 0, end: int | None = None,
              do_numeric: bool = True, name_prefix: str = "",
              extra_allowed: frozenset[str] = frozenset()) -> ZipProbe:
    """Verify one torch zip in ``[start, end)`` of ``fh``; names get ``name_prefix``.

    ``extra_allowed``: exact qualified names accepted besides torch's weights-only list (a
    multi-rank family's own classes, ``ProbeOptions.extra_allowed``). The phases, in order:
    the first local header, the layout (central directory, else a forward walk), the records
    as torch's reader sees them, ``data.pkl`` and what it references, every storage record,
    the records nothing references and the metadata records, then the findings per storage."""
    import os

    if end is None:
        end = os.fstat(fh.fileno()).st_size
    probing = ZipProbing(fh, path, start, end, do_numeric=do_numeric, name_prefix=name_prefix,
                         extra_allowed=extra_allowed)
    probing.local_header()
    probing.read_layout()
    probing.read_records()
    probing.read_data_pickle()
    probing.name_storages()
    probing.check_storages()
    probing.check_other_records()
    probing.storage_findings()
    return probing.out


class ForwardHint:
    """The forward walk's size hint (no central directory): ``data.pkl`` is read as it is
    met, and the sizes it declares tell where each later storage record ends."""

    def __init__(self, fh: BinaryIO, end: int) -> None:
        self.fh, self.end = fh, end
        self.scan: pickle_scan.PickleScan | None = None

    def __call__(self, name: str, data_offset: int) -> int | None:
        if name.endswith("data.pkl"):
            self.fh.seek(data_offset)
            try:
                self.scan = torch_rebuild.scan_torch_pickle(Bounded(self.fh, self.end),
                                                            start=data_offset)
            except pickle_scan.PickleError:
                return None
            return self.scan.end
        m = _DATA_RE.match(name)
        if m and self.scan is not None:
            return declared_sizes(self.scan).get(m.group("key"))
        return None


class ZipProbing:
    """One probe of a torch zip, phase by phase (:func:`probe_zip`); each phase adds to
    ``out`` (findings, verdicts, storages, tensors) and leaves what the next one reads."""

    def __init__(self, fh: BinaryIO, path: str, start: int, end: int, *, do_numeric: bool,
                 name_prefix: str, extra_allowed: frozenset[str]) -> None:
        self.fh, self.path, self.start, self.end = fh, path, start, end
        self.do_numeric, self.name_prefix = do_numeric, name_prefix
        self.extra_allowed = extra_allowed
        self.out = ZipProbe()
        self.hint = ForwardHint(fh, end)
        self.layout: Any = None
        self.records: Any = None
        self.prefix = ""
        self.alignment = 64
        self.pkl: zipwalk.ZipRecord | None = None
        self.scan: pickle_scan.PickleScan | None = None
        self.shadow: Any = ([], [], [])
        self.named: list[tuple[str, Any]] = []
        self.refs_by_key: dict[str, list[Any]] = {}

    def _find(self, code: str, title: str, verdict: Verdict | None = None, **where: Any) -> None:
        self.out.findings.append(finding(code, title, evidence=self.path, **where))
        if verdict is not None:
            self.out.verdicts.append(verdict)

    def allowed(self, g: str) -> bool:
        return pickle_scan.weights_only_allowed(g) or pickle_policy.extra_allowed(
            g, self.extra_allowed)

    def local_header(self) -> None:
        head = zipwalk.pread(self.fh, self.start, 4)
        if head != zipwalk.LOCAL_SIG:  # torch.load: _is_zipfile reads exactly the first 4 bytes
            self._find("TZ022", f"the archive starts with {head!r} instead of a local header: "
                       "torch.load does not read it as a zip (bytes before the first record)",
                       Verdict.DAMAGED, offset=self.start)

    def read_layout(self) -> None:
        """The central directory; without one (or one naming no torch zip), the local records
        walked forward (truncated)."""
        layout = None
        try:
            layout = zipwalk.read_central(self.fh, self.start, self.end)
        except (OSError, ValueError) as exc:
            self._find("TZ011", f"central directory unreadable: {exc}")
        if layout is not None and _prefix_of([r.name for r in layout.records]) is None:
            layout = None
        if layout is not None:
            for _kind, msg, off in layout.problems:
                self._find("TZ011", msg, Verdict.DAMAGED, offset=off)
            self.layout = layout
            return
        layout = zipwalk.walk_local(self.fh, self.start, self.end, size_hint=self.hint)
        last = layout.records[-1] if layout.records else None
        self._find("TZ001", "no end-of-central-directory record: archive truncated or tail "
                   f"damaged; walked {len(layout.records)} local records forward",
                   Verdict.TRUNCATED, offset=layout.walk_end)
        if last is not None and last.truncated:
            self._find("TZ006", f"record {last.name} cut off at end of file",
                       offset=last.data_offset, length=last.compressed_size)
        self.layout = layout

    def read_records(self) -> None:
        """The records by name as torch's reader sees them, the archive's prefix, alignment
        and byte order."""
        fh, layout, out = self.fh, self.layout, self.out
        records: Any = layout.by_name()
        if layout.central_directory:
            records, rule_findings, rule_verdicts = torch_zip_view.reader_findings(
                fh, layout, self.path)
            out.findings.extend(rule_findings)
            out.verdicts.extend(rule_verdicts)
        view_prefix = records.view.prefix if isinstance(records, torch_zip_view.Records) and \
            records.view is not None else None
        self.prefix = view_prefix if view_prefix is not None and \
            records.get(view_prefix + "data.pkl") is not None \
            else (_prefix_of(list(records)) or "")
        out.prefix = self.prefix
        out.records = [{"name": r.name, "header_offset": r.header_offset,
                        "data_offset": r.data_offset, "length": r.compressed_size,
                        "crc32": r.crc, "source": r.source} for r in layout.records]
        self.alignment = storage_alignment(fh, records.get(self.prefix + ".storage_alignment"))
        out.byteorder = byteorder_of(fh, records.get(self.prefix + "byteorder"))
        self.records = records

    def read_data_pickle(self) -> None:
        """``data.pkl`` (its bytes, torch's rules) and the pickles a reader could take
        instead of it."""
        out = self.out
        self.pkl = self.records.get(self.prefix + "data.pkl")
        if self.pkl is None:
            self._find("TZ009", "data.pkl record missing: tensor names lost", Verdict.INCOMPLETE)
        else:
            self.scan, pkl_findings, pkl_verdicts = read_pickle(
                self.fh, self.pkl, self.path, self.alignment, self.start, self.end,
                self.hint.scan)
            out.findings.extend(pkl_findings)
            out.verdicts.extend(pkl_verdicts)
        self.shadow = torch_zip_shadow.shadowed_pickles(self.fh, self.layout, self.pkl,
                                                        self.path, self.end, self.allowed)
        out.findings.extend(self.shadow[0])
        out.verdicts.extend(self.shadow[1])

    def name_storages(self) -> None:
        """What the pickle references: its globals judged, the tensors by name, the
        storages by key."""
        out, scan = self.out, self.scan
        if scan is not None:
            out.root = scan.root
            out.globals = sorted(set(scan.globals))
            out.unsafe_globals = scan.unsafe_globals(self.allowed)
            if out.unsafe_globals:
                self._find("PK001", "pickle references globals outside the weights-only "
                           "allowlist: " + ", ".join(out.unsafe_globals), Verdict.UNSAFE,
                           details={"globals": out.unsafe_globals})
            # frame overruns, scan limits and opcodes torch's weights-only unpickler refuses
            extra, extra_verdicts = judge(scan, self.path, allowed=lambda g: True,
                                          weights_only=True, label="data.pkl")
            out.findings.extend(extra)
            out.verdicts.extend(extra_verdicts)
            name_prefix = self.name_prefix
            for name, ref in pickle_scan.iter_named(scan.root):
                full = name_prefix + name if name else name_prefix.rstrip(".") or "<root>"
                self.named.append((full, ref))
                pref = ref.storage if isinstance(ref, pickle_scan.TensorRef) else ref
                if isinstance(pref, pickle_scan.PersistentRef) and pref.is_storage:
                    self.refs_by_key.setdefault(pref.key, []).append(ref)
            for pref in scan.persistent_refs:
                if not pref.is_storage:
                    self._find("PK003", f"persistent id {pref.pid!r:.80} is not a torch "
                               "storage")
                else:
                    self.refs_by_key.setdefault(pref.key, []).append(pref)
        out.unsafe_globals += [g for g in self.shadow[2] if g not in out.unsafe_globals]

    def _jobs(self) -> tuple[list[tuple[zipwalk.ZipRecord, StorageCheck, list[str]]], bool]:
        """(the storage records to read, whether every payload's CRC-32 is 0)."""
        all_crc_zero, any_payload = True, False
        jobs: list[tuple[zipwalk.ZipRecord, StorageCheck, list[str]]] = []
        names_by_key: dict[str, list[str]] = {}
        for full, ref in self.named:
            pref = ref.storage if isinstance(ref, pickle_scan.TensorRef) else ref
            if isinstance(pref, pickle_scan.PersistentRef) and pref.is_storage:
                names_by_key.setdefault(pref.key, []).append(full)
        for key, refs in self.refs_by_key.items():
            rname = f"{self.prefix}data/{key}"
            first = next(r for r in refs if isinstance(r, pickle_scan.PersistentRef)) \
                if any(isinstance(r, pickle_scan.PersistentRef) for r in refs) \
                else refs[0].storage
            dtype = tensormap.storage_dtype(refs)
            sc = StorageCheck(key=key, file=self.path, dtype=dtype,
                              declared=tensormap.declared_nbytes(first, dtype))
            self.out.storages[key] = sc
            rec = self.records.get(rname)
            if rec is None:
                sc.mark("missing", f"record {rname} not in the archive")
                continue
            jobs.append((rec, sc, names_by_key.get(key, [])))
            if rec.compressed_size:
                any_payload = True
                if rec.crc:
                    all_crc_zero = False
        return jobs, any_payload and all_crc_zero

    def check_storages(self) -> None:
        """Every storage record read (once, in segments on a few threads: streaming.py);
        records are independent. Without names, each storage record on its own."""
        fh, path, out, prefix, records = self.fh, self.path, self.out, self.prefix, self.records
        jobs, crc_all_zero = self._jobs()
        if isinstance(records, torch_zip_view.Records):
            reads = [prefix + "data.pkl", *(prefix + m for m in torch_zip_view.READ_META),
                     *(f"{prefix}data/{k}" for k in self.refs_by_key)]
            read_findings, read_verdicts = torch_zip_view.check_reads(
                self.layout, records, reads, path, self.end)
            out.findings.extend(read_findings)
            out.verdicts.extend(read_verdicts)
        check_records(fh, jobs, path, self.alignment, self.start, self.end, self.do_numeric,
                      out)
        if self.scan is None:  # tensor names lost: still verify every storage record
            for rname, rec in records.items():
                m = _DATA_RE.match(rname)
                if not m or m.group("prefix") != prefix:
                    continue
                sc = StorageCheck(key=m.group("key"), file=path, declared=rec.compressed_size)
                out.storages[sc.key] = sc
                jobs.append((rec, sc, []))
            check_records(fh, jobs, path, self.alignment, self.start, self.end, False, out)
        if crc_all_zero:
            for sc in out.storages.values():
                if sc.status == "ok":
                    sc.status = "unverified"
            self._find("TZ003", "every record's CRC-32 is 0 (saved with compute_crc32=False "
                       "or skip_data): payloads cannot be verified")
        missing = [k for k, sc in out.storages.items() if sc.status == "missing"]
        if missing and self.layout.central_directory:
            self._find("TZ005", f"{len(missing)} storage record(s) missing: "
                       + ", ".join(f"data/{k}" for k in missing[:20]), Verdict.INCOMPLETE,
                       details={"records": [f"{prefix}data/{k}" for k in missing]})
        elif missing:
            self._find("TZ006", f"{len(missing)} storage record(s) lost past the truncation "
                       "point: " + ", ".join(f"data/{k}" for k in missing[:20]),
                       offset=self.layout.walk_end,
                       details={"records": [f"{prefix}data/{k}" for k in missing]})

    def check_other_records(self) -> None:
        """Records the pickle does not reference; the metadata records' CRC-32; the
        serialization id."""
        fh, records, prefix = self.fh, self.records, self.prefix
        orphans = [n for n in records if _DATA_RE.match(n) and _DATA_RE.match(n).group("key")
                   not in self.refs_by_key and n.startswith(prefix)] \
            if self.scan is not None else []
        if orphans:
            self._find("TZ010", f"{len(orphans)} record(s) not referenced by the pickle: "
                       + ", ".join(orphans[:10]))
        for meta in _META:
            rec = records.get(prefix + meta)
            if rec is None or rec.data_offset is None or rec.compressed_size is None:
                continue
            if rec.crc and not rec.truncated and rec.method == 8:  # deflated: CRC of the inflated
                why = zipinflate.judge(zipinflate.inflate_member(
                    fh, rec.data_offset, rec.compressed_size, rec.size), rec.size, rec.crc)
                if why:
                    self._find("TZ012", f"{rec.name}: {why}", Verdict.DAMAGED,
                               offset=rec.data_offset, length=rec.compressed_size)
            elif rec.crc and not rec.truncated:
                crc, got = zipwalk.crc_range(fh, rec.data_offset, rec.compressed_size)
                if got < rec.compressed_size or crc != rec.crc:
                    self._find("TZ012", f"{rec.name}: CRC-32 mismatch", Verdict.DAMAGED,
                               offset=rec.data_offset, length=rec.compressed_size)
        if self.layout.central_directory:
            check_serialization_id(fh, self.layout, prefix, self.path, self.out)

    def storage_findings(self) -> None:
        """The tensors (by name, over their storages) and one finding per damaged or
        truncated storage naming its tensors; the numeric findings."""
        out, prefix, path = self.out, self.prefix, self.path
        out.tensors = tensormap.tensor_records(self.named, out.storages, out.strides)
        for key, sc in out.storages.items():
            if sc.status == "damaged":
                names = [t.name for t in out.tensors if t.storage == key]
                by_code: dict[str, list[str]] = {}
                for code, reason in sc.codes:
                    by_code.setdefault(code, []).append(reason)
                for code, reasons in by_code.items():
                    self._find(code, f"{prefix}data/{key}: " + "; ".join(reasons),
                               offset=sc.data_offset, length=sc.record_size, tensors=names)
            elif sc.status == "truncated":
                names = [t.name for t in out.tensors if t.storage == key and t.status != "ok"]
                self._find("TZ006", f"{prefix}data/{key}: " + "; ".join(sc.reasons),
                           offset=sc.data_offset, length=sc.declared, tensors=names)
            elif sc.status == "missing" and not self.layout.central_directory:
                for t in out.tensors:
                    if t.storage == key:
                        t.reasons.append("record lost with the truncated tail")
        if self.do_numeric:
            out.findings.extend(tensormap.numeric_findings(out.storages, out.tensors, path))


class TorchZipFormat(StorageSalvage):
    """torch.save zip archive (``torch-zip``)."""

    name: ClassVar[str] = "torch-zip"
    priority: ClassVar[int] = 20

    @classmethod
    def detect(cls, path: Path) -> bool:
        if not path.is_file():
            return False
        try:
            with open(path, "rb") as fh:
                return looks_like_torch_zip(fh)
        except Exception:  # noqa: BLE001 - detection never raises
            return False

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        try:
            with open_evidence(path) as fh:
                part = probe_zip(fh, str(path), do_numeric=options.numeric,
                                 extra_allowed=options.extra_allowed)
        except OSError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failure inside a file is a finding on it
            report = CheckpointReport(path=str(path), format=cls.name,
                                      verdict=Verdict.UNREADABLE, files=[str(path)])
            report.findings.append(finding(
                "TZ021", f"the zip parser stopped: {type(exc).__name__}: {exc}"[:300],
                evidence=str(path)))
            return report
        report = CheckpointReport(path=str(path), format=cls.name, verdict=Verdict.INTACT,
                                  tensors=part.tensors, findings=part.findings,
                                  files=[str(path)])
        report.extra["globals"] = part.globals
        report.extra["unsafe_globals"] = part.unsafe_globals
        report.extra["strides"] = part.strides
        report.extra["records"] = part.records
        report.extra["byteorder"] = part.byteorder
        report.extra["storages"] = tensormap.storage_map(part.storages)
        tensormap.finalize(report, part.verdicts)
        return report


FORMATS = [TorchZipFormat]

# Public name: whether a list of zip member names is a torch zip's (``zip_archive``)
prefix_of = _prefix_of
