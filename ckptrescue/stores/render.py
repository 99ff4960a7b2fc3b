"""The store wing's text: what ``store …`` and ``s3 …`` show of their step's outputs, and their
exit codes. Pure (records in, lines out); the CLI prints them (``cli/store_cmd.py``,
``cli/s3_cmd.py``), names made inert on the way.

The ``store`` commands show the findings above info and the one-line answer; their ``s3``
names keep the detailed lines they always printed. Both exit alike: 0 when nothing is wrong
(verify: everything matches; history: no anomaly, the manifest matched; preflight: immutable
versions are kept; preserve: every object preserved; restore: the version verified), else 1."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ckptrescue.display import Shown
from ckptrescue.errors import ExitCode
from ckptrescue.model import Finding, Severity
from ckptrescue.stores.outputs import (
    S3HistoryOutput,
    S3PreflightOutput,
    S3PreserveOutput,
    S3RestoreOutput,
    S3VerifyOutput,
    StoreResultOutput,
    VerifiedObject,
)

SERIOUS = {str(Severity.ERROR), str(Severity.CRITICAL)}


def _exit(ok: bool) -> int:
    return int(ExitCode.OK if ok else ExitCode.FINDINGS)


def store(out: StoreResultOutput, findings: Sequence[Finding]) -> Shown:
    """A ``store`` command: the findings above info, then the answer."""
    shown = Shown(exit_code=_exit(out.ok and not any(str(f.severity) in SERIOUS
                                                     for f in findings)))
    shown.lines += [f"[{f.code}] {f.title}" for f in findings if str(f.severity) != "info"]
    shown.say(out.answer)
    return shown


def object_lines(objects: list[VerifiedObject]) -> list[str]:
    """One line per object compared: status, key, algorithm, what was found."""
    return [f"{obj.status:<15} {obj.key}  [{obj.algorithm or '-'}] "
            f"{obj.detail.get('message', '')}" for obj in objects]


def verify_partial(objects: list[dict[str, Any]]) -> Shown:
    """What a verification that stopped early established (its error follows)."""
    return Shown(lines=object_lines([VerifiedObject.from_json(o) for o in objects]))


def verify(out: S3VerifyOutput) -> Shown:
    shown = Shown(lines=object_lines(out.objects), exit_code=_exit(out.ok))
    shown.say(" ".join(f"{k}={v}" for k, v in out.counts.items()))
    if out.extra.get("answer") or out.extra.get("summary"):
        shown.say(str(out.extra.get("answer") or out.extra["summary"]))
    return shown


def history(out: S3HistoryOutput) -> Shown:
    shown = Shown()
    for item in out.keys:
        shown.say(f"{item.key}  known-good: {item.known_good or '-'}")
        for v in item.versions:
            kind = "DELETE-MARKER" if v.delete_marker else f"{v.size} bytes"
            checksum = v.checksum or {}
            shown.say(f"  {'*' if v.is_latest else ' '} {v.version_id}  "
                      f"{v.last_modified}  {kind}  {checksum.get('algorithm', '')} "
                      f"{checksum.get('value', '')}")
            for event in v.events:
                shown.say(f"      {event['event_name']} by {event['principal']} from "
                          f"{event['source_ip']} ({event['user_agent']}) at "
                          f"{event['event_time']}")
        for anomaly in item.anomalies:
            shown.say(f"  ANOMALY {anomaly.kind}: {anomaly.message}")
    problems = any(k.anomalies for k in out.keys) or any(
        k.manifest_sha256 and k.known_good is None for k in out.keys)
    shown.exit_code = _exit(not problems)
    return shown


def preflight(out: S3PreflightOutput) -> Shown:
    shown = Shown(exit_code=_exit(out.verdict == "immutable"))
    shown.say(f"bucket       {out.bucket} ({out.region or 'region unknown'})")
    shown.say(f"versioning   {out.versioning}" + (f" (MFA delete {out.mfa_delete})"
                                                  if out.mfa_delete else ""))
    shown.say(f"object lock  {out.object_lock}")
    shown.say(f"retention    {out.default_retention or '-'}")
    shown.say(f"verdict      {out.verdict}")
    shown.notes += [f"WARNING: {warning}" for warning in out.warnings]
    return shown


def preserve(out: S3PreserveOutput) -> Shown:
    shown = Shown(exit_code=_exit(out.ok))
    shown.lines += [f"{obj.status:<13} {obj.key} {obj.version_id or ''} "
                    f"sha256={obj.sha256} {obj.evidence_id or ''}" for obj in out.objects]
    shown.say(" ".join(f"{k}={v}" for k, v in out.counts.items()))
    if out.extra.get("answer") or out.extra.get("summary"):
        shown.say(str(out.extra.get("answer") or out.extra["summary"]))
    return shown


def restore(out: S3RestoreOutput) -> Shown:
    shown = Shown(exit_code=_exit(out.ok))
    shown.say(f"{out.status}: {out.url} version {out.version_id} -> {out.path}")
    shown.say(f"  sha256 {out.sha256}, {out.size} bytes; {out.detail.get('message', '')}")
    return shown
