"""The dataset wing's text: what the manifest, dataset, hub, trainstate, gate and recover
commands show of their step's typed outputs, and their exit codes. Pure (records in, lines
out); the CLI prints them (``cli/dataset_cmd.py`` and its neighbours), names made inert on the
way. ``asides`` go to stderr beside the text; ``notes`` to stderr even with ``--json``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptrescue.display import Shown
from ckptrescue.errors import ExitCode
from ckptrescue.model import JsonObject

if TYPE_CHECKING:  # (each family of records is imported by the command that shows it)
    from ckptrescue.datasets.outputs import (
        DatasetCompareOutput,
        DatasetProfileOutput,
        DatasetVerifyOutput,
        GateOutput,
        HubCacheOutput,
        ManifestAuditOutput,
        ManifestBuildOutput,
        ManifestDiffOutput,
        ManifestUpdateOutput,
        QuarantineOutput,
        RecoverOutput,
        TrainStateOutput,
    )

FINDINGS = int(ExitCode.FINDINGS)


def display(path: str) -> str:
    """A path as a manifest stores it, shown (non-UTF-8 bytes as escapes)."""
    from ckptrescue.datasets.walk import display as shown_path
    from ckptrescue.datasets.walk import from_json_path

    return shown_path(from_json_path(path))


def left_out(skipped: list[JsonObject], unreadable: list[JsonObject]) -> list[str]:
    """Files a build or update skipped or could not read (for stderr)."""
    return ([f"skipped: {display(s['path'])}: {s['reason']}" for s in skipped]
            + [f"UNREADABLE: {display(u['path'])}: {u['error']} at offset {u['offset']}"
               for u in unreadable])


def build(out: ManifestBuildOutput, *, allow_empty: bool, root: str) -> Shown:
    """Exit 1 when a file was unreadable or the manifest is empty (unless ``allow_empty``)."""
    shown = Shown(lines=[out.answer], notes=left_out(out.skipped, out.unreadable))
    shown.notes += [f"CHANGED while hashed: {display(c['path'])}: hashed again "
                    f"({c['times']} time(s))" for c in out.changed_while_hashed]
    empty = out.files == 0 and not out.unreadable and not allow_empty
    if empty:  # a wrong path or a dataset that is not mounted, more often than not
        shown.note(f"warning: no files under {out.root or root}: the manifest is empty (is "
                   "the dataset mounted? --allow-empty accepts it)")
    shown.exit_code = 0 if out.ok and not empty else FINDINGS
    return shown


def audit(out: ManifestAuditOutput) -> Shown:
    lines = []
    for row in out.files:
        if row["status"] != "ok":
            reason = out.reasons.get(row["path"], "")
            lines.append(f"{row['status'].upper():<11} {display(row['path'])}"
                         + (f"  ({reason})" if reason else ""))
    if out.files_omitted:
        lines.append(f"{out.files_omitted:,} ok files not listed (every row is in {out.state})")
    lines.append("counts: " + ", ".join(f"{k}={v}" for k, v in out.counts.items()))
    if out.resumed:
        lines.append(f"resumed {out.resumed:,} files from {out.state}")
    if out.sample:
        lines.append(f"sample: seed {out.sample['seed']}, {out.sample['size']:,} of "
                     f"{out.sample['population']:,} files hashed")
    shown = Shown.answered(lines, out.answer, out.ok)
    shown.notes = [f"note: {note}" for note in out.notes]
    return shown


def update(out: ManifestUpdateOutput) -> Shown:
    lines = [f"DELETED  {display(path)}  (entry dropped)" for path in out.deleted]
    if not out.inode_checked:
        lines.append("note: the old sidecar recorded no inodes: size and mtime compared only")
    lines.append(f"hashed {out.hashed} ({len(out.new)} new, {len(out.changed)} changed), "
                 f"reused {out.reused}; old manifest kept as {out.previous}")
    shown = Shown.answered(lines, out.answer, out.ok)
    shown.notes = left_out(out.skipped, out.unreadable)
    return shown


def diff(out: ManifestDiffOutput) -> Shown:
    """Exit 1 when the manifests differ or a line of either is not in sha256sum format."""
    shown = Shown()
    for ch in out.changes:
        if ch["status"] == "renamed":
            shown.say(f"RENAMED  {display(ch['old_path'])} -> {display(ch['path'])}")
        else:
            shown.say(f"{ch['status'].upper():<8} {display(ch['path'])}")
    if out.changes_omitted:
        shown.say(f"{out.changes_omitted:,} more changes not listed"
                  + (f" (every change is in {out.changes_file})" if out.changes_file else
                     " (write them all with -o OUT)"))
    shown.asides = [f"{bad['manifest'].upper()} line {bad['line']}: not in sha256sum format "
                    f"({bad['reason']}): left out" for bad in out.bad_lines]
    if out.output:
        shown.say(f"changes written to {out.output} and {out.changes_file}")
    shown.say(out.answer)
    shown.exit_code = FINDINGS if out.differs or any(out.bad_lines) else 0
    return shown


def verify_lines(out: DatasetVerifyOutput) -> list[str]:
    """The human listing of ``dataset verify``: what is not ok, with its bad records."""
    lines = []
    for f in out.files:
        if f["status"] == "ok" or (f["status"] == "unchecked" and f["format"] == "other"):
            continue  # other formats are counted in the answer line, not listed
        tail = f" ({f['note']})" if f.get("note") else ""
        lines.append(f"{f['status'].upper():<10} {f['format']:<14} {display(f['path'])}{tail}")
        for b in f.get("bad_records") or []:
            where = ", ".join(p for p in (
                f"record {b['index']}" if b.get("index") is not None else "",
                f"offset {b['offset']}" if b.get("offset") is not None else "",
                f"key {b['key']}" if b.get("key") else "") if p)
            lines.append(f"    {where}: {b['problem']}")
    return lines


def verify(out: DatasetVerifyOutput) -> Shown:
    return Shown.answered(verify_lines(out), out.answer, out.ok)


def profile(out: DatasetProfileOutput) -> Shown:
    lines = []
    for shard in out.profile.get("shards", []):
        note = "" if shard.get("complete", True) else "  (not complete)"
        lines.append(f"{shard.get('records', '?'):>10} records  {shard.get('format', ''):<12} "
                     f"{shard.get('path')}{note}")
    return Shown.answered(lines, out.answer, True)


def compare(out: DatasetCompareOutput) -> Shown:
    lines = [f"[{check['code']}] {check['shard']} {check.get('field') or ''}: "
             f"{check['summary']}" for check in out.compare.get("flagged", [])]
    for spot in out.spot_checks:
        if spot.get("error"):
            lines.append(f"    spot check of {spot['shard']}: {spot['error']}")
            continue
        idx = [r["index"] for r in spot["flagged"]["records"]]
        lines.append(f"    spot check of {spot['shard']}: seed {spot['seed']}, records {idx}")
    return Shown.answered(lines, out.answer, out.ok)


def quarantine(out: QuarantineOutput) -> Shown:
    lines = [out.answer]
    if out.path_list:
        lines.append(f"plain list of whole files: {out.path_list}")
    return Shown(lines=lines)


def trainstate(out: TrainStateOutput) -> Shown:
    """Exit 1 when the analysis found anything."""
    lines = [f"{c['step']!s:>10}  {str(c['verdict']).upper():<10} {c['path']}"
             for c in out.checkpoints]
    lines += [f"[{f['code']}] {f['title']}" for f in out.findings]
    return Shown.answered(lines, out.answer, not out.findings)


def gate(out: GateOutput) -> Shown:
    lines = [f"    {p['path']}: {p['problem']}" + (f" ({p['finding']})" if p.get("finding")
                                                     else "") for p in out.problems[:50]]
    if len(out.problems) > 50:
        lines.append(f"    ... (+{len(out.problems) - 50})")
    return Shown.answered(lines, ("PASS: " if out.passed else "FAIL: ") + out.reason,
                          out.passed)


def recover_lines(out: RecoverOutput) -> list[str]:
    lines = []
    for r in out.files:
        if r["status"] == "recovered":
            lines.append(f"RECOVERED     {display(r['path'])}  ({r['damage']}) from "
                         f"{r['source']}")
        else:
            lines.append(f"UNRECOVERABLE {display(r['path'])}  ({r['damage']}): {r['reason']}")
    for left in out.clean_view_left_out:
        lines.append(f"LEFT OUT      {display(left['path'])}: {left['reason']}")
    if out.plan_file:
        lines.append(f"plan:       {out.plan_file} ({len(out.plan)} replacement(s))")
        script = out.plan_script
        lines.append(f"script:     {script} (review it, then: bash {script} [DATASET-ROOT]; "
                     "the kit never runs it)")
    if out.clean_view:
        lines.append(f"clean view: {out.clean_view} ({out.clean_view_files} "
                     f"verified file(s); manifest {out.clean_view_manifest})")
    return lines


def recover(out: RecoverOutput) -> Shown:
    return Shown.answered(recover_lines(out), out.answer, out.ok)


def hub_verify(out: HubCacheOutput) -> Shown:
    lines: list[str] = []
    for repo in out.repos:
        label = f"{repo['repo_type']} {repo['repo_id']}"
        refs = {}
        for name, commit in repo.get("refs", {}).items():
            refs.setdefault(commit, []).append(name)
        for b in repo.get("blobs", []):
            if b["status"] == "incomplete":
                lines.append(f"INCOMPLETE {label}: blobs/{b['name']} ({b['size']} bytes)")
            elif b["status"] == "mismatch":
                lines.append(f"DAMAGED    {label}: blobs/{b['name']} hashes to {b['actual']}"
                             + (f"; used by {', '.join(b['linked_from'])}" if b["linked_from"] else ""))
            else:
                lines.append(f"{b['status'].upper():<10} {label}: blobs/{b['name']}: {b.get('error')}")
        for rev, why in repo.get("broken_revisions", {}).items():
            names = f" ({', '.join(refs[rev])})" if rev in refs else ""
            lines.append(f"BROKEN     {label}@{rev}{names}")
            for line in why:
                lines.append(f"    {line}")
        for p in repo.get("problems", []):
            lines.append(f"NOTE       {label}: {p}")
    for p in out.problems:
        lines.append(f"NOTE       {p}")
    return Shown.answered(lines, out.answer, out.ok)

