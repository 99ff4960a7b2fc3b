"""Build the report model from a case: nothing is re-run, everything comes from the case.

Pure over the case's files (audit records, artifacts). Deterministic: the same case gives the
same model apart from ``generated``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from ckptrescue import __version__
from ckptrescue.checkpoints.outputs import RankOutput
from ckptrescue.datasets.outputs import DatasetCompareOutput, TrainStateOutput
from ckptrescue.display import shown_tree
from ckptrescue.engine.answer import answer_line, latest_checkpoints, outputs_of, salvage_results
from ckptrescue.errors import CaseError
from ckptrescue.model import JsonObject, Severity
from ckptrescue.record import provenance
from ckptrescue.record.audit import utc_now
from ckptrescue.record.case import Case
from ckptrescue.report import capability_sections
from ckptrescue.storage.outputs import ImageOutput, LocateOutput, TriageOutput
from ckptrescue.stores.outputs import S3HistoryOutput, S3VerifyOutput

SEVERITY_ORDER = [Severity.CRITICAL, Severity.ERROR, Severity.WARNING, Severity.INFO]
_MAP_WIDTH = 900


@dataclass(frozen=True)
class Section:
    """One section of the report, as both templates render it (same order, same title)."""

    name: str          # identifier: the templates' branch for it; HTML anchor with "-" for "_"
    title: str         # the heading (``<h2>`` in HTML, ``## `` in Markdown)
    has_content: bool  # the model holds something for it
    always: bool       # rendered even without content (then it says there is none)

    @property
    def shown(self) -> bool:
        return self.always or self.has_content

    @property
    def anchor(self) -> str:
        return self.name.replace("_", "-")

    def to_json(self) -> JsonObject:
        return {"name": self.name, "anchor": self.anchor, "title": self.title,
                "has_content": self.has_content, "always": self.always, "shown": self.shown}


# The one list of report sections, in order: (name, title, always shown, has content).
# Titles may use {commands} and {refusals} (their counts). A new section goes here and into
# both templates (reports/templates/report.html.j2, report.md.j2) under the same name;
# tests/report/test_parity.py checks they agree, and docs/report.md lists them.
SECTIONS: tuple[tuple[str, str, bool, Callable[[JsonObject], bool]], ...] = (
    ("answer", "Answer", True, lambda m: bool(m["answer"])),
    ("examined", "What was examined", True, lambda m: bool(m["examined"])),
    ("checkpoints", "Checkpoints", False, lambda m: bool(m["checkpoints"])),
    ("salvage", "Salvage", False, lambda m: bool(m["salvage"])),
    ("multirank", "Multi-rank steps and the resume pointer", False,
     lambda m: bool(m["multirank"])),
    ("safe_globals", "The exact safe-globals list", False, lambda m: bool(m["safe_globals"])),
    ("key_mismatch", "Checkpoint names against the model's", False,
     lambda m: bool(m["key_mismatch"])),
    ("reassembly", "Scattered and half-written ranks", False, lambda m: bool(m["reassembly"])),
    ("world_size", "Another world size", False, lambda m: bool(m["world_size"])),
    ("replicas", "Replicas against the persistent copy", False, lambda m: bool(m["replicas"])),
    ("training_state", "Training state across checkpoints", False,
     lambda m: bool(m["training_state"])),
    ("dataset_content", "Dataset content against its baseline", False,
     lambda m: bool(m["dataset_content"])),
    ("manifest_diff", "Manifest to manifest", False, lambda m: bool(m["manifest_diff"])),
    ("hub_cache", "Hugging Face hub cache", False, lambda m: bool(m["hub_cache"])),
    ("bad_sectors", "Bad-sector map", False, lambda m: bool(m["bad_sector_map"])),
    ("s3", "Object store", False, lambda m: bool(m["s3_verify"] or m["s3_known_good"])),
    ("findings", "Findings", True, lambda m: any(m["findings_by_severity"].values())),
    ("evidence", "Evidence inventory", True, lambda m: bool(m["evidence"])),
    ("kernel_guarantees", "Kernel-enforced guarantees", True,
     lambda m: bool(m["kernel_guarantees"])),
    ("timeline", "Timeline", True, lambda m: bool(m["timeline"]["rows"])),
    ("commands", "Commands run ({commands}) and refused ({refusals})", True,
     lambda m: bool(m["commands"] or m["refusals"])),
    ("integrity", "Audit chain and tool versions", True, lambda m: True),
)


def sections(model: JsonObject) -> list[Section]:
    """The report's sections for ``model``, in order, shown or not."""
    counts = {"commands": len(model["commands"]), "refusals": len(model["refusals"])}
    return [Section(name, title.format(**counts), bool(has(model)), always)
            for name, title, always, has in SECTIONS]


def _timeline_entry(record: JsonObject) -> JsonObject | None:
    action = record["action"]
    d = record.get("details", {})
    text = {
        "case.created": lambda: "case created",
        "evidence.added": lambda: f"evidence {d['item']['id']} added: {d['item']['kind']} "
                                  f"{d['item']['source']}",
        "run.started": lambda: f"playbook {d.get('playbook')} started"
                               + (" (resumed)" if d.get("resumed") else ""),
        "run.finished": lambda: f"playbook run {d.get('status')}",
        "step.started": lambda: f"step {d.get('step')} [{d.get('action')}] started",
        "step.finished": lambda: f"step {d.get('step')} [{d.get('action')}] {d.get('status')}"
                                 + (f": {d.get('error')}" if d.get("error") else ""),
        "step.skipped": lambda: f"step {d.get('step')} skipped ({d.get('reason')})",
        "tool.refused": lambda: f"REFUSED {' '.join(d.get('argv', []))}: {d.get('reason')}",
        "gate.confirmed": lambda: f"gate confirmed: {d.get('prompt')}",
        "case.sealed": lambda: "case sealed",
        "audit.torn_tail": lambda: "torn audit record chained over",
        "safety.kernel": lambda: f"kernel guarantee {d.get('guarantee')} on {d.get('target')}: "
                                 + ("released" if d.get("released") else
                                    "enforced" if d.get("enforced") else "NOT enforced"),
    }.get(action)
    if text is None:
        return None
    try:
        shown = text()
    except (KeyError, TypeError):  # only an edit of the log makes one; case verify names it
        shown = f"{action} (a record of another shape than the kit writes)"
    return {"time": record.get("time"), "seq": record["seq"], "action": action, "text": shown,
            "step": d.get("step"), "run": d.get("run_key")}


def _timeline(case: Case, records: list[JsonObject]) -> JsonObject:
    """The kit's own actions and what the case collected that bears on the incident (evidence
    devices, I/O errors, OOM and hung tasks, the job; checkpoint mtimes, object versions) inside
    a window around it, on one time axis; the rest counted (``report/timeline.py``). The full
    merged timeline is ``report --format timeline`` (docs/exports.md)."""
    from ckptrescue.exports.records import iso_utc, parse_time
    from ckptrescue.exports.timeline import timeline_events
    from ckptrescue.report import timeline as tl

    kit = [{**e, "source": "ckptrescue", "exact": True}
           for r in records if (e := _timeline_entry(r))]
    try:
        events = [e for e in timeline_events(case) if e.source != "ckptrescue"]
    except (OSError, ValueError):  # a damaged artifact: the kit's own events still show
        events = []
    triage = outputs_of(case, TriageOutput)
    subjects = tl.subjects_of(records, [p for t in triage for p in t.processes], parse_time)
    damaged = [e.time for e in events if e.source == "file"
               and e.attributes.get("verdict") not in (None, "intact")]
    created = parse_time(case.manifest.get("created"))
    end = parse_time(records[-1]["time"]) if records else None
    window = tl.incident_window(created, end, damaged)
    return tl.select(kit, events, subjects, window=window, iso=iso_utc).to_json()


def _bad_sector_map(case: Case) -> JsonObject | None:
    images = outputs_of(case, ImageOutput)
    if not images:
        return None
    img = images[-1]
    size = int(img.size or 0)
    if size <= 0:
        return None
    locates = outputs_of(case, LocateOutput)
    labels: dict[tuple[int, int], list[str]] = {}
    if locates:
        for r in locates[-1].ranges:
            names = []
            for f in r.get("files", []):
                tensors = f.get("tensors") or []
                names.append(f"{f.get('path')}: {', '.join(tensors) if tensors else 'no tensor'}")
            labels[(int(r["start"]), int(r["end"]))] = names or ["no file (free space/metadata)"]
    ranges = []
    for i, (start, end) in enumerate(img.bad_ranges or []):
        x = start / size * _MAP_WIDTH
        w = max((end - start) / size * _MAP_WIDTH, 2.0)
        ranges.append({"start": start, "end": end, "x": round(x, 2), "w": round(w, 2),
                       "label_y": 70 + 16 * i,
                       "labels": labels.get((int(start), int(end)), [])})
    return {"size": size, "width": _MAP_WIDTH, "ranges": ranges,
            "height": 80 + 16 * max(len(ranges), 1), "image": img.image,
            "rescued_bytes": img.rescued_bytes, "image_sha256": img.image_sha256}


def _recommendations(model: JsonObject) -> list[str]:
    recs: list[str] = []
    resume = model.get("resume_from")
    if resume:
        recs.append(f"Resume training from {resume} (the newest checkpoint that verifies).")
    elif model["checkpoints"]:
        recs.append("No checkpoint verifies: salvage intact tensors and fill the rest from an "
                    "older checkpoint or a versioned backup before resuming.")
    for ckpt in model["checkpoints"]:
        if ckpt["verdict"] == "unsafe":
            recs.append(f"Do not load {ckpt['name']}: its pickle references unsafe globals. "
                        "Quarantine it and find out who wrote it.")
    if model.get("bad_sector_map"):
        recs.append("The source has unreadable sectors: keep working on the image only; more "
                    "retry passes into a new destination (ckptrescue image SOURCE --dest NEW "
                    "--retries N) may recover more.")
    for key in model.get("s3_known_good", []):
        recs.append(f"Restore s3 key {key['key']} from version {key['known_good']} "
                    "(ckptrescue s3 restore ... --version).")
    kernel = model.get("kernel_guarantees") or []
    if any(not k["enforced"] and not k["released"] for k in kernel):
        recs.append("Some guarantees were not enforced by the kernel for this case (listed under "
                    "Kernel-enforced guarantees): there only the safety guard protected the "
                    "evidence.")
    held: dict[str, bool] = {}
    for k in kernel:
        if k["guarantee"] in {"block-device-readonly", "image-immutable"} and (
                k["by_kit"] or k["released"]):
            held[k["target"]] = k["enforced"] and not k["released"]
    if any(held.values()):
        recs.append("Evidence stays write-blocked by the kernel after this case ("
                    + ", ".join(t for t, on in held.items() if on) + "); when the investigation "
                    "is over: ckptrescue writeblock release TARGET --case CASE.")
    if model["refusals"]:
        recs.append("Some commands were refused by the safety guard; they are listed below.")
    recs.append("Keep the sealed head hash of this case out of band and verify the case "
                "(ckptrescue case verify --expect-head) before sharing conclusions.")
    return recs


def kernel_guarantees(records: list[JsonObject]) -> list[JsonObject]:
    """The ``safety.kernel`` records of the case, whatever their guarantee (block devices,
    images, the runner's namespace, ...), each distinct state once, in order."""
    rows: list[JsonObject] = []
    seen: set[tuple[Any, ...]] = set()
    for r in records:
        if r.get("action") != "safety.kernel":
            continue
        d = r.get("details") or {}
        row = {"seq": r.get("seq"), "time": r.get("time"),
               "guarantee": str(d.get("guarantee") or "?"), "target": str(d.get("target") or ""),
               "enforced": bool(d.get("enforced")), "released": bool(d.get("released")),
               "how": str(d.get("how") or ""), "previous": d.get("previous"),
               "by_kit": d.get("by_kit"), "reason": d.get("reason"), "note": d.get("note")}
        key = (row["guarantee"], row["target"], row["enforced"], row["released"], row["how"],
               row["reason"])
        if key not in seen:
            seen.add(key)
            rows.append(row)
    return rows


# Each guarantee of docs/safety.md, who enforces it, and the records that show it for a case.
SAFETY_GUARANTEES: tuple[tuple[str, str, str], ...] = (
    ("evidence reached only through devices the kernel keeps read-only", "kernel",
     "evidence-devices"),
    ("tools write only the files they name (private mount namespace)", "kernel", "namespace"),
    ("attachments recorded from what the kernel showed; detach only the case's own",
     "construction", "attachments"),
    ("tools write only into directories the kit made for the case", "construction",
     "output-dirs"),
    ("recovered files written beneath their destination (no symlink, '..' or mount)",
     "construction", "beneath"),
    ("values are never templates; tools get a clean environment", "construction", "always"),
    ("evidence judged where its filesystem keeps it (bind mounts, overlay layers); "
     "host-namespace tools given the very device node and path judged", "construction",
     "always"),
    ("read-only forms only, same-disk copies refused (the grammars)", "guard", "refusals"),
)


def _still_deferred(records: list[JsonObject]) -> set[Any]:
    """The releases deferred (``safety.detach_deferred``) and not released since, by the
    attachment's identity, in the order of the log (one loop device may be attached, deferred
    and released again and again)."""
    from ckptrescue.guard.kernel import Attachment

    pending: set[Any] = set()
    for r in sorted(records, key=lambda r: int(r.get("seq", 0))):
        action = r.get("action")
        if action not in ("safety.detach_deferred", "safety.detached"):
            continue
        att = Attachment.from_json(r.get("details") or {})
        if att is None:
            continue
        if action == "safety.detach_deferred":
            pending.add(att.key())
        else:
            pending.discard(att.key())
    return pending


def safety_table(records: list[JsonObject]) -> list[JsonObject]:
    """For each guarantee: enforced by the kernel, by construction or by the guard alone, and
    whether it held for this case (from its records: ``safety.kernel``, ``safety.attached``,
    ``safety.output_dir``, ``tool.refused``)."""
    by: dict[str, list[JsonObject]] = {}
    for r in records:
        by.setdefault(str(r.get("action")), []).append(r.get("details") or {})
    kernel = by.get("safety.kernel", [])
    devices = [k for k in kernel if not str(k.get("guarantee", "")).startswith("tool-")]
    spaces = [k for k in kernel if k.get("guarantee") == "tool-namespace"]

    def held(kind: str) -> tuple[str, str]:
        if kind == "evidence-devices":
            if not devices:
                return "not exercised", "no evidence device or image was attached"
            bad = [k for k in devices if not k.get("enforced") and not k.get("released")]
            return ("no" if bad else "yes"), f"{len(devices) - len(bad)} of {len(devices)}"
        if kind == "namespace":
            if not spaces:
                return "not exercised", "no tool ran in a private namespace"
            bad = [k for k in spaces if not k.get("enforced")]
            return ("no" if bad else "yes"), (bad[0].get("how", "") if bad else
                                              "bubblewrap for every tool")
        if kind == "attachments":
            n, m = len(by.get("safety.attached", [])), len(by.get("safety.detached", []))
            k = len(_still_deferred(records))
            held_open = f", {k} release(s) deferred (still held open elsewhere)" if k else ""
            return ("yes" if n or m else "not exercised"), f"{n} attached, {m} released{held_open}"
        if kind == "output-dirs":
            n = len(by.get("safety.output_dir", []))
            return ("yes" if n else "not exercised"), f"{n} output director(ies)"
        if kind == "refusals":
            n = len(by.get("tool.refused", []))
            return "yes", f"{n} command(s) refused"
        return "yes", "by construction"

    rows = []
    for text, enforced_by, kind in SAFETY_GUARANTEES:
        state, note = held(kind)
        rows.append({"guarantee": text, "enforced_by": enforced_by, "held": state,
                     "note": note})
    return rows


def _unique(findings: list[Any]) -> list[Any]:
    """The same finding recorded by several runs or steps is shown once."""
    seen: set[tuple[Any, ...]] = set()
    out = []
    for f in findings:
        key = (f.code, f.title, f.evidence, f.offset, f.length, f.tensors)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


TABLE_PREVIEW = 20


def _with_table(case: Case, finding: Any) -> JsonObject:
    """A finding's JSON; one that stands for many (record/findings_table.py) also carries the
    first rows of its per-tensor table and where the whole table is."""
    from ckptrescue.record.findings_table import rows, table_of

    data: JsonObject = finding.to_json()
    table = table_of(finding)
    if table is not None:
        try:
            data["table_rows"] = [f"{r.title}" + (f" @ {r.offset}+{r.length}"
                                                  if r.offset is not None else "")
                                  for r in rows(case, finding, limit=TABLE_PREVIEW)]
        except (OSError, CaseError):  # gone or changed: case verify names it
            data["table_rows"] = []
        data["table_path"] = f"artifacts/{table}"
    return data


def build(case: Case) -> JsonObject:
    records = list(case.records())
    verification = case.verify()
    findings = _unique(case.findings())
    by_sev = {str(s): [_with_table(case, f) for f in findings if f.severity == s]
              for s in SEVERITY_ORDER}
    checkpoints = []
    for path, ckpt in sorted(latest_checkpoints(case).items()):
        rows = []
        reasons: dict[str, list[str]] = {}
        for f in ckpt.findings:
            for t in f.tensors:
                reasons.setdefault(t, []).append(f"{f.code} {f.title}")
        for kind in ("damaged", "suspect", "missing"):
            for name in ckpt.tensors_of(kind):
                rows.append({"name": name, "status": kind, "reasons": reasons.get(name, [])})
        checkpoints.append({
            "path": path, "name": PurePath(path).name, "format": ckpt.format,
            "verdict": ckpt.verdict, "tensors_total": ckpt.tensors_total,
            "rows": rows, "row_groups": _row_groups(rows),
            "findings": [f.to_json() for f in ckpt.findings],
        })
    ranks = outputs_of(case, RankOutput)
    resume = ranks[-1].resume_from if ranks else None
    commands = []
    refusals = []
    for r in records:
        d = r.get("details", {})
        if r["action"] in {"tool.run", "sandbox.run"}:
            commands.append({"seq": r["seq"], "time": r["time"], "argv": d.get("argv", []),
                             "returncode": d.get("returncode"),
                             "duration_s": d.get("duration_s"),
                             "stdout_sha256": d.get("stdout_sha256"),
                             "stderr_sha256": d.get("stderr_sha256"),
                             "timed_out": d.get("timed_out"), "truncated": d.get("truncated")})
        elif r["action"] == "tool.refused":
            refusals.append({"seq": r["seq"], "time": r["time"], "argv": d.get("argv", []),
                             "reason": d.get("reason")})
    versions = {}
    for r in records:
        if r["action"] == "tool.version":
            d = r["details"]
            versions[d["tool"]] = {"executable": d.get("executable"), "version": d.get("version")}
    salvages = [s.to_json() for s in salvage_results(case)]
    s3_known_good = [k.to_json() for out in outputs_of(case, S3HistoryOutput)[-1:]
                     for k in out.keys if k.known_good]
    s3_verify = outputs_of(case, S3VerifyOutput)
    locates = outputs_of(case, LocateOutput)
    model: JsonObject = {
        "generated": utc_now(),
        "tool_version": __version__,
        "manifest": case.manifest,
        "answer": answer_line(case),
        "resume_from": resume,
        "rank": ranks[-1].to_json() if ranks else None,
        "timeline": _timeline(case, records),
        "evidence": [e.to_json() for e in case.evidence()],
        "findings_by_severity": by_sev,
        "finding_counts": dict(Counter(str(f.severity) for f in findings)),
        "checkpoints": checkpoints,
        "salvage": salvages,
        "bad_sector_map": _bad_sector_map(case),
        "locate": locates[-1].to_json() if locates else None,
        "s3_verify": s3_verify[-1].to_json() if s3_verify else None,
        "s3_rows": _s3_rows(s3_verify[-1].to_json() if s3_verify else None),
        "s3_known_good": s3_known_good,
        "commands": commands,
        "refusals": refusals,
        "kernel_guarantees": kernel_guarantees(records),
        "safety_table": safety_table(records),
        "tool_versions": dict(sorted(versions.items())),
        "verification": verification.to_json(),
        "records": len(records),
    }
    where = provenance.index(case)
    for c in checkpoints:
        found = where.locate(c["path"])
        c["provenance"] = found.to_json() if found else None
        c["where"] = found.label if found else c["path"]
    model["evidence_count"] = where.evidence_count
    refs = sorted({c["provenance"]["evidence_id"] for c in checkpoints if c["provenance"]})
    items = {e["id"]: e for e in model["evidence"]}
    model["evidence_refs"] = [{"id": i, "kind": items[i]["kind"], "source": items[i]["source"],
                               "sha256": items[i].get("sha256")} for i in refs if i in items]
    model["multirank"] = _multirank(ranks[-1].to_json() if ranks else None)
    model["training_state"] = _training_state(outputs_of(case, TrainStateOutput))
    model["dataset_content"] = _dataset_content(outputs_of(case, DatasetCompareOutput))
    model.update(capability_sections.build(case))
    # no mount point or scratch path reaches the reader outside the commands section
    for key in ("answer", "resume_from", "rank", "timeline", "findings_by_severity",
                "checkpoints", "salvage", "bad_sector_map", "locate", "multirank",
                "training_state", *capability_sections.BUILDERS):
        if key in model:
            model[key] = where.relabel(model[key])
    model["findings_grouped"] = _group_findings(model["findings_by_severity"],
                                                model["evidence"])
    model["examined"] = where.relabel(_examined(case, model))
    model["recommendations"] = _recommendations(model)
    model["sections"] = [s.to_json() for s in sections(model)]
    model["clean"] = not (model["finding_counts"].get("error") or
                          model["finding_counts"].get("critical") or
                          any(c["verdict"] != "intact" for c in checkpoints) or
                          model["bad_sector_map"])
    return shown_tree(model)  # names from the evidence are shown, never obeyed (display.py)


def _row_groups(rows: list[JsonObject]) -> list[JsonObject]:
    """Tensors with the same status and the same reasons on one row (22 optimizer tensors lost
    past a truncation point are one line, not 22): status, reasons, names in order."""
    groups: dict[tuple[str, tuple[str, ...]], JsonObject] = {}
    for row in rows:
        key = (row["status"], tuple(row["reasons"]))
        group = groups.setdefault(key, {"status": row["status"], "reasons": row["reasons"],
                                        "names": []})
        group["names"].append(row["name"])
    return list(groups.values())


def _s3_rows(verify: JsonObject | None) -> list[JsonObject]:
    """The objects that do not match, for the report: each mismatch on its own row; keys that
    are only missing on one side, one row per status (their keys listed)."""
    if not verify:
        return []
    rows: list[JsonObject] = []
    missing: dict[str, list[str]] = {}
    for o in verify.get("objects", []):
        status = str(o.get("status"))
        if status == "match":
            continue
        if status.startswith("missing"):
            missing.setdefault(status, []).append(str(o.get("key")))
            continue
        rows.append({"keys": [o.get("key")], "status": status,
                     "algorithm": o.get("algorithm") or "—", "detail": o.get("detail")})
    for status, keys in missing.items():
        rows.append({"keys": keys, "status": status, "algorithm": "—", "detail": None})
    return rows


def _group_findings(by_sev: dict[str, list[JsonObject]],
                    evidence: list[JsonObject]) -> list[JsonObject]:
    """Findings by evidence item, then by the checkpoint/object/file they are about, most
    severe first: what a responder reads one piece of evidence at a time."""
    import re

    items = {e["id"]: e for e in evidence}
    groups: dict[str, dict[str, list[JsonObject]]] = {}
    for sev in (str(s) for s in SEVERITY_ORDER):
        for f in by_sev.get(sev, []):
            where = str(f.get("evidence") or "")
            m = re.match(r"^(E\d+):(.*)$", where) or re.match(r"^(E\d+)$", where)
            if m:
                group, obj = m.group(1), (m.group(2) if m.lastindex == 2 else "") or "(the item)"
            elif where.startswith(("s3://", "az://", "gs://", "https://")):
                group, obj = "object store", where
            elif any(where == e.get("source") for e in evidence):
                group = next(e["id"] for e in evidence if where == e.get("source"))
                obj = "(the item)"
            else:
                group, obj = "host and other", where or "(no evidence named)"
            groups.setdefault(group, {}).setdefault(obj, []).append(f)
    order = sorted(groups, key=lambda g: (g not in items, g == "host and other", g))
    out = []
    for g in order:
        item = items.get(g)
        title = f"{g} — {item['kind']} {item['source']}" if item else g
        objects = [{"object": o, "findings": fs} for o, fs in groups[g].items()]
        counts = Counter(str(f.get("severity")) for o in objects for f in o["findings"])
        out.append({"group": g, "title": title, "objects": objects, "counts": dict(counts)})
    return out


def _examined(case: Case, model: JsonObject) -> list[JsonObject]:
    """What was examined, what was not (and why), per step of the case's runs."""
    rows: list[JsonObject] = []
    for r in case.records():
        d = r.get("details", {})
        if r["action"] == "step.finished":
            rows.append({"step": d.get("step"), "action": d.get("action"),
                         "status": d.get("status"), "note": d.get("summary") or d.get("error")
                         or "", "findings": d.get("findings")})
        elif r["action"] == "step.skipped":
            rows.append({"step": d.get("step"), "action": d.get("action") or "",
                         "status": "skipped", "note": d.get("reason") or "",
                         "findings": 0})
    guarantees = model.get("kernel_guarantees") or []
    if guarantees:
        enforced = sum(1 for g in guarantees if g.get("enforced"))
        rows.append({"step": "kernel", "action": "safety.kernel", "status": "enforced"
                     if enforced == len(guarantees) else "partly enforced",
                     "note": f"{enforced} of {len(guarantees)} guarantees enforced by the kernel",
                     "findings": 0})
    return rows


def _multirank(rank: JsonObject | None) -> JsonObject | None:
    """The family steps of the latest rank: per step its verdict and bad ranks, the pointer
    change the resume needs (the kit never writes it)."""
    if not rank or not rank.get("family"):
        return None
    steps = [{"path": c.get("path"), "verdict": c.get("verdict"), "step": c.get("step"),
              "bad_ranks": c.get("bad_ranks") or [], "bad_ranks_total": c.get("bad_ranks_total")
              or len(c.get("bad_ranks") or [])}
             for c in rank.get("checkpoints", []) if c.get("family")]
    return {"family": rank["family"], "resume_from": rank.get("resume_from"),
            "pointer_fix": rank.get("pointer_fix"), "steps": steps}


def _training_state(outs: list[TrainStateOutput]) -> JsonObject | None:
    """The latest training-state analysis: its checkpoints, findings, and the tensors worth
    a look (frozen, or the largest relative updates)."""
    if not outs:
        return None
    out = outs[-1]
    rows = []
    for t in out.tensors:
        rels = [i.get("rel_l2") for i in t.get("intervals", []) if i.get("rel_l2") is not None]
        rows.append({"name": t["name"], "frozen": t.get("frozen", False),
                     "max_rel_l2": max(rels) if rels else None,
                     "sign_agreement": t.get("sign_agreement", [])})
    flagged = {n for f in out.findings for n in f.get("tensors", [])}
    rows.sort(key=lambda r: (r["name"] not in flagged, not r["frozen"],
                             -(r["max_rel_l2"] or 0.0)))
    return {"checkpoints": out.checkpoints, "findings": out.findings, "answer": out.answer,
            "tensors": rows[:20], "tensors_total": len(rows),
            "scalars": dict(sorted(out.scalars.items())[:12])}


def _dataset_content(outs: list[DatasetCompareOutput]) -> JsonObject | None:
    """The latest dataset comparison: each flag with its test and effect size, and the spot
    checks side by side (marked values are what drove the flag)."""
    if not outs:
        return None
    out = outs[-1]
    spots = []
    for spot in out.spot_checks:
        if spot.get("error"):
            spots.append({"shard": spot["shard"], "error": spot["error"], "fields": [],
                          "flagged": None, "reference": None})
            continue
        flagged = spot.get("flagged") or {}
        reference = spot.get("reference") or {}
        fields = sorted({k for r in flagged.get("records", []) + reference.get("records", [])
                         for k in r.get("values", {})})[:8]
        spots.append({"shard": spot["shard"], "seed": spot.get("seed"), "k": spot.get("k"),
                      "method": spot.get("method"), "fields": fields, "error": None,
                      "flagged": _sample(flagged), "reference": _sample(reference)
                      if reference else None})
    return {"answer": out.answer, "mode": out.compare.get("mode"),
            "tests_run": out.compare.get("tests_run"),
            "per_test_level": out.compare.get("per_test_level"),
            "flagged": out.compare.get("flagged", []), "spot_checks": spots}


def _sample(sample: JsonObject) -> JsonObject:
    return {"shard": sample.get("shard"), "indices": sample.get("indices", []),
            "records": [{"index": r.get("index"), "values": r.get("values", {}),
                         "marked": r.get("marked", {})} for r in sample.get("records", [])]}


def to_json(model: JsonObject) -> str:
    return json.dumps(model, indent=2, sort_keys=True, default=str)
