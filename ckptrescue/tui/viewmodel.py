"""Pure view helpers for the TUI: text formats, the findings tree layout, the bad-sector map.

Everything here takes data the engine or the case already produced (events, the report model of
:func:`ckptrescue.report.model.build`) and arranges it for display. Nothing is computed about the
evidence itself. No Textual import, so it is tested directly.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import PurePath

from ckptrescue.model import JsonObject

VERDICT_ICON = {
    "intact": "✓", "suspect": "?", "damaged": "✗", "incomplete": "✗", "truncated": "✗",
    "unreadable": "✗", "unsafe": "☠",
}
_SHA256 = re.compile(r"[0-9a-f]{64}")
STATUS_ICON = {
    "pending": "·", "running": "▶", "ok": "✓", "findings": "!", "failed": "✗",
    "refused": "⊘", "stopped": "■", "skipped": "-", "cancelled": "■", "resumed": "↺",
}


def human_bytes(n: float | None, unit: str = "B") -> str:
    if n is None:
        return "?"
    if unit != "B":
        return f"{n:,.0f} {unit}"
    value = float(n)
    for suffix in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or suffix == "TiB":
            return f"{value:.0f} B" if suffix == "B" else f"{value:.1f} {suffix}"
        value /= 1024
    return f"{n} B"


def human_duration(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    s = max(0, round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def progress_text(done: float, total: float | None, unit: str, rate: float | None,
                  eta_s: float | None, label: str = "") -> str:
    """``imaging 12.0 MiB / 64.0 MiB  4.0 MiB/s  ETA 00:13`` from a StepProgress's fields."""
    parts = [label] if label else []
    parts.append(human_bytes(done, unit) + (f" / {human_bytes(total, unit)}" if total else ""))
    if rate:
        parts.append(f"{human_bytes(rate, unit)}/s")
    if eta_s is not None:
        parts.append(f"ETA {human_duration(eta_s)}")
    return "  ".join(parts)


class RateMeter:
    """Rate and ETA of one step's progress, for display.

    Uses the rate/ETA the event carries when the action reports them; otherwise derives them
    from successive ``done`` values over time (exponentially smoothed), so a progress bar shows a
    rate and an ETA for every step that reports done/total.
    """

    def __init__(self, smoothing: float = 0.3) -> None:
        self.smoothing = smoothing
        self._last: tuple[float, float] | None = None  # (time, done)
        self.rate: float | None = None

    def update(self, now: float, done: float, total: float | None,
               rate: float | None = None, eta_s: float | None = None
               ) -> tuple[float | None, float | None]:
        if rate is None and self._last is not None:
            t0, d0 = self._last
            if now > t0 and done >= d0:
                seen = (done - d0) / (now - t0)
                self.rate = seen if self.rate is None else \
                    self.smoothing * seen + (1 - self.smoothing) * self.rate
        elif rate is not None:
            self.rate = rate
        if self._last is None or now > self._last[0]:
            self._last = (now, done)
        if eta_s is None and total and self.rate:
            eta_s = max(0.0, (total - done) / self.rate)
        return self.rate, eta_s


# ---- the findings tree ------------------------------------------------------------------------

@dataclass
class EvidenceGroup:
    """One top-level node: an evidence item (or a probed path) and the checkpoints under it."""

    label: str
    detail: JsonObject = field(default_factory=dict)
    checkpoints: list[JsonObject] = field(default_factory=list)


def _under(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/") or root == "/"


def group_checkpoints(model: JsonObject, mounts: list[JsonObject],
                      probed_roots: list[str]) -> list[EvidenceGroup]:
    """Group the report model's checkpoints by the evidence they were found in.

    Every evidence item of the case is a group (possibly without checkpoints).

    ``mounts`` are the mount steps' outputs (a read-only mount of an image maps the image's
    evidence item onto the mount point); ``probed_roots`` are the paths probe steps were given.
    The longest matching root wins; anything else lands in "other".
    """
    evidence = {os.path.realpath(e["source"]): e for e in model.get("evidence", [])
                if not str(e.get("source", "")).startswith("s3://")}
    groups: dict[str, EvidenceGroup] = {}
    roots: list[tuple[str, str]] = []  # (prefix, group key)

    def group(key: str, label: str, detail: JsonObject) -> None:
        if key not in groups:
            groups[key] = EvidenceGroup(label=label, detail=detail)

    for mount in mounts:
        target = str(mount.get("target") or mount.get("backing_file") or "")
        where = str(mount.get("mountpoint") or "")
        if not where:
            continue
        item = evidence.get(os.path.realpath(target)) if target else None
        if item is not None:
            key = item["id"]
            group(key, f"{item['id']} {item['kind']} {item['source']}", item)
        else:
            key = f"mount:{where}"
            group(key, f"{target or where} (mounted read-only)", mount)
        roots.append((where, key))
    for item in model.get("evidence", []):
        group(item["id"], f"{item['id']} {item['kind']} {item['source']}", item)
    for real, item in evidence.items():
        roots.append((real, item["id"]))
        if item["source"] != real:
            roots.append((item["source"], item["id"]))
    probes: list[tuple[str, str]] = []
    for root in probed_roots:
        key = f"probe:{root}"
        probes.append((root, key))
        groups.setdefault(key, EvidenceGroup(label=f"probed {root}", detail={"path": root}))
    # evidence (and mounts of it) first; a probed path only when no evidence holds the file
    roots.sort(key=lambda r: -len(r[0]))
    probes.sort(key=lambda r: -len(r[0]))
    for ckpt in model.get("checkpoints", []):
        path = str(ckpt.get("path", ""))
        prov = ckpt.get("provenance") or {}
        if prov.get("evidence_id") in groups:  # the report model traced it to its evidence
            groups[prov["evidence_id"]].checkpoints.append(
                {**ckpt, "path": prov.get("inner_path") or path})
            continue
        key = next((k for prefix, k in [*roots, *probes] if _under(path, prefix)), "other")
        if key == "other":
            group("other", "other checkpoints", {})
        groups[key].checkpoints.append(ckpt)
    # every evidence item is shown (an image with nothing probed yet says so); probed paths
    # only when they hold checkpoints
    return [g for g in groups.values() if g.checkpoints or "id" in g.detail]


def checkpoint_label(ckpt: JsonObject, root: str | None = None) -> str:
    verdict = str(ckpt.get("verdict"))
    path = str(ckpt.get("path", ""))
    name = path
    if root and _under(path, root) and path != root:
        name = path[len(root.rstrip("/")) + 1:]
    elif root is None:
        name = PurePath(path).name
    return f"{VERDICT_ICON.get(verdict, '?')} [{verdict}] {name}"


def tensor_rows(ckpt: JsonObject) -> list[JsonObject]:
    """Tensors with a verdict other than intact (damaged, suspect, missing) and their reasons."""
    return list(ckpt.get("rows", []))


def finding_lines(finding: JsonObject) -> list[str]:
    """A finding (JSON shape) as detail lines: title, where, tensors, details, artifacts."""
    lines = [f"{finding.get('code')} [{finding.get('severity')}] {finding.get('title')}"]
    if finding.get("evidence"):
        lines.append(f"  evidence: {finding['evidence']}")
    if finding.get("offset") is not None:
        length = finding.get("length")
        lines.append(f"  at offset {finding['offset']}" + (f", {length} bytes" if length else ""))
    if finding.get("tensors"):
        lines.append(f"  tensors: {', '.join(finding['tensors'])}")
    for key, value in sorted((finding.get("details") or {}).items()):
        if key.endswith("sha256") and isinstance(value, str) and _SHA256.fullmatch(value):
            lines.append(f"  artifact ({key}): CASE/artifacts/{value}")
            continue
        text = value if isinstance(value, str) else repr(value)
        if len(text) > 200:
            text = text[:197] + "..."
        lines.append(f"  {key}: {text}")
    return lines


# ---- the bad-sector map -----------------------------------------------------------------------

def sector_map_lines(bsm: JsonObject | None, width: int = 60) -> list[str]:
    """A text rendering of the report model's ``bad_sector_map``: a bar, then each bad range
    with the files and tensors it hit (from the locate step)."""
    if not bsm:
        return ["no imaging step in this case: no bad-sector map"]
    size = int(bsm.get("size") or 0)
    ranges = bsm.get("ranges") or []
    cells = ["▒"] * width
    for r in ranges:
        first = min(width - 1, int(r["start"] * width // max(size, 1)))
        last = min(width - 1, int(max(r["end"] - 1, r["start"]) * width // max(size, 1)))
        for i in range(first, last + 1):
            cells[i] = "█"
    lines = [f"image {bsm.get('image') or '?'}",
             f"{human_bytes(size)}, rescued {human_bytes(bsm.get('rescued_bytes'))}, "
             f"{len(ranges)} unreadable range(s)",
             "[" + "".join(cells) + "]",
             "0" + human_bytes(size).rjust(width + 1)]
    for i, r in enumerate(ranges, 1):
        lines.append(f"#{i} [{r['start']}, {r['end']}) {human_bytes(r['end'] - r['start'])}")
        for label in r.get("labels") or ["(not located: run the locate step)"]:
            lines.append(f"   -> {label}")
    return lines


# What a case is about decides how its tree speaks: a dataset case has no checkpoints to probe.
DATASET_ACTIONS = frozenset({"manifest.audit", "manifest.build", "manifest.update",
                             "dataset.verify", "dataset.compare", "dataset.profile",
                             "dataset.quarantine", "recover", "watch.pass", "gate",
                             "store.verify", "store.history", "store.preserve", "store.restore"})
CHECKPOINT_ACTIONS = frozenset({"probe", "rank", "salvage", "locate", "trainstate"})


@dataclass(frozen=True)
class TreeWords:
    """The evidence branch's wording for one case."""

    root: str            # the branch's label
    empty: str | None    # the leaf when the case has no evidence group (None: no leaf)
    no_checkpoints: str | None  # the leaf under an evidence item without checkpoints


def tree_words(model: JsonObject) -> TreeWords:
    """``Evidence -> checkpoints -> tensors`` only when the case is about checkpoints; a dataset
    case's evidence is just "Evidence", its steps listed under "Dataset steps"."""
    actions = {str(e.get("action")) for e in model.get("examined") or []}
    about_checkpoints = bool(model.get("checkpoints")) or bool(actions & CHECKPOINT_ACTIONS)
    if about_checkpoints:
        return TreeWords("Evidence -> checkpoints -> tensors", "(no checkpoint probed yet)",
                         "(no checkpoint probed in it)")
    if actions & DATASET_ACTIONS:
        return TreeWords("Evidence", "(no evidence item recorded)", None)
    if actions - {"safety.kernel"}:
        return TreeWords("Evidence", "(no evidence item recorded)", None)
    return TreeWords("Evidence", "(nothing examined yet: F1 starts a guided run)", None)


def dataset_steps(model: JsonObject) -> list[JsonObject]:
    """The dataset steps the case ran (what was examined), in order, for the tree."""
    return [e for e in model.get("examined") or [] if e.get("action") in DATASET_ACTIONS]


def step_label(row: JsonObject) -> str:
    icon = STATUS_ICON.get(str(row.get("status")), "·")
    note = f": {row['note']}" if row.get("note") else ""
    return f"{icon} {row.get('step')} [{row.get('action')}] {row.get('status')}{note}"
