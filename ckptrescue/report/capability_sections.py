"""The report sections of the responders' questions no other tool answers (issue #31): each one
the latest step of its action, in one shape both templates render the same way
(``reports/templates/table_section.*.j2``): ``answer``, ``facts`` ([label, value]),
``tables`` ([{title, testid, columns, rows, more}]) and ``notes``.

Pure over the case's step outputs (read by type); nothing is re-run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ckptrescue.checkpoints.outputs import (
    KeyMismatchOutput,
    ReassemblyOutput,
    ReplicaOutput,
    SafeGlobalsOutput,
    WorldSizeOutput,
)
from ckptrescue.datasets.outputs import HubCacheOutput, ManifestDiffOutput
from ckptrescue.engine.case_outputs import latest_output, outputs_of
from ckptrescue.model import JsonObject

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

ROWS = 50  # rows per table in the report (the JSON report's step outputs have them all)


def table(title: str, testid: str, columns: list[str], rows: list[list[Any]],
          total: int | None = None) -> JsonObject:
    shown = [[("" if c is None else str(c)) for c in r] for r in rows[:ROWS]]
    more = (total if total is not None else len(rows)) - len(shown)
    return {"title": title, "testid": testid, "columns": columns, "rows": shown,
            "more": max(more, 0)}


def section(answer: str, *, facts: list[list[Any]] | None = None,
            tables: list[JsonObject] | None = None,
            notes: list[str] | None = None) -> JsonObject:
    return {"answer": answer, "facts": [[str(a), str(b)] for a, b in facts or []],
            "tables": [t for t in tables or [] if t["rows"]], "notes": list(notes or [])}


def manifest_diff(case: Case) -> JsonObject | None:
    out = latest_output(case, ManifestDiffOutput)
    if out is None:
        return None
    rows = [[c["status"], c.get("old_path") or "", c["path"], (c.get("sha256") or
             c.get("old_sha256") or "")[:16]] for c in out.changes]
    facts = [["old", out.old], ["new", out.new]]
    if out.output:
        facts.append(["changes manifest", out.output])
    notes = [f"line {b['line']} of the {b['manifest'].upper()} manifest is not in sha256sum "
             f"format ({b['reason']}): left out" for b in out.bad_lines]
    return section(out.answer, facts=facts, notes=notes, tables=[
        table("", "manifest-diff", ["status", "renamed from", "path", "sha256 (first 16)"],
              rows, len(out.changes) + out.changes_omitted)])


def safe_globals(case: Case) -> JsonObject | None:
    out = latest_output(case, SafeGlobalsOutput)
    if out is None:
        return None
    files = [[f["path"], f.get("format") or "", f.get("error") or (
                "loads as it is" if not f.get("needed") and not f.get("blockers") else
                "loads once the safe list is registered" if f.get("loads_with_safe_list")
                else "refused whatever is registered"),
              len(f.get("needed") or []), "; ".join(f.get("blockers") or [])]
             for f in out.files]
    safe = [[n["global"], ", ".join(n.get("lists") or []), n.get("source", "")]
            for n in out.safe]
    bad = [[n["global"], n["status"], n.get("reason", "")] for n in out.not_safe]
    notes = ["register the safe ones before torch.load(..., weights_only=True): "
             + " ".join(line.strip() for line in out.snippet_lines)] if out.snippet else []
    return section(out.answer, notes=notes, tables=[
        table("Files", "safe-globals-files", ["file", "format", "torch.load(weights_only=True)",
                                              "globals needed", "blockers"], files),
        table("Safe to register", "safe-globals-safe", ["global", "exact list", "why"], safe),
        table("Not to register", "safe-globals-not-safe", ["global", "status", "why"], bad)])


def hub_cache(case: Case) -> JsonObject | None:
    out = latest_output(case, HubCacheOutput)
    if out is None:
        return None
    broken, blobs, repos = [], [], []
    for repo in out.repos:
        label = f"{repo.get('repo_type')} {repo.get('repo_id')}"
        names: dict[str, list[str]] = {}
        for ref, commit in (repo.get("refs") or {}).items():
            names.setdefault(commit, []).append(ref)
        repos.append([label, len(repo.get("revisions") or []), ", ".join(
            f"{k} -> {v[:12]}" for k, v in (repo.get("refs") or {}).items()),
            f"{repo.get('blobs_ok', 0)} of {repo.get('blobs_total', 0)}",
            len(repo.get("broken_revisions") or {})])
        for rev, why in (repo.get("broken_revisions") or {}).items():
            broken.append([label, rev, ", ".join(names.get(rev, [])), "; ".join(why)])
        for b in repo.get("blobs") or []:
            blobs.append([label, b["name"], b["status"], b.get("size"),
                          b.get("actual") or b.get("error") or "",
                          ", ".join(b.get("linked_from") or [])])
    notes = list(out.problems) + [f"{r.get('repo_id')}: {p}" for r in out.repos
                                  for p in r.get("problems") or []]
    return section(out.answer, facts=[["cache", out.root],
                                      ["bytes hashed", out.bytes_hashed]], notes=notes, tables=[
        table("Repositories", "hub-repos", ["repository", "revisions", "refs",
                                             "blobs matching their names", "broken revisions"],
              repos),
        table("Broken revisions", "hub-broken", ["repository", "revision", "refs",
                                                 "what breaks it"], broken),
        table("Blobs that do not verify", "hub-blobs", ["repository", "blob", "status", "size",
                                                        "hashes to / why", "linked from"],
              blobs)])


def key_mismatch(case: Case) -> JsonObject | None:
    out = latest_output(case, KeyMismatchOutput)
    if out is None:
        return None
    rows = [[r["from"], r["to"]] for r in out.mapping]
    rows += [[t["copy_of"], f"{t['name']} (tied, saved once)"] for t in out.tied]
    problems = [["shape differs", f"{b['checkpoint']} {b['saved_shape']}",
                 f"{b['model']} {b['expected_shape']}"] for b in out.shape_mismatches]
    problems += [["FSDP flat parameter", n, "no renaming maps it"] for n in out.flat_params]
    problems += [["missing", "", n] for n in out.missing]
    problems += [["unexpected", n, ""] for n in out.unexpected]
    notes = ["fix: " + " | ".join(line.rstrip() for line in out.snippet_lines)] \
        if out.rules and out.matched_after > out.matched_before else []
    return section(out.answer, facts=[["checkpoint", out.checkpoint],
                                      ["expected names from", out.expected_from],
                                      ["matched as saved / after the mapping",
                                       f"{out.matched_before} / {out.matched_after} of "
                                       f"{out.expected_keys}"]], notes=notes, tables=[
        table("Causes", "keys-causes", ["cause", "names it fixes"],
              [[r["cause"], r.get("fixes", "")] for r in out.rules]),
        table("Mapping", "keys-mapping", ["checkpoint name", "model name"], rows,
              out.mapping_total + len(out.tied)),
        table("What no mapping fixes", "keys-unresolved", ["problem", "checkpoint", "model"],
              problems, len(out.shape_mismatches) + len(out.flat_params) + out.missing_total
              + out.unexpected_total)])


def reassembly(case: Case) -> JsonObject | None:
    out = latest_output(case, ReassemblyOutput)
    if out is None:
        return None
    rows = [[r["rank"], r["role"], r["status"], r.get("source") or "",
             (r.get("sha256") or "")[:16]] for r in out.ranks if r["status"] != "present"]
    rejected = [[r["rank"], t["path"], t["outcome"]] for r in out.ranks
                for t in r.get("tried") or []
                if t["outcome"] != "verified" and not t["outcome"].startswith("not present")]
    facts = [["step", out.step_dir], ["family", out.family],
             ["world", ", ".join(f"{k}={v}" for k, v in out.world.items())]]
    if out.plan_file:
        facts += [["plan", out.plan_file], ["script (builds a new directory)", out.plan_script]]
    return section(out.answer, facts=facts, notes=list(out.check_problems), tables=[
        table("Rank files the step lacks", "reassembly-ranks",
              ["rank", "role", "status", "verified copy", "sha256 (first 16)"], rows),
        table("Candidates rejected", "reassembly-rejected", ["rank", "candidate", "why"],
              rejected)])


def world_size(case: Case) -> JsonObject | None:
    outs = outputs_of(case, WorldSizeOutput)
    if not outs:
        return None
    rows = [[o.step_dir, o.family, ", ".join(f"{k}={v}" for k, v in o.saved_world.items()),
             o.ranks, o.loads, o.how] for o in outs[-20:]]
    last = outs[-1]
    facts = [["run", c] for c in last.commands]
    if last.config:
        import json

        facts.append(["then load with", json.dumps(last.config)])
    return section(last.answer, facts=facts, notes=list(last.notes), tables=[
        table("Steps asked about", "world-size", ["step", "family", "saved world", "ranks",
                                                  "loads", "how"], rows),
        table("Files the conversion reads", "world-size-files", ["file"],
              [[f] for f in last.files_needed])])


def replicas(case: Case) -> JsonObject | None:
    out = latest_output(case, ReplicaOutput)
    if out is None:
        return None
    rows = []
    for f in out.files:
        p = f.get("persistent") or {}
        rows.append([f["relpath"], "persistent", p.get("status", ""), "", ""])
        for r in f.get("replicas") or []:
            rows.append([f["relpath"], r["path"], r["status"], r.get("differing_total") or "",
                         ", ".join(r.get("differing") or [])])
    resume = [[f["relpath"], f.get("resume_from") or "—", f.get("decision", "")]
              for f in out.files]
    return section(out.answer, facts=[["persistent", out.persistent]] + [
        ["replica", r] for r in out.replicas], notes=[
        f"only in a replica: {x}" for x in out.replica_only[:20]], tables=[
        table("Copies compared", "replicas", ["rank file", "copy", "status",
                                              "tensors differing", "which"], rows),
        table("Resume each rank file from", "replicas-resume", ["rank file", "copy", "why"],
              resume)])


BUILDERS = {"manifest_diff": manifest_diff, "safe_globals": safe_globals,
            "key_mismatch": key_mismatch, "reassembly": reassembly, "world_size": world_size,
            "replicas": replicas, "hub_cache": hub_cache}


def build(case: Case) -> dict[str, JsonObject | None]:
    """Every capability section's model (None where the case holds no such step)."""
    return {key: builder(case) for key, builder in BUILDERS.items()}
