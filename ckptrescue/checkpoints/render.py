"""The checkpoint wing's text: what ``probe``, ``salvage`` and ``rank`` show of their step's
typed outputs, and their exit codes. Pure (records in, lines out); the CLI prints them
(``cli/probe_cmd.py``), names made inert on the way."""

from __future__ import annotations

from ckptrescue.checkpoints.outputs import (
    NOT_INTACT_KINDS,
    CheckpointSummary,
    ProbeOutput,
    RankedCheckpoint,
    RankOutput,
    SalvageRecord,
)
from ckptrescue.display import Shown
from ckptrescue.errors import ExitCode

NAMES_SHOWN = 12  # tensor names per list before "... (+N)"
BAD_RANKS_SHOWN = 8


def _names(names: list[str], limit: int) -> str:
    return ", ".join(names[:limit]) + (f" ... (+{len(names) - limit})" if len(names) > limit
                                       else "")


def checkpoint_lines(c: CheckpointSummary) -> list[str]:
    """One probed checkpoint: its verdict line, the tensors that are not intact, the findings
    above info, the sandboxed load's outcome."""
    lines = [f"{c.verdict.upper():<10} {c.format:<12} {c.path}  ({c.tensors_total} tensors)"]
    for kind in NOT_INTACT_KINDS:
        if names := c.tensors_of(kind):
            lines.append(f"    {kind}: " + _names(names, NAMES_SHOWN))
    lines += [f"    [{f.code}] {f.title}" for f in c.findings if f.severity != "info"]
    if c.load is not None:
        lines.append(f"    load: {c.load.get('status')}")
    return lines


def probe(out: ProbeOutput) -> Shown:
    """Exit 0 when every checkpoint is intact, else 1 (none found: 1)."""
    shown = Shown()
    for c in out.checkpoints:
        shown.lines += checkpoint_lines(c)
    if not out.checkpoints:
        shown.note("ckptrescue: no checkpoints found")
        shown.exit_code = int(ExitCode.FINDINGS)
    elif any(c.verdict != "intact" for c in out.checkpoints):
        shown.exit_code = int(ExitCode.FINDINGS)
    return shown


def salvage(record: SalvageRecord) -> Shown:
    """Exit 0 only when the salvage is clean (every tensor verified from the checkpoint)."""
    shown = Shown(exit_code=0 if record.clean else int(ExitCode.FINDINGS))
    shown.say(f"wrote {record.output}")
    shown.say(f"recovered {len(record.recovered)}, lost {len(record.lost)}, "
              f"filled {len(record.filled)}, suspect {len(record.suspect)}")
    shown.lines += [f"    lost {item.name}: {item.reason}" for item in record.lost]
    shown.lines += [f"    suspect {sus.name}: {'; '.join(sus.reasons)}" for sus in record.suspect]
    if record.suspect_output:
        shown.say(f"suspect tensors written apart to {record.suspect_output}")
    if record.unaccounted:
        shown.say(f"not complete: {record.unaccounted}")
    if not (record.recovered or record.filled):
        shown.say("nothing was recovered")
    return shown


def ranked_line(c: RankedCheckpoint) -> str:
    line = f"{c.verdict.upper():<10} {c.path}"
    if c.bad_ranks:
        more = c.bad_ranks_count - len(c.bad_ranks[:BAD_RANKS_SHOWN])
        line += f"  bad ranks: {', '.join(c.bad_ranks[:BAD_RANKS_SHOWN])}" \
            + (f" (+{more})" if more > 0 else "")
    return line


def rank(out: RankOutput) -> Shown:
    """Exit 0 when a checkpoint is safe to resume from, else 1."""
    shown = Shown(exit_code=0 if out.resume_from else int(ExitCode.FINDINGS))
    shown.lines += [ranked_line(c) for c in out.checkpoints]
    for e in out.evals:
        metric = "-" if e.metric is None else f"{e.metric:g}"
        shown.say(f"eval {e.status.upper():<8} metric {metric:<10} {e.path}"
                  + (f"  ({e.reason})" if e.reason else ""))
    shown.say(f"resume from: {out.resume_from or '(none)'}")
    if (fix := out.pointer_fix) is not None:
        shown.say(f"pointer: {fix.pointer} says {fix.current!r}; write {fix.write!r} "
                  "to resume from the newest complete step (ckptrescue never writes it)")
    return shown
