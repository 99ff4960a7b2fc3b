"""TensorFlow TensorBundle checkpoints (``PREFIX.index`` + ``PREFIX.data-NNNNN-of-MMMMM``).

Who calls it: the generic checkpoint probe (``ckptrescue.checkpoints.probes.checkpoints``) through
``FORMATS``, SavedModel (its ``variables/variables`` bundle), ``salvage`` through
:meth:`TensorBundleFormat.iter_verified_tensors`.

No TensorFlow import: the ``.index`` SSTable is parsed by :mod:`sstable`, entries by
:mod:`tensorbundle_entries`, every stored piece (a variable, or a slice of a sliced variable;
sliced parents carry no bytes and are skipped) is CRC32C-verified streaming by
:mod:`tensorbundle_verify`, continuing past every error and naming each variable.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from ckptrescue.checkpoints.base import CheckpointReport, ProbeOptions, TensorRecord, Verdict
from ckptrescue.checkpoints.formats import dtypes, streaming
from ckptrescue.checkpoints.formats.sstable import is_sstable
from ckptrescue.checkpoints.formats.tensorbundle_entries import BundleEntry
from ckptrescue.checkpoints.formats.tensorbundle_index import (
    DATA_RE,
    BundleIndex,
    data_files,
    index_path,
    piece_name,
    prefix_of,
    read_index,
    shard_count,
    shard_path,
    sliced_parents,
)
from ckptrescue.checkpoints.formats.tensorbundle_slices import check_slices
from ckptrescue.checkpoints.formats.tensorbundle_verify import (
    NUMERIC_CHUNK,
    PieceResult,
    Shard,
    close_shards,
    judge_crc,
    open_shards,
    precheck,
    variable_length,
    verify_piece,
)
from ckptrescue.checkpoints.formats.tf_checkpoint_state import findings_for_prefix
from ckptrescue.checkpoints.formats.tf_findings import (
    GuardedScan,
    numeric_findings,
    numeric_scan,
    numeric_scan_parts,
    verdict_from,
)
from ckptrescue.model import Finding, Severity

FORMAT = "tf-tensorbundle"
TEMPSTATE_RE = re.compile(r"\.tempstate\d*$")


def piece_storage(entry: BundleEntry, n_shards: int) -> str:
    base = f"shard {entry.shard_id}/{n_shards}"
    return f"{base} slice[{entry.slice.text()}]" if entry.slice is not None else base


def leftover_findings(prefix: Path) -> list[Finding]:
    """``PREFIX_temp/`` folders and ``*.tempstate*`` files of this prefix (interrupted save)."""
    out = []
    temp = prefix.with_name(prefix.name + "_temp")
    if temp.is_dir():
        out.append(Finding("TB008", Severity.WARNING,
                           f"interrupted-save folder {temp.name}/ left behind", evidence=str(temp),
                           source="tensorbundle"))
    if prefix.parent.is_dir():
        for p in sorted(prefix.parent.iterdir()):
            if p.name.startswith(prefix.name + ".") and TEMPSTATE_RE.search(p.name):
                out.append(Finding("TB008", Severity.WARNING,
                                   f"temporary file {p.name} left by an interrupted save",
                                   evidence=str(p), source="tensorbundle"))
    return out


def _pieces(index: BundleIndex) -> tuple[list[BundleEntry], list[Finding]]:
    """Entries that hold bytes (plain variables and slices), plus slice-consistency findings."""
    findings = check_slices(index)
    return [e for e in index.entries if not e.is_sliced_parent], findings


def probe_bundle(prefix: Path, options: ProbeOptions, *, fmt: str = FORMAT,
                 path: str | None = None) -> CheckpointReport:
    """Verify the bundle at ``prefix`` (``PREFIX.index`` + shards)."""
    report = CheckpointReport(path=path or str(prefix), format=fmt, verdict=Verdict.INTACT)
    report.extra["prefix"] = str(prefix)
    report.findings.extend(leftover_findings(prefix))
    report.findings.extend(findings_for_prefix(prefix))
    idx = index_path(prefix)
    datas = data_files(prefix)
    if not idx.exists():
        report.files = [str(p) for p in datas]
        if datas:
            report.findings.append(Finding(
                "TB001", Severity.CRITICAL,
                f"{idx.name} is missing but {len(datas)} data shard(s) exist: the save was "
                "interrupted (data is renamed into place before the index)",
                evidence=str(idx), source="tensorbundle"))
            report.verdict = Verdict.INCOMPLETE
        else:
            report.findings.append(Finding("TB001", Severity.CRITICAL,
                                           f"neither {idx.name} nor any data shard exists",
                                           evidence=str(idx), source="tensorbundle"))
            report.verdict = Verdict.INCOMPLETE
        return report
    index = read_index(prefix)
    report.findings.extend(index.findings)
    n = shard_count(index, prefix)
    if index.header is not None and index.header.num_shards != n:
        report.findings.append(Finding(
            "TB014", Severity.ERROR, f"the header declares {index.header.num_shards} shards; "
            f"{n} assumed from the shard files and entries", evidence=str(idx),
            source="tensorbundle"))
    report.extra.update({"num_shards": n, "index_entries": len(index.entries)})
    if index.header is not None:
        report.extra["header"] = {"num_shards": index.header.num_shards,
                                  "endianness": index.header.endianness,
                                  "version": index.header.version_producer}
    pieces, slice_findings = _pieces(index)
    report.findings.extend(slice_findings)
    shards = open_shards(prefix, n)
    try:
        _verify_all(report, index, pieces, shards, options, n)
    finally:
        close_shards(shards)
    expected = {shard_path(prefix, i, n) for i in range(n)}
    report.files = [str(idx)] + [str(s.path) for s in shards.values() if s.size is not None]
    for p in datas:
        if p not in expected:
            report.findings.append(Finding("TB007", Severity.WARNING,
                                           f"{p.name} is not one of the {n} shards the index names",
                                           evidence=str(p), source="tensorbundle"))
    parents = sliced_parents(index)
    have = {t.name for t in report.tensors}
    for name in sorted({t for f in slice_findings if f.code == "TB013" for t in f.tensors}):
        _add(report.missing_tensors, name)
        if name not in have and name in parents:
            report.tensors.append(TensorRecord(
                name=name, dtype=parents[name].dtype_name, shape=parents[name].shape,
                status="missing", reasons=["no slice entry"]))
    for names in (report.damaged_tensors, report.missing_tensors, report.suspect_tensors):
        names[:] = dict.fromkeys(names)  # _add appends; duplicates go here, in linear time
    report.extra["variables"] = len({piece_name(e) for e in index.entries})
    report.verdict = verdict_from(report, index_truncated=index.index_truncated)
    return report


def _verify_all(report: CheckpointReport, index: BundleIndex, pieces: list[BundleEntry],
                shards: dict[int, Shard], options: ProbeOptions, n: int) -> None:
    ends: dict[int, int] = defaultdict(int)
    by_shard: dict[int, list[BundleEntry]] = defaultdict(list)  # one pass, not one per shard
    for e in pieces:
        ends[e.shard_id] = max(ends[e.shard_id], e.offset + e.size)
        by_shard[e.shard_id].append(e)
    missing_shards = set()
    for i, s in shards.items():
        if s.size is None:
            missing_shards.add(i)
            names = sorted({piece_name(e) for e in by_shard.get(i, ())})
            report.findings.append(Finding(
                "TB003", Severity.CRITICAL, f"data shard {s.path.name} is missing "
                f"({len(names)} variable(s) lose their bytes)", evidence=str(s.path),
                source="tensorbundle", tensors=tuple(names)))
        elif s.size < ends.get(i, 0):
            names = sorted({piece_name(e) for e in by_shard.get(i, ())
                            if e.offset + e.size > s.size})
            report.findings.append(Finding(
                "TB004", Severity.ERROR, f"data shard {s.path.name} is {s.size} bytes but its "
                f"entries need {ends[i]}: truncated ({len(names)} variable(s) cut)",
                evidence=str(s.path), offset=s.size, length=ends[i] - s.size,
                source="tensorbundle", tensors=tuple(names)))
        elif s.size > ends.get(i, 0) and ends.get(i, 0) and not index.index_damaged:
            report.findings.append(Finding(
                "TB007", Severity.INFO, f"{s.size - ends[i]} bytes after the last entry of "
                f"{s.path.name}", evidence=str(s.path), offset=ends[i],
                length=s.size - ends[i], source="tensorbundle"))
    bad_shard_id = [e for e in pieces if e.shard_id not in shards]
    if bad_shard_id:
        report.findings.append(Finding(
            "TB014", Severity.ERROR, f"{len(bad_shard_id)} entries name a shard beyond the "
            f"{n} the header declares", evidence=str(index_path(index.prefix)),
            source="tensorbundle", tensors=tuple(sorted({piece_name(e) for e in bad_shard_id}))))
    untrusted_ok: list[str] = []
    parents = sliced_parents(index)
    ordered = sorted(pieces, key=lambda e: (e.shard_id, e.offset))
    results, scans = _read_pieces(ordered, shards, options)
    for e in ordered:
        name = piece_name(e)
        shard = shards.get(e.shard_id)
        result, scan = results[id(e)], scans.get(id(e))
        # A slice's record carries its variable's shape; ``storage`` says which slice it is.
        parent = parents.get(name) if e.is_slice else None
        rec = TensorRecord(
            name=name, dtype=e.dtype_name,
            shape=parent.shape if parent is not None else e.shape,
            file=str(shard.path) if shard else None, offset=e.offset, length=e.size,
            storage=piece_storage(e, n), status=result.status,
            checksum=f"crc32c:{result.calculated:08x}" if result.status == "ok" else None,
            reasons=[result.reason] if result.reason else [])
        if not e.trusted:
            rec.reasons.append("entry read from a damaged .index block")
        report.tensors.append(rec)
        ev = str(shard.path) if shard else None
        if result.status == "damaged":
            if not e.trusted:
                rec.reasons.append("the entry itself may be what is damaged")
            if not e.problem:  # slice inconsistencies are already reported (TB015)
                report.findings.append(Finding(
                    result.code, Severity.ERROR, f"{name}: {result.reason}", evidence=ev,
                    offset=e.offset, length=e.size, source="tensorbundle", tensors=(name,),
                    details={"storage": rec.storage, "entry_trusted": e.trusted}))
            _add(report.damaged_tensors, name)
        elif result.status in ("missing", "truncated"):
            _add(report.missing_tensors, name)
        elif result.status == "unverified":
            report.findings.append(Finding("TB010", Severity.WARNING, f"{name}: {result.reason}",
                                           evidence=ev, offset=e.offset, length=e.size,
                                           source="tensorbundle", tensors=(name,)))
        elif result.status == "ok":
            if not e.trusted:
                untrusted_ok.append(name)
            if scan is not None:
                found = numeric_findings(scan, name, evidence=ev)
                if found:
                    report.findings.extend(found)
                    rec.status = "suspect"
                    _add(report.suspect_tensors, name)
    if untrusted_ok:
        names = tuple(dict.fromkeys(untrusted_ok))
        report.findings.append(Finding(
            "TB009", Severity.WARNING, f"{len(names)} variable(s) read from damaged .index "
            "blocks; their data matches the recovered entries' CRC32C (names as recovered)",
            evidence=str(index_path(index.prefix)), source="tensorbundle", tensors=names))


def _read_pieces(ordered: list[BundleEntry], shards: dict[int, Shard], options: ProbeOptions,
                 ) -> tuple[dict[int, PieceResult], dict[int, GuardedScan]]:
    """Every piece's result (keyed by ``id``) and numeric scan: fixed-size pieces are read
    once per shard by :func:`streaming.read_ranges` (CRC32C and the scan in the same pass,
    chunked from each tensor's start as TensorFlow's reader does, on a few threads)."""
    results: dict[int, PieceResult] = {}
    scans: dict[int, GuardedScan] = {}
    ranges: dict[int, list[tuple[BundleEntry, streaming.ByteRange]]] = defaultdict(list)
    for e in ordered:
        shard = shards.get(e.shard_id)
        fh, size = (shard.fh, shard.size) if shard else (None, None)
        if e.problem:
            results[id(e)] = PieceResult("damaged", e.problem)
            continue
        early = precheck(fh, size, e)
        if early is not None:
            results[id(e)] = early
            continue
        if variable_length(e):
            scan = numeric_scan(e.dtype_name, e.offset, e.size,
                                name=piece_name(e)) if options.numeric else None
            results[id(e)] = verify_piece(fh, size, e, scan.feed if scan is not None else None)
            if scan is not None:
                scans[id(e)] = scan
            continue
        make = numeric_scan_parts(e.dtype_name, e.offset, e.size,
                                  name=piece_name(e)) if options.numeric else None
        ranges[e.shard_id].append((e, streaming.ByteRange(
            e.offset, e.size, checksum="crc32c", make_scan=make, align=e.offset,
            itemsize=dtypes.BY_NAME[e.dtype_name].itemsize
            if e.dtype_name in dtypes.BY_NAME else 1)))
    for shard_id, todo in ranges.items():
        fh = shards[shard_id].fh
        assert fh is not None
        streaming.read_ranges(fh, [rng for _, rng in todo], chunk=NUMERIC_CHUNK)
        for e, rng in todo:
            results[id(e)] = judge_crc(e, rng.crc, rng.got)
            if rng.scan is not None:
                scans[id(e)] = rng.scan
    return results, scans


def _add(names: list[str], name: str) -> None:
    """Append (``probe_bundle`` removes duplicates once at the end: a membership test per
    append made a bundle whose every entry is damaged quadratic)."""
    names.append(name)


def bundle_companions(prefix: Path) -> list[Path]:
    """Every file of one bundle: index, shards, temp leftovers, and the run's state file."""
    out = [index_path(prefix), *data_files(prefix)]
    temp = prefix.with_name(prefix.name + "_temp")
    if temp.exists():
        out.append(temp)
    if prefix.parent.is_dir():
        out.extend(p for p in prefix.parent.iterdir()
                   if p.name.startswith(prefix.name + ".") and TEMPSTATE_RE.search(p.name))
    meta = prefix.with_name(prefix.name + ".meta")  # TF1 Saver's MetaGraphDef
    if meta.is_file():
        out.append(meta)
    state = prefix.parent / "checkpoint"
    if state.is_file():
        out.append(state)
    return [p for p in out if p.exists()]


def claim_bundles(directory: Path) -> list[Path]:
    """The bundle prefixes in ``directory`` (including prefixes only the state file names)."""
    from ckptrescue.checkpoints.formats.tf_checkpoint_state import looks_like_state, parse_state

    names: set[str] = set()
    for p in directory.iterdir():
        if p.is_file() and p.name.endswith(".index") and (
                is_sstable(p) or data_files(p.with_name(p.name[: -len(".index")]))):
            names.add(p.name[: -len(".index")])
        elif p.is_file() and (m := DATA_RE.match(p.name)):
            names.add(m.group("prefix"))
        elif p.is_dir() and p.name.endswith("_temp"):
            names.add(p.name[: -len("_temp")])
        elif p.is_file() and TEMPSTATE_RE.search(p.name):
            base = p.with_name(TEMPSTATE_RE.sub("", p.name))  # X.index / X.data-… being written
            if base.name.endswith(".index") or DATA_RE.match(base.name):
                names.add((prefix_of(base) or base).name)
    state = directory / "checkpoint"
    if names and looks_like_state(state):
        names.update(q.name for q in parse_state(state).prefixes if q.parent == directory)
    return [directory / n for n in sorted(names)]


class TensorBundleFormat:
    """``PREFIX.index`` (+ shards): detected from the SSTable footer or the file names."""

    name: ClassVar[str] = FORMAT
    priority: ClassVar[int] = 40

    @classmethod
    def detect(cls, path: Path) -> bool:
        try:
            if path.is_dir():
                return False
            if path.name.endswith(".index"):
                return is_sstable(path) or bool(data_files(prefix_of(path) or path))
            if DATA_RE.match(path.name):
                return True
            return not path.exists() and prefix_of(path) is not None
        except OSError:
            return False

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        prefix = prefix_of(path) or path
        return probe_bundle(prefix, options)

    @classmethod
    def claim(cls, directory: Path) -> list[Path]:
        """The checkpoint roots (bundle prefixes) in ``directory``."""
        if (directory / "saved_model.pb").exists():
            return []  # the SavedModel format owns its variables/ bundle
        return claim_bundles(directory)

    @classmethod
    def companions(cls, root: Path) -> list[Path]:
        return bundle_companions(root)

    @classmethod
    def iter_verified_tensors(cls, path: Path, report: CheckpointReport,
                              ) -> Iterator[tuple[TensorRecord, str | None]]:
        from ckptrescue.checkpoints.formats.tensorbundle_salvage import bundle_salvageable

        return bundle_salvageable(prefix_of(path) or path, report)

    @classmethod
    def read_tensor_bytes(cls, path: Path, report: CheckpointReport,
                          rec: TensorRecord) -> Iterator[bytes]:
        from ckptrescue.checkpoints.formats.tensorbundle_salvage import read_bundle_tensor

        return read_bundle_tensor(prefix_of(path) or path, rec)

    # ``--load``: one sandbox child for every TensorFlow report of a run (``module:function``,
    # resolved by the generic probe so that this pure module never imports the effects layer).
    load_batch: ClassVar[str] = "ckptrescue.sandbox_children.tf_load:load_reports"


FORMATS = [TensorBundleFormat]
