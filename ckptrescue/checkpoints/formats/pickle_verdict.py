"""Findings and verdicts for one scanned pickle (``docs/formats/pickle.md``).

The rules, in order of the verdict they give:

* a global that is dangerous, or off the exact list that applies (``PK001``), an opcode that
  overruns its FRAME (``PK005``) or an EXT code (copyreg's registry: unknown) - ``unsafe``,
  even when a parse error follows (the unpickler ran them before it stopped);
* a parse error (``PK002``) - ``truncated`` when the data ends, else ``damaged``;
* a scan limit (``PK006``) or, when the loader is ``torch.load(weights_only=True)``, an opcode
  its unpickler does not implement (``PK007``) - ``unreadable``;
* for standalone pickles, globals on no exact list that are not dangerous (``PK008``) -
  ``suspect`` (loading imports and runs them; nothing says they are harmful).
"""

from __future__ import annotations

from collections.abc import Callable

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.formats.pickle_policy import WEIGHTS_ONLY_OPCODES, dangerous
from ckptrescue.checkpoints.formats.pickle_scan import PickleScan
from ckptrescue.checkpoints.formats.tensormap import finding
from ckptrescue.model import Finding


def judge(scan: PickleScan, evidence: str, *, allowed: Callable[[str], bool],
          weights_only: bool, standalone: bool = False, label: str = "pickle",
          size: int | None = None) -> tuple[list[Finding], list[Verdict]]:
    """Findings and verdicts for ``scan`` (``allowed``: the exact list that applies)."""
    findings: list[Finding] = []
    verdicts: list[Verdict] = []
    off_list = scan.unsafe_globals(allowed)
    bad = [g for g in off_list if not standalone or dangerous(g) or g in scan.dotted]
    bad += [f"copyreg._extension_registry[{c}]" for c in scan.ext_codes]
    if bad:
        findings.append(finding(
            "PK001", f"{label} references globals outside the exact list: " + ", ".join(bad)
            + (" (named before the parse error: the unpickler ran them)" if scan.error else ""),
            evidence=evidence, details={"globals": bad}))
        verdicts.append(Verdict.UNSAFE)
    if scan.frame_violations:
        pos, why = scan.frame_violations[0]
        findings.append(finding(
            "PK005", f"{label}: {why} at byte {pos} (never written by a pickler; unpicklers "
            "disagree on the opcodes that follow)", evidence=evidence, offset=pos,
            details={"violations": [list(v) for v in scan.frame_violations[:20]]}))
        verdicts.append(Verdict.UNSAFE)
    if scan.limit:
        findings.append(finding("PK006", f"{label}: {scan.limit}; the rest is not verified",
                                evidence=evidence, offset=scan.error_position))
        verdicts.append(Verdict.UNREADABLE)
    elif scan.error:
        findings.append(finding("PK002", f"{label}: static parse stopped at byte "
                                f"{scan.error_position}: {scan.error}", evidence=evidence,
                                offset=scan.error_position))
        cut = "truncated" in scan.error or "past the end" in scan.error
        verdicts.append(Verdict.TRUNCATED if cut else Verdict.DAMAGED)
    if weights_only:
        refused = sorted(scan.opcodes - WEIGHTS_ONLY_OPCODES)
        if refused:
            findings.append(finding(
                "PK007", f"{label} uses opcodes torch.load(weights_only=True) does not "
                "implement: " + ", ".join(refused), evidence=evidence,
                details={"opcodes": refused}))
            verdicts.append(Verdict.UNREADABLE)
    if standalone:
        unknown = [g for g in off_list if g not in bad]
        if unknown:
            findings.append(finding(
                "PK008", f"{label} names globals on no exact list (loading imports and runs "
                "them): " + ", ".join(unknown), evidence=evidence, details={"globals": unknown}))
            verdicts.append(Verdict.SUSPECT)
    return findings, verdicts
