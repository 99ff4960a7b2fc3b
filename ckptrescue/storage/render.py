"""The storage wing's text: what triage, image, copy, fs inspect, mount, locate and extract
show of their step's typed outputs (and the step's findings), and their exit codes. Pure
(records in, lines out); the CLI prints them (``cli/storage_cmd.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from ckptrescue.display import Shown
from ckptrescue.errors import ExitCode
from ckptrescue.model import Finding, Severity
from ckptrescue.storage.outputs import (
    CopyOutput,
    ExtractOutput,
    FsInspectOutput,
    ImageOutput,
    LocateOutput,
    MountOutput,
    TriageOutput,
)

FINDINGS = int(ExitCode.FINDINGS)


def findings_lines(findings: Sequence[Finding]) -> list[str]:
    return [f"  [{f.severity}] {f.code} {f.title}" for f in findings]


def findings_exit(findings: Sequence[Finding], *, floor: str = "warning") -> int:
    """1 when a finding is at least ``floor``, else 0."""
    rank = Severity(floor).rank
    return FINDINGS if any(f.severity.rank >= rank for f in findings) else 0


def triage(out: TriageOutput, findings: Sequence[Finding]) -> Shown:
    shown = Shown(exit_code=findings_exit(findings))
    for p in out.processes:
        shown.say(f"pid {p['pid']:<7} {p['kind']:<13} {p.get('write_rate_bps') or 0:>12.0f} B/s  "
                  f"{' '.join(p.get('cmdline') or [])[:100]}")
        shown.lines += [f"{'':10} writing {path}" for path in (p.get("open_for_write") or [])[:10]]
    shown.lines += [f"kernel[{m['kind']}] {m['line']}" for m in out.kernel_messages[-20:]]
    shown.say("\nFreeze checklist:")
    shown.lines += [f"  {i}. {item}" for i, item in enumerate(out.checklist, 1)]
    shown.lines += findings_lines(findings)
    return shown


def image(out: ImageOutput, findings: Sequence[Finding]) -> Shown:
    """Exit 1 when sectors stayed unreadable or imaging did not finish."""
    shown = Shown(exit_code=FINDINGS if out.bad_ranges or not out.finished else 0)
    shown.say(f"image      {out.image}\nmapfile    {out.mapfile}\nsha256     {out.image_sha256}")
    shown.say(f"size       {out.size}\nrescued    {out.rescued_bytes}")
    shown.lines += [f"bad        [{s:#x}, {e:#x})  {e - s} B" for s, e in out.bad_ranges]
    shown.lines += findings_lines(findings)
    return shown


def copy(out: CopyOutput, findings: Sequence[Finding]) -> Shown:
    """Exit 1 when the copy did not verify."""
    shown = Shown(exit_code=0 if out.verified else FINDINGS)
    shown.say(f"copied {out.files} files ({out.bytes} B) to {out.dest}; manifest "
              f"{out.manifest_sha256}; verified: {'yes' if out.verified else 'NO'}")
    shown.lines += findings_lines(findings)
    return shown


def fs_inspect(out: FsInspectOutput, findings: Sequence[Finding]) -> Shown:
    shown = Shown(exit_code=findings_exit(findings))
    shown.say(f"{out.target}: {out.fstype or 'unknown filesystem'} on {out.device}")
    shown.lines += [f"  note: {n}" for n in out.notes]
    shown.lines += findings_lines(findings)
    return shown


def mount(out: MountOutput) -> Shown:
    shown = Shown()
    shown.say(f"mounted {out.device} ({out.fstype}) on {out.mountpoint} with {out.options}"
              + (f"; loop {out.loop_device}" if out.loop_device else ""))
    shown.lines += [f"  {d['dataset']}: " + ("mounted ro on " + d["mountpoint"] if d["mounted"]
                                            else f"not mounted ({d.get('reason', '')})")
                    for d in out.datasets]
    return shown


def locate(out: LocateOutput) -> Shown:
    """Exit 1 when an unreadable range holds file data."""
    shown = Shown(exit_code=FINDINGS if any(r.get("files") for r in out.ranges) else 0)
    for r in out.ranges:
        start, end, files = r["start"], r["end"], r.get("files") or []
        shown.say(f"[{start:#x}, {end:#x})")
        blind = [why for a, b, why in out.unmapped if a < end and start < b]
        if blind:
            shown.say("    not mapped" + (" (part of it)" if files else "") + ": "
                      + "; ".join(blind))
        elif not files:
            shown.say("    no regular-file data (metadata or free space)")
        for f in files:
            tensors = ", ".join(f["tensors"]) if f.get("tensors") else "-"
            shown.say(f"    {f['path']} bytes [{f['file_offset']}, "
                      f"{f['file_offset'] + f['length']}) tensors: {tensors}")
    shown.asides = [f"note: {n}" for n in out.notes]
    return shown


def extract(out: ExtractOutput) -> Shown:
    """Exit 1 when a checkpoint was left behind."""
    shown = Shown(exit_code=FINDINGS if out.left_behind else 0)
    shown.lines += [f"extracted {e['checkpoint']} ({e['format']}): {len(e['files'])} file(s)"
                    for e in out.extracted]
    shown.lines += [f"left behind {lb['checkpoint']}: {lb['verdict']}" for lb in out.left_behind]
    return shown
