"""The ``data.pkl`` records of a torch zip that ``torch.load`` does not read.

A zip may hold two records named ``archive/data.pkl`` (or ``data.pkl`` under another prefix):
torch reads one (miniz's sorted lookup, :mod:`torch_zip_view`), Python's ``zipfile`` the last of
a name, a scanner the first. Whichever a loader picks, it unpickles that one, so a payload in
any of them makes the file ``unsafe`` (``PK001``/``PK010``/``PK005``), whatever order they come
in. Only safety is judged here: tensor names and storages come from the record torch reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import BinaryIO

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.formats import pickle_scan, torch_zip_view, zipwalk
from ckptrescue.checkpoints.formats.pickle_verdict import judge
from ckptrescue.checkpoints.formats.tensormap import finding
from ckptrescue.model import Finding

_UNSAFE_CODES = ("PK001", "PK005", "PK010")


def is_pickle_name(name: str) -> bool:
    low = name.lower()
    return low == "data.pkl" or low.endswith("/data.pkl")


def _record_bytes(fh: BinaryIO, rec: zipwalk.ZipRecord, end: int) -> bytes | None:
    if rec.data_offset is None:
        return None
    if rec.method == 8:
        return torch_zip_view.inflate_small(fh, rec)[0]
    if rec.method != 0:
        return None
    size = rec.compressed_size
    if size is None or size > pickle_scan.MAX_PICKLE_BYTES:
        size = min(end - rec.data_offset, pickle_scan.MAX_PICKLE_BYTES)
    return zipwalk.pread(fh, rec.data_offset, size)


def shadowed_pickles(fh: BinaryIO, layout: zipwalk.ZipLayout, read: zipwalk.ZipRecord | None,
                     path: str, end: int, allowed: Callable[[str], bool],
                     ) -> tuple[list[Finding], list[Verdict], list[str]]:
    """Findings, verdicts and off-list globals of every ``data.pkl`` record but ``read``."""
    findings: list[Finding] = []
    verdicts: list[Verdict] = []
    named: list[str] = []
    skip = read.header_offset if read is not None else None
    for rec in layout.records:
        if rec.header_offset == skip or not is_pickle_name(rec.name):
            continue
        data = _record_bytes(fh, rec, end)
        if not data:
            continue
        scan = pickle_scan.scan_pickle(data, start=rec.data_offset or 0, partial=True)
        where = f"{rec.name} (header at {rec.header_offset}; torch reads another record of " \
            "this name, other zip readers this one)"
        bad = scan.unsafe_globals(allowed)
        if bad:
            findings.append(finding(
                "PK001", f"{where} references globals outside the weights-only allowlist: "
                + ", ".join(bad), evidence=path, offset=rec.header_offset,
                details={"globals": bad, "record": rec.header_offset}))
            verdicts.append(Verdict.UNSAFE)
            named.extend(g for g in bad if g not in named)
        extra, _ = judge(scan, path, allowed=lambda g: True, weights_only=False, label=where)
        for f in extra:  # only safety: the record torch reads gives the rest
            if f.code in _UNSAFE_CODES:
                findings.append(f)
                verdicts.append(Verdict.UNSAFE)
    return findings, verdicts, named
