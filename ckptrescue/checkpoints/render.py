"""The checkpoint wing's text: what ``probe``, ``salvage``, ``rank`` and the ``resume`` checks
show of their step's typed outputs, and their exit codes. Pure (records in, lines out); the CLI prints them
(``cli/probe_cmd.py``), names made inert on the way."""

from __future__ import annotations

from ckptrescue.checkpoints.outputs import (
    NOT_INTACT_KINDS,
    CheckpointSummary,
    KeyMismatchOutput,
    ProbeOutput,
    RankedCheckpoint,
    RankOutput,
    ReassemblyOutput,
    ReplicaOutput,
    SafeGlobalsOutput,
    SalvageRecord,
    WorldSizeOutput,
)
from ckptrescue.display import Shown
from ckptrescue.errors import ExitCode

NAMES_SHOWN = 12  # tensor names per list before "... (+N)"
BAD_RANKS_SHOWN = 8


def _names(names: list[str], limit: int) -> str:
    return ", ".join(names[:limit]) + (f" ... (+{len(names) - limit})" if len(names) > limit
                                       else "")


def _snippet(lines: list[str], intro: str, snippet_lines: list[str]) -> None:
    """The Python a resume check prints to paste: its intro line, then the code indented."""
    lines.append(intro)
    lines.extend(f"    {line}" for line in snippet_lines)


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


# ---- the resume checks ------------------------------------------------------------------

def safe_globals(out: SafeGlobalsOutput) -> Shown:
    lines: list[str] = []
    for f in out.files:
        if f.get("error"):
            lines.append(f"{f['path']}: {f['error']}")
            continue
        needed = f.get("needed") or []
        if not needed and not f.get("blockers"):
            lines.append(f"{f['path']}: loads with torch.load(weights_only=True) as it is")
            continue
        lines.append(f"{f['path']}: torch.load(weights_only=True) refuses it as it is")
        for n in needed:
            where = f"  [{', '.join(n['lists'])}]" if n.get("lists") else ""
            lines.append(f"    {n['status'].upper():<9} {n['global']}{where}"
                         + (f"  ({n['reason']})" if n.get("reason") else ""))
        for b in f.get("blockers") or []:
            lines.append(f"    BLOCKER   {b}")
    if out.safe:
        lines.append("safe to register, and why:")
        by_list: dict[str, list[dict[str, str]]] = {}
        for n in out.safe:
            by_list.setdefault(n["lists"][0], []).append(n)
        for name, entries in by_list.items():
            lines.append(f"  [{name}] {entries[0]['source']}:")
            for n in entries:
                lines.append(f"    {n['global']}")
        _snippet(lines, "register them before torch.load(..., weights_only=True):", out.snippet_lines)
    return Shown.answered(lines, out.answer, out.ok)


def keys(out: KeyMismatchOutput) -> Shown:
    lines: list[str] = []
    lines.append(f"{out.checkpoint} ({out.format}, {out.verdict}) against {out.expected_from}")
    for rule in out.rules:
        lines.append(f"    CAUSE  {rule['cause']}")
    for row in out.mapping[:40]:
        lines.append(f"    {row['from']} -> {row['to']}")
    if out.mapping_total > 40:
        lines.append(f"    ... {out.mapping_total - 40} more (--json lists them)")
    for tie in out.tied:
        lines.append(f"    {tie['name']} = {tie['copy_of']}  (tied, saved once)")
    for bad in out.shape_mismatches[:20]:
        lines.append(f"    SHAPE  {bad['checkpoint']} {bad['saved_shape']} vs {bad['model']} "
                     f"{bad['expected_shape']}")
    for name in out.missing[:20]:
        lines.append(f"    MISSING    {name}")
    for name in out.unexpected[:20]:
        lines.append(f"    UNEXPECTED {name}")
    if out.outside:
        lines.append("    left aside: " + ", ".join(f"{k} ({v} tensors)" for k, v in out.outside.items()))
    if out.rules and out.matched_after > out.matched_before:
        _snippet(lines, "apply it to the loaded state dict before model.load_state_dict(fix_keys(sd)):",
                 out.snippet_lines)
    return Shown.answered(lines, out.answer, out.ok)


def reassemble(out: ReassemblyOutput) -> Shown:
    lines: list[str] = []
    lines.append(f"{out.step_dir}: {out.family} step {out.step}, world "
                 + ", ".join(f"{k}={v}" for k, v in out.world.items()))
    for r in out.ranks:
        if r["status"] == "present":
            continue
        lines.append(f"    {r['status'].upper():<9} {r['rank']} {r['role']}"
                     + (f" <- {r['source']}" if r.get("source") and r["status"] == "replaced" else ""))
        for t in r.get("tried") or []:
            if t["outcome"] != "verified" and not t["outcome"].startswith("not present"):
                lines.append(f"        rejected {t['path']}: {t['outcome']}")
    for p in out.check_problems:
        lines.append(f"    CHECK     {p}")
    if out.plan_file:
        lines.append(f"plan written: {out.plan_file}; review and run {out.plan_script} (it builds "
                     f"{out.dest}; nothing is moved)")
    return Shown.answered(lines, out.answer, out.ok)


def world_size(out: WorldSizeOutput) -> Shown:
    lines: list[str] = []
    lines.append(f"{out.step_dir}: {out.family} ({out.verdict}), saved with "
                 + (", ".join(f"{k}={v}" for k, v in out.saved_world.items()) or "no recorded world"))
    for cmd in out.commands:
        lines.append(f"    run:    {cmd}")
    if out.files_needed:
        lines.append(f"    it reads {len(out.files_needed)} file(s):")
        for f in out.files_needed[:40]:
            lines.append(f"        {f}")
    if out.config:
        import json

        lines.append(f"    then load with: {json.dumps(out.config)}")
    for note in out.notes:
        lines.append(f"    note: {note}")
    return Shown.answered(lines, out.answer, out.ok)


def replicas(out: ReplicaOutput) -> Shown:
    lines: list[str] = []
    for f in out.files:
        p = f.get("persistent") or {}
        lines.append(f"{f['relpath']}: persistent {p.get('status')}; resume from "
                     f"{f.get('resume_from') or '(none: ' + str(f.get('decision')) + ')'}")
        for r in f.get("replicas") or []:
            line = f"    {r['status'].upper():<10} {r['path']}"
            if r.get("differing_total"):
                line += f"  ({r['differing_total']} tensor(s): {', '.join(r['differing'][:6])})"
            elif r["status"] in ("damaged", "unreadable"):
                line += f"  ({r['verdict']})"
            lines.append(line)
    for rel in out.replica_only[:20]:
        lines.append(f"    ONLY IN A REPLICA {rel}")
    return Shown.answered(lines, out.answer, out.ok)
