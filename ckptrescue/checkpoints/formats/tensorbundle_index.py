"""Read a TensorBundle ``.index`` into header + entries, with findings for every problem.

Pure apart from reading the ``.index`` file (through :func:`sstable.read_table`). Damaged blocks
do not stop the read: their entries come back with ``trusted=False``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ckptrescue.checkpoints.formats.protowire import WireError
from ckptrescue.checkpoints.formats.sstable import TableScan, read_table
from ckptrescue.checkpoints.formats.tensorbundle_entries import (
    BundleEntry,
    BundleHeader,
    decode_entry,
    decode_header,
    decode_slice_key,
)
from ckptrescue.model import Finding, Severity

DATA_RE = re.compile(r"^(?P<prefix>.+)\.data-(?P<i>\d{5})-of-(?P<n>\d{5})$")

_SS_CODES = {
    "truncated": ("SS001", Severity.CRITICAL), "bad-magic": ("SS001", Severity.CRITICAL),
    "block-checksum": ("SS002", Severity.ERROR), "bad-handle": ("SS003", Severity.ERROR),
    "block-truncated": ("SS003", Severity.ERROR), "block-parse": ("SS003", Severity.ERROR),
    "compressed": ("SS005", Severity.ERROR), "unrecovered": ("SS006", Severity.ERROR),
}


def index_path(prefix: Path) -> Path:
    return prefix.with_name(prefix.name + ".index")


def shard_path(prefix: Path, i: int, n: int) -> Path:
    return prefix.with_name(f"{prefix.name}.data-{i:05d}-of-{n:05d}")


def data_files(prefix: Path) -> list[Path]:
    """Every ``PREFIX.data-NNNNN-of-MMMMM`` file next to the prefix, sorted."""
    parent = prefix.parent
    if not parent.is_dir():
        return []
    out = []
    for p in parent.iterdir():
        m = DATA_RE.match(p.name)
        if m and m.group("prefix") == prefix.name and p.is_file():
            out.append(p)
    return sorted(out)


def prefix_of(path: Path) -> Path | None:
    """The bundle prefix a path names: ``X.index``, ``X.data-…`` or ``X`` itself."""
    name = path.name
    if name.endswith(".index"):
        return path.with_name(name[: -len(".index")])
    m = DATA_RE.match(name)
    if m:
        return path.with_name(m.group("prefix"))
    if index_path(path).exists() or data_files(path):
        return path
    return None


@dataclass
class BundleIndex:
    prefix: Path
    header: BundleHeader | None = None
    entries: list[BundleEntry] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    table: TableScan | None = None

    @property
    def index_truncated(self) -> bool:
        return bool(self.table and any(p.kind in ("truncated", "bad-magic")
                                       for p in self.table.problems))

    @property
    def index_damaged(self) -> bool:
        return bool(self.table and self.table.problems)


def read_index(prefix: Path) -> BundleIndex:
    """Parse ``PREFIX.index`` (which must exist) into a :class:`BundleIndex`."""
    path = index_path(prefix)
    out = BundleIndex(prefix)
    table = read_table(path)
    out.table = table
    ev = str(path)
    for prob in table.problems:
        code, sev = _SS_CODES.get(prob.kind, ("SS003", Severity.ERROR))
        out.findings.append(Finding(code, sev, prob.message, evidence=ev, offset=prob.offset,
                                    length=prob.length, source="sstable",
                                    details={"kind": prob.kind}))
    if table.recovered_by_scan:
        trusted = sum(1 for e in table.entries if e.trusted)
        out.findings.append(Finding(
            "SS004", Severity.WARNING,
            f"{len(table.entries)} entries recovered by scanning for block trailers "
            f"({trusted} from blocks whose CRC32C verifies)", evidence=ev, source="sstable",
            details={"recovered": len(table.entries), "trusted": trusted}))
    seen: set[bytes] = set()
    for item in table.entries:
        if item.key in seen:
            continue
        seen.add(item.key)
        if item.key == b"":
            try:
                out.header = decode_header(item.value)
            except WireError as exc:
                out.findings.append(Finding("TB005", Severity.ERROR,
                                            f"bundle header undecodable: {exc}", evidence=ev,
                                            source="tensorbundle"))
            continue
        try:
            if item.key.startswith(b"\x00"):
                name, spec = decode_slice_key(item.key)
                entry = decode_entry(name, item.value)
                entry.parent, entry.slice = name, spec
            else:
                entry = decode_entry(item.key.decode("utf-8", "replace"), item.value)
        except (WireError, UnicodeDecodeError) as exc:
            shown = item.key.decode("utf-8", "replace").strip("\x00")
            out.findings.append(Finding(
                "TB006", Severity.ERROR, f"entry {shown!r} undecodable: {exc}", evidence=ev,
                offset=item.block_offset, source="tensorbundle", tensors=(shown,)))
            continue
        entry.trusted = item.trusted
        out.entries.append(entry)
    if out.header is None and not table.recovered_by_scan:
        out.findings.append(Finding("TB005", Severity.ERROR, "the bundle header entry is missing",
                                    evidence=ev, source="tensorbundle"))
    if out.header and (out.header.endianness != 0):
        out.findings.append(Finding("TB012", Severity.WARNING,
                                    "big-endian bundle: numeric checks read bytes as stored",
                                    evidence=ev, source="tensorbundle"))
    return out


def piece_name(entry: BundleEntry) -> str:
    return entry.parent or entry.key


MAX_SHARDS = 99999  # "%05d-of-%05d": more is a damaged header, not a real bundle


def shard_count(index: BundleIndex, prefix: Path) -> int:
    """Shards of the bundle: the header's count when plausible, else from files and entries."""
    if index.header is not None and 0 < index.header.num_shards <= MAX_SHARDS:
        return index.header.num_shards
    counts = [int(m.group("n")) for p in data_files(prefix) if (m := DATA_RE.match(p.name))]
    if counts:
        return min(max(counts), MAX_SHARDS)
    ids = [e.shard_id for e in index.entries if e.shard_id < MAX_SHARDS]
    return 1 + max(ids, default=0)


def sliced_parents(index: BundleIndex) -> dict[str, BundleEntry]:
    return {e.key: e for e in index.entries if e.is_sliced_parent}
