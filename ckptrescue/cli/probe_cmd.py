"""``ckptrescue probe | salvage | rank``: generated from the probe, salvage and rank actions;
this module only says how each shows its step's outputs and which exit code it gives."""

from __future__ import annotations

import typer

from ckptrescue.cli.from_action import CASE, JSON, Command, StepResult, add_command
from ckptrescue.cli.output import emit_json, info, say
from ckptrescue.engine.outputs import ProbeOutput, RankOutput, SalvageOutput
from ckptrescue.errors import ExitCode


def render_probe(result: StepResult) -> int:
    out: ProbeOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        for c in out.checkpoints:
            say(f"{str(c['verdict']).upper():<10} {c['format']:<12} {c['path']}  "
                f"({c['tensors_total']} tensors)")
            for label in ("damaged", "missing", "suspect"):
                names = c.get(f"{label}_tensors") or []
                if names:
                    say(f"    {label}: " + ", ".join(names[:12])
                        + (f" ... (+{len(names) - 12})" if len(names) > 12 else ""))
            for f in c.get("findings", []):
                if f["severity"] != "info":
                    say(f"    [{f['code']}] {f['title']}")
            if c.get("load") is not None:
                say(f"    load: {c['load'].get('status')}")
    if not out.checkpoints:
        info("ckptrescue: no checkpoints found")
        return int(ExitCode.FINDINGS)
    return 0 if all(c["verdict"] == "intact" for c in out.checkpoints) else int(ExitCode.FINDINGS)


def render_salvage(result: StepResult) -> int:
    out: SalvageOutput = result.out
    record = out.salvaged[0]
    if result.options[JSON]:
        emit_json(SalvageOutput.public_record(record))
    else:
        lost, suspect = record.get("lost") or [], record.get("suspect") or []
        recovered, filled = record.get("recovered") or [], record.get("filled") or []
        say(f"wrote {record.get('output')}")
        say(f"recovered {len(recovered)}, lost {len(lost)}, filled {len(filled)}, "
            f"suspect {len(suspect)}")
        for item in lost:
            say(f"    lost {item['name']}: {item['reason']}")
        for sus in suspect:
            say(f"    suspect {sus['name']}: {'; '.join(sus['reasons'])}")
        if record.get("suspect_output"):
            say(f"suspect tensors written apart to {record['suspect_output']}")
        if record.get("unaccounted"):
            say(f"not complete: {record['unaccounted']}")
        if not (recovered or filled):
            say("nothing was recovered")
    return 0 if record.get("clean") else int(ExitCode.FINDINGS)


def render_rank(result: StepResult) -> int:
    out: RankOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        for c in out.checkpoints:
            bad = c.get("bad_ranks") or []
            more = (c.get("bad_ranks_total") or len(bad)) - len(bad[:8])
            say(f"{str(c['verdict']).upper():<10} {c['path']}"
                + (f"  bad ranks: {', '.join(bad[:8])}" + (f" (+{more})" if more > 0 else "")
                   if bad else ""))
        for e in out.extra.get("eval") or []:
            metric = "-" if e.get("metric") is None else f"{e['metric']:g}"
            say(f"eval {str(e['status']).upper():<8} metric {metric:<10} {e['path']}"
                + (f"  ({e['reason']})" if e.get("reason") else ""))
        say(f"resume from: {out.resume_from or '(none)'}")
        fix = out.to_json().get("pointer_fix")
        if fix:
            say(f"pointer: {fix['pointer']} says {fix['current']!r}; write {fix['write']!r} "
                "to resume from the newest complete step (ckptrescue never writes it)")
    return 0 if out.resume_from else int(ExitCode.FINDINGS)


COMMANDS = {
    "probe": Command("probe", render_probe),
    "salvage": Command("salvage", render_salvage),
    # a one-step run has no probe step: rank records the probe findings itself
    "rank": Command("rank", render_rank, order=("run_dir", CASE, "load", "jobs", "scheduler",
                                               "endpoint_url", "eval", "eval_min", "eval_max",
                                               "eval_timeout", "eval_memory_mb",
                                               "eval_metric_regex", JSON)),
}


def register(app: typer.Typer) -> None:
    for name, command in COMMANDS.items():
        add_command(app, name, command)
