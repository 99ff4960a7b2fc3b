"""Findings and verdicts for one scanned pickle (``docs/formats/pickle.md``).

The rules, in order of the verdict they give:

* a global off the exact list that applies (``PK001``), a BUILD that rewrites a module's or
  class's attributes (``PK010``: what later globals resolve to), an opcode that overruns its
  FRAME (``PK005``) or an EXT code (copyreg's registry: unknown) - ``unsafe``, whatever else is
  wrong (the unpickler ran them before it stopped);
* for standalone pickles (``pickle.load`` resolves every global), an off-list name one edit
  from a listed one that is not dangerous (``PK004``) - ``unreadable``: a damaged name the
  unpickler cannot resolve;
* a parse error (``PK002``) - ``truncated`` when the data ends, else ``damaged``;
* a scan limit (``PK006``) or, when the loader is ``torch.load(weights_only=True)``, an opcode
  its unpickler does not implement (``PK007``) - ``unreadable``;
"""

from __future__ import annotations

from collections.abc import Callable

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.formats.pickle_policy import WEIGHTS_ONLY_OPCODES, resolved_off_list
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
    damaged: dict[str, str] = {}
    bad = off_list
    if standalone:
        bad, damaged = resolved_off_list(off_list, scan.dotted)
    bad = [*bad, *(f"copyreg._extension_registry[{c}]" for c in scan.ext_codes)]
    if bad:
        findings.append(finding(
            "PK001", f"{label} references globals outside the exact list: " + ", ".join(bad)
            + (" (named before the parse error: the unpickler ran them)" if scan.error else ""),
            evidence=evidence, details={"globals": bad}))
        verdicts.append(Verdict.UNSAFE)
    if scan.rewrites:
        findings.append(finding(
            "PK010", f"{label} rewrites attributes of " + ", ".join(sorted(set(scan.rewrites)))
            + " (BUILD on a module or class: later globals resolve to what it wrote)",
            evidence=evidence, details={"targets": sorted(set(scan.rewrites))}))
        verdicts.append(Verdict.UNSAFE)
    if damaged:
        findings.append(finding(
            "PK004", f"{label} names " + ", ".join(f"{g} (one edit from {n})"
                                                   for g, n in damaged.items())
            + ": a damaged name the unpickler cannot resolve", evidence=evidence,
            details={"globals": list(damaged)}))
        verdicts.append(Verdict.UNREADABLE)
    if scan.refusals:
        pos, why = scan.refusals[0]
        findings.append(finding(
            "PK011", f"{label}: torch's loader refuses it at byte {pos}: {why}"
            + (f" (and {len(scan.refusals) - 1} more)" if len(scan.refusals) > 1 else ""),
            evidence=evidence, offset=pos,
            details={"refusals": [list(r) for r in scan.refusals[:20]]}))
        verdicts.append(Verdict.UNREADABLE)
    for key, first, later in scan.storage_conflicts[:20]:
        findings.append(finding(
            "PK012", f"{label}: storage {key} is referenced as {first} and as {later}; torch "
            f"caches the first, so every tensor on it loads as {first}", evidence=evidence,
            details={"storage": key, "first": first, "later": later}))
        verdicts.append(Verdict.SUSPECT)
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
    return findings, verdicts
