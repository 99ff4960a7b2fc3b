"""``ckptrescue resume ...``: what a run needs to resume that no loader tells it (issue #31),
generated from the resume.* actions; this module only says how each shows its step's outputs."""

from __future__ import annotations

import typer

from ckptrescue.checkpoints.outputs import (
    KeyMismatchOutput,
    ReassemblyOutput,
    ReplicaOutput,
    SafeGlobalsOutput,
    WorldSizeOutput,
)
from ckptrescue.cli.from_action import JSON, Command, StepResult, add_command
from ckptrescue.cli.output import emit_json, say
from ckptrescue.errors import ExitCode

resume_app = typer.Typer(help="What a run needs to resume that no loader tells it: the exact "
                              "safe-globals list, key mismatches, missing ranks, world size, "
                              "replicas.", no_args_is_help=True)


def render_safe_globals(result: StepResult) -> int:
    out: SafeGlobalsOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
        return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)
    for f in out.files:
        if f.get("error"):
            say(f"{f['path']}: {f['error']}")
            continue
        needed = f.get("needed") or []
        if not needed and not f.get("blockers"):
            say(f"{f['path']}: loads with torch.load(weights_only=True) as it is")
            continue
        say(f"{f['path']}: torch.load(weights_only=True) refuses it as it is")
        for n in needed:
            where = f"  [{', '.join(n['lists'])}]" if n.get("lists") else ""
            say(f"    {n['status'].upper():<9} {n['global']}{where}"
                + (f"  ({n['reason']})" if n.get("reason") else ""))
        for b in f.get("blockers") or []:
            say(f"    BLOCKER   {b}")
    if out.safe:
        say("safe to register, and why:")
        by_list: dict[str, list[dict[str, str]]] = {}
        for n in out.safe:
            by_list.setdefault(n["lists"][0], []).append(n)
        for name, entries in by_list.items():
            say(f"  [{name}] {entries[0]['source']}:")
            for n in entries:
                say(f"    {n['global']}")
        say("register them before torch.load(..., weights_only=True):")
        for line in out.snippet_lines:
            say(f"    {line}")
    say(out.answer)
    return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)


def render_keys(result: StepResult) -> int:
    out: KeyMismatchOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
        return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)
    say(f"{out.checkpoint} ({out.format}, {out.verdict}) against {out.expected_from}")
    for rule in out.rules:
        say(f"    CAUSE  {rule['cause']}")
    for row in out.mapping[:40]:
        say(f"    {row['from']} -> {row['to']}")
    if out.mapping_total > 40:
        say(f"    ... {out.mapping_total - 40} more (--json lists them)")
    for tie in out.tied:
        say(f"    {tie['name']} = {tie['copy_of']}  (tied, saved once)")
    for bad in out.shape_mismatches[:20]:
        say(f"    SHAPE  {bad['checkpoint']} {bad['saved_shape']} vs {bad['model']} "
            f"{bad['expected_shape']}")
    for name in out.missing[:20]:
        say(f"    MISSING    {name}")
    for name in out.unexpected[:20]:
        say(f"    UNEXPECTED {name}")
    if out.outside:
        say("    left aside: " + ", ".join(f"{k} ({v} tensors)" for k, v in out.outside.items()))
    if out.rules and out.matched_after > out.matched_before:
        say("apply it to the loaded state dict before model.load_state_dict(fix_keys(sd)):")
        for line in out.snippet_lines:
            say(f"    {line}")
    say(out.answer)
    return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)


def render_reassemble(result: StepResult) -> int:
    out: ReassemblyOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
        return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)
    say(f"{out.step_dir}: {out.family} step {out.step}, world "
        + ", ".join(f"{k}={v}" for k, v in out.world.items()))
    for r in out.ranks:
        if r["status"] == "present":
            continue
        say(f"    {r['status'].upper():<9} {r['rank']} {r['role']}"
            + (f" <- {r['source']}" if r.get("source") and r["status"] == "replaced" else ""))
        for t in r.get("tried") or []:
            if t["outcome"] != "verified" and not t["outcome"].startswith("not present"):
                say(f"        rejected {t['path']}: {t['outcome']}")
    for p in out.check_problems:
        say(f"    CHECK     {p}")
    if out.plan_file:
        say(f"plan written: {out.plan_file}; review and run {out.plan_script} (it builds "
            f"{out.dest}; nothing is moved)")
    say(out.answer)
    return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)


def render_world_size(result: StepResult) -> int:
    out: WorldSizeOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
        return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)
    say(f"{out.step_dir}: {out.family} ({out.verdict}), saved with "
        + (", ".join(f"{k}={v}" for k, v in out.saved_world.items()) or "no recorded world"))
    for cmd in out.commands:
        say(f"    run:    {cmd}")
    if out.files_needed:
        say(f"    it reads {len(out.files_needed)} file(s):")
        for f in out.files_needed[:40]:
            say(f"        {f}")
    if out.config:
        import json

        say(f"    then load with: {json.dumps(out.config)}")
    for note in out.notes:
        say(f"    note: {note}")
    say(out.answer)
    return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)


def render_replicas(result: StepResult) -> int:
    out: ReplicaOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
        return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)
    for f in out.files:
        p = f.get("persistent") or {}
        say(f"{f['relpath']}: persistent {p.get('status')}; resume from "
            f"{f.get('resume_from') or '(none: ' + str(f.get('decision')) + ')'}")
        for r in f.get("replicas") or []:
            line = f"    {r['status'].upper():<10} {r['path']}"
            if r.get("differing_total"):
                line += f"  ({r['differing_total']} tensor(s): {', '.join(r['differing'][:6])})"
            elif r["status"] in ("damaged", "unreadable"):
                line += f"  ({r['verdict']})"
            say(line)
    for rel in out.replica_only[:20]:
        say(f"    ONLY IN A REPLICA {rel}")
    say(out.answer)
    return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)


def register(app: typer.Typer) -> None:
    add_command(resume_app, "safe-globals", Command("resume.safe_globals", render_safe_globals))
    add_command(resume_app, "keys", Command("resume.keys", render_keys))
    add_command(resume_app, "reassemble", Command("resume.reassemble", render_reassemble))
    add_command(resume_app, "world-size", Command("resume.world_size", render_world_size))
    add_command(resume_app, "replicas", Command(  # --replica DIR (repeated): the old spelling
        "resume.replicas", render_replicas, optional=("replicas",),
        deprecated={"--replica": "replicas"}))
    app.add_typer(resume_app, name="resume")
