"""Compare a checkpoint with a previous one (``probe --reference PREV``), streaming.

Findings: tensors of the reference that are missing (RF001) or new (RF002), shape/dtype changes
(RF003), and tensors that differ from the reference in only a few elements (RF004) — training
changes every element of a trained tensor and none of a frozen one, so a handful of changed
elements is the signature of a bit flip or a torn write; single-bit XORs are named with the bit.
Only contiguous tensors with known byte ranges are compared byte-for-byte.
"""

from __future__ import annotations

import os
from typing import Any

from ckptrescue.checkpoints.base import CheckpointReport, TensorRecord, Verdict, worst_verdict
from ckptrescue.checkpoints.formats import dtypes
from ckptrescue.checkpoints.formats.tensormap import finding
from ckptrescue.model import JsonObject

CHUNK = 1 << 20
FEW = 4


def _comparable(rec: TensorRecord, report: CheckpointReport) -> bool:
    strided = report.extra.get("strides", {})
    return (rec.file is not None and rec.offset is not None and rec.length is not None
            and rec.status in ("ok", "unverified", "suspect") and rec.name not in strided
            and rec.shape is not None)


def _diff(a: TensorRecord, b: TensorRecord) -> JsonObject:
    """Stream both byte ranges; count differing elements and keep the first few XORs."""
    import numpy as np

    info = dtypes.lookup(a.dtype)
    isz = info.itemsize if info else 1
    ucode = {1: "u1", 2: "<u2", 4: "<u4", 8: "<u8"}.get(isz, "u1")
    if ucode == "u1":
        isz = 1
    diff_elems = 0
    examples: list[dict[str, Any]] = []
    assert a.length is not None and a.offset is not None and b.offset is not None
    with open(str(a.file), "rb") as fa, open(str(b.file), "rb") as fb:
        done = 0
        while done < a.length:
            n = min(CHUNK, a.length - done)
            n -= n % isz or 0
            if n <= 0:
                n = a.length - done
            xa = os.pread(fa.fileno(), n, a.offset + done)
            xb = os.pread(fb.fileno(), n, b.offset + done)
            if len(xa) != n or len(xb) != n:
                return {"error": "short read"}
            if xa != xb:
                va = np.frombuffer(xa, dtype=ucode)
                vb = np.frombuffer(xb, dtype=ucode)
                idx = np.flatnonzero(va != vb)
                diff_elems += int(idx.size)
                for i in idx[: max(0, 8 - len(examples))]:
                    x = int(va[i]) ^ int(vb[i])
                    ex: dict[str, Any] = {"index": done // isz + int(i),
                                          "byte_offset": a.offset + done + int(i) * isz,
                                          "xor": hex(x), "bits": bin(x).count("1")}
                    if ex["bits"] == 1:
                        ex["bit"] = x.bit_length() - 1
                    examples.append(ex)
            done += n
    return {"diff_elements": diff_elems, "elements": a.length // isz, "examples": examples}


def compare(report: CheckpointReport, ref: CheckpointReport) -> None:
    """Add RF findings (and suspects) to ``report`` from a comparison with ``ref``."""
    mine = {t.name: t for t in report.tensors}
    theirs = {t.name: t for t in ref.tensors}
    ev = report.path
    missing = sorted(set(theirs) - set(mine))
    added = sorted(set(mine) - set(theirs))
    if missing:
        report.findings.append(finding("RF001", f"{len(missing)} tensor(s) of the reference "
                                       "missing", evidence=ev, tensors=missing[:500]))
    if added:
        report.findings.append(finding("RF002", f"{len(added)} tensor(s) not in the reference",
                                       evidence=ev, tensors=added[:500]))
    identical = changed = few = 0
    extra_verdicts = []
    for name in sorted(set(mine) & set(theirs)):
        a, b = mine[name], theirs[name]
        if a.shape != b.shape or a.dtype != b.dtype:
            report.findings.append(finding(
                "RF003", f"{name}: {a.dtype}{list(a.shape or ())} vs reference "
                f"{b.dtype}{list(b.shape or ())}", evidence=ev, tensors=[name]))
            continue
        if not (_comparable(a, report) and _comparable(b, ref)) or a.length != b.length:
            continue
        try:
            d = _diff(a, b)
        except OSError as exc:
            report.findings.append(finding("RF005", f"{name}: compare failed: {exc}",
                                           evidence=ev, tensors=[name]))
            continue
        if "error" in d:
            continue
        if d["diff_elements"] == 0:
            identical += 1
            continue
        changed += 1
        if d["diff_elements"] <= FEW and d["elements"] >= 2 * d["diff_elements"] + 1:
            few += 1
            ex = d["examples"]
            bits = [e.get("bit") for e in ex if "bit" in e]
            title = (f"{name}: {d['diff_elements']} of {d['elements']} elements differ from "
                     "the reference")
            if bits and len(bits) == len(ex):
                title += " by single bits (" + ", ".join(
                    f"bit {e['bit']} of element {e['index']}" for e in ex) + ")"
            report.findings.append(finding("RF004", title, evidence=ev,
                                           offset=ex[0]["byte_offset"] if ex else None,
                                           tensors=[name], details=d))
            if a.status in ("ok", "unverified"):
                a.status = "suspect"
            a.reasons.append("differs from the reference in only a few elements")
            if name not in report.suspect_tensors and name not in report.damaged_tensors:
                report.suspect_tensors.append(name)
            extra_verdicts.append(Verdict.SUSPECT)
    report.extra["reference"] = {"path": ref.path, "identical": identical, "changed": changed,
                                 "few_elements_changed": few, "missing": len(missing),
                                 "added": len(added)}
    report.verdict = worst_verdict([report.verdict, *extra_verdicts])
