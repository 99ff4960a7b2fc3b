"""``ckptrescue manifest build|audit|update`` and ``dataset ...``: training-data integrity,
generated from the manifest.* and dataset.* actions. Results go to stdout, progress to
stderr."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ckptrescue.cli.from_action import CASE, JSON, Command, StepResult, add_command
from ckptrescue.cli.output import emit_json, info, say
from ckptrescue.datasets.outputs import (
    DatasetCompareOutput,
    DatasetProfileOutput,
    DatasetVerifyOutput,
    ManifestAuditOutput,
    ManifestBuildOutput,
    ManifestDiffOutput,
    ManifestUpdateOutput,
    QuarantineOutput,
)
from ckptrescue.engine.action import ActionArgs, ArgSpec
from ckptrescue.errors import ExitCode

manifest_app = typer.Typer(help="Checksum manifests of dataset directories (sha256sum format).",
                           no_args_is_help=True)
dataset_app = typer.Typer(help="Dataset checks that need no manifest: containers, content profiles, "
                          "quarantine lists.",
                          no_args_is_help=True)

NO_PROGRESS = ArgSpec("no_progress", "boolean", default=False,
                      help="No progress bar on stderr.")


def _display(path: str) -> str:
    from ckptrescue.datasets.walk import display, from_json_path

    return display(from_json_path(path))


def build_interrupted(args: ActionArgs) -> str:
    from ckptrescue.datasets.manifest import partial_path

    partial = partial_path(args["output"])
    if not Path(partial).exists():  # stopped before a file was finished: say only that
        return "ckptrescue: interrupted before any file was hashed; nothing was kept"
    return (f"ckptrescue: interrupted; finished files are kept in {partial}: run the same "
            "command again to resume")


def _warn_left_out(skipped: list[dict[str, Any]], unreadable: list[dict[str, Any]]) -> None:
    """Files a build or update skipped or could not read, on stderr."""
    for s in skipped:
        info(f"skipped: {_display(s['path'])}: {s['reason']}")
    for u in unreadable:
        info(f"UNREADABLE: {_display(u['path'])}: {u['error']} at offset {u['offset']}")


def render_build(result: StepResult) -> int:
    out: ManifestBuildOutput = result.out
    _warn_left_out(out.skipped, out.unreadable)
    for c in out.changed_while_hashed:
        info(f"CHANGED while hashed: {_display(c['path'])}: hashed again ({c['times']} time(s))")
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        say(out.answer)
    empty = out.files == 0 and not out.unreadable and not result.options["allow_empty"]
    if empty:  # a wrong path or a dataset that is not mounted, more often than not
        info(f"warning: no files under {out.root or result.args.get('dir')}: the manifest is "
             "empty (is the dataset mounted? --allow-empty accepts it)")
    return int(ExitCode.OK if out.ok and not empty else ExitCode.FINDINGS)


def render_audit(result: StepResult) -> int:
    out: ManifestAuditOutput = result.out
    if result.options[JSON]:
        emit_json(ManifestAuditOutput.public_json(result.outputs))
    else:
        for row in out.files:
            if row["status"] != "ok":
                reason = out.reasons.get(row["path"], "")
                say(f"{row['status'].upper():<11} {_display(row['path'])}"
                    + (f"  ({reason})" if reason else ""))
        if out.files_omitted:
            say(f"{out.files_omitted:,} ok files not listed (every row is in {out.state})")
        say("counts: " + ", ".join(f"{k}={v}" for k, v in out.counts.items()))
        if out.resumed:
            say(f"resumed {out.resumed:,} files from {out.state}")
        if out.sample:
            say(f"sample: seed {out.sample['seed']}, {out.sample['size']:,} of "
                f"{out.sample['population']:,} files hashed")
        say(out.answer)
    for note in out.notes:
        info(f"note: {note}")
    return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)


def render_update(result: StepResult) -> int:
    out: ManifestUpdateOutput = result.out
    _warn_left_out(out.skipped, out.unreadable)
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        for path in out.deleted:
            say(f"DELETED  {_display(path)}  (entry dropped)")
        if not out.inode_checked:
            say("note: the old sidecar recorded no inodes: size and mtime compared only")
        say(f"hashed {out.hashed} ({len(out.new)} new, {len(out.changed)} changed), reused "
            f"{out.reused}; old manifest kept as {out.previous}")
        say(out.answer)
    return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)


def render_diff(result: StepResult) -> int:
    out: ManifestDiffOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        for ch in out.changes:
            if ch["status"] == "renamed":
                say(f"RENAMED  {_display(ch['old_path'])} -> {_display(ch['path'])}")
            else:
                say(f"{ch['status'].upper():<8} {_display(ch['path'])}")
        if out.changes_omitted:
            say(f"{out.changes_omitted:,} more changes not listed"
                + (f" (every change is in {out.changes_file})" if out.changes_file else
                   " (write them all with -o OUT)"))
        for bad in out.bad_lines:
            info(f"{bad['manifest'].upper()} line {bad['line']}: not in sha256sum "
                 f"format ({bad['reason']}): left out")
        if out.output:
            say(f"changes written to {out.output} and {out.changes_file}")
        say(out.answer)
    bad = any(b for b in out.bad_lines)
    return int(ExitCode.FINDINGS if out.differs or bad else ExitCode.OK)


def update_interrupted(args: ActionArgs) -> str:
    return (f"ckptrescue: interrupted; {args['manifest']} was not changed: run the same command "
            "again")


def verify_lines(out: DatasetVerifyOutput) -> list[str]:
    """The human listing of ``dataset verify``: what is not ok, with its bad records."""
    lines = []
    for f in out.files:
        if f["status"] == "ok" or (f["status"] == "unchecked" and f["format"] == "other"):
            continue  # other formats are counted in the answer line, not listed
        tail = f" ({f['note']})" if f.get("note") else ""
        lines.append(f"{f['status'].upper():<10} {f['format']:<14} {_display(f['path'])}{tail}")
        for b in f.get("bad_records") or []:
            where = ", ".join(p for p in (
                f"record {b['index']}" if b.get("index") is not None else "",
                f"offset {b['offset']}" if b.get("offset") is not None else "",
                f"key {b['key']}" if b.get("key") else "") if p)
            lines.append(f"    {where}: {b['problem']}")
    return lines


def render_verify(result: StepResult) -> int:
    out: DatasetVerifyOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        for line in verify_lines(out):
            say(line)
        say(out.answer)
    return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)


def render_profile(result: StepResult) -> int:
    out: DatasetProfileOutput = result.out
    if result.options[JSON]:
        emit_json(out.profile)
    else:
        for shard in out.profile.get("shards", []):
            note = "" if shard.get("complete", True) else "  (not complete)"
            say(f"{shard.get('records', '?'):>10} records  {shard.get('format', ''):<12} "
                f"{shard.get('path')}{note}")
        say(out.answer)
    return int(ExitCode.OK)


def render_compare(result: StepResult) -> int:
    out: DatasetCompareOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        for check in out.compare.get("flagged", []):
            say(f"[{check['code']}] {check['shard']} {check.get('field') or ''}: "
                f"{check['summary']}")
        for spot in out.spot_checks:
            if spot.get("error"):
                say(f"    spot check of {spot['shard']}: {spot['error']}")
                continue
            idx = [r["index"] for r in spot["flagged"]["records"]]
            say(f"    spot check of {spot['shard']}: seed {spot['seed']}, records {idx}")
        say(out.answer)
    return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)


def render_quarantine(result: StepResult) -> int:
    out: QuarantineOutput = result.out
    if result.options[JSON]:
        emit_json(out.quarantine)
    else:
        say(out.answer)
        if out.path_list:
            say(f"plain list of whole files: {out.path_list}")
    return int(ExitCode.OK)


ALLOW_EMPTY = ArgSpec("allow_empty", "boolean", default=False,
                      help="An empty directory makes an empty manifest with exit 0 (else a "
                           "warning and exit 1).")
BUILD = Command("manifest.build", render_build, extras=(NO_PROGRESS, ALLOW_EMPTY),
                order=("dir", "output", "checksums", "jobs", "scheduler", "no_progress",
                       "allow_empty", "allow_unverified", "endpoint_url", CASE, JSON),
                quiet=lambda a, o: bool(o["no_progress"]), interrupted=build_interrupted)
def audit_interrupted(args: ActionArgs) -> str:
    from ckptrescue.datasets.audit_state import default_path
    from ckptrescue.datasets.s3dataset import is_s3

    if is_s3(args["dir"]):
        return "ckptrescue: interrupted (an s3:// audit keeps no state: it starts over)"
    state = args.get("state") or default_path(args["manifest"])
    if args.get("quick") and not args.get("state"):
        return "ckptrescue: interrupted (a --quick audit without --state keeps no state)"
    if not Path(state).exists():
        return "ckptrescue: interrupted before the audit kept any state; nothing was kept"
    return (f"ckptrescue: interrupted; finished files are kept in {state}: run the same "
            "command again to resume")


AUDIT = Command("manifest.audit", render_audit, extras=(NO_PROGRESS,),
                order=("dir", "manifest", "quick", "sample", "seed", "state", "restart",
                       "follow_into", "jobs", "scheduler", "no_progress", "endpoint_url",
                       "use_stored", "allow_unverified", CASE, JSON),
                quiet=lambda a, o: bool(o["no_progress"] or a.get("quick")),
                interrupted=audit_interrupted)
UPDATE = Command("manifest.update", render_update, extras=(NO_PROGRESS,),
                 order=("dir", "manifest", "jobs", "scheduler", "no_progress", "endpoint_url",
                        CASE, JSON),
                 quiet=lambda a, o: bool(o["no_progress"]), interrupted=update_interrupted)
VERIFY = Command("dataset.verify", render_verify)


def register(app: typer.Typer) -> None:
    add_command(manifest_app, "build", BUILD)
    add_command(manifest_app, "audit", AUDIT)
    add_command(manifest_app, "update", UPDATE)
    add_command(manifest_app, "diff", Command("manifest.diff", render_diff))
    add_command(dataset_app, "verify", VERIFY)
    add_command(dataset_app, "profile", Command("dataset.profile", render_profile))
    add_command(dataset_app, "compare", Command(  # --current CURRENT: the old spelling
        "dataset.compare", render_compare, optional=("current",),
        deprecated={"--current": "current"}))
    add_command(dataset_app, "quarantine", Command("dataset.quarantine", render_quarantine))
    app.add_typer(manifest_app, name="manifest")
    app.add_typer(dataset_app, name="dataset")
