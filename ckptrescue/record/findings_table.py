"""Many findings of one kind, recorded as one: a step that finds N tensors damaged for the same
reason records one ``finding`` with the count and the byte ranges, and names a per-tensor table
(a write-once artifact, JSON lines, one finding a line) that the report and the TUI page through.
Nothing is lost: every tensor stays listed, just not as its own log record.

Findings are grouped by (code, severity, evidence, source); a group of more than
:data:`AGGREGATE_OVER` becomes one finding where its first member was, the others stay as they
are. :func:`plan` is pure; :func:`write` records into a case; :func:`rows` and :func:`expand` read
a table back.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from ckptrescue.model import Finding, JsonObject
from ckptrescue.record.regular import open_regular

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

AGGREGATE_OVER = 20
SHOWN_TENSORS = 20
SHOWN_RANGES = 64
TABLE_KIND = "findings.table"


@dataclass
class Group:
    """Findings of one kind, to record as one."""

    members: list[Finding]

    def summary(self, table: str) -> Finding:
        """The one finding recorded for the group; ``table``: the SHA-256 of its table."""
        first = self.members[0]
        n = len(self.members)
        tensors = list(dict.fromkeys(t for f in self.members for t in f.tensors))
        spans = sorted((f.offset, f.offset + (f.length or 0)) for f in self.members
                       if f.offset is not None)
        ranges = merge_ranges(spans)
        what = f"{len(tensors)} tensors" if tensors else f"{n} findings"
        reason = _reason(first)
        details: JsonObject = {
            "aggregated": n, "tensors_total": len(tensors),
            "ranges": [list(r) for r in ranges[:SHOWN_RANGES]], "ranges_total": len(ranges),
            "table": table, "table_format": "jsonl",
        }
        offset = ranges[0][0] if ranges else None
        length = ranges[-1][1] - ranges[0][0] if ranges else None
        return Finding(
            code=first.code, severity=first.severity,
            title=f"{what} ({first.code}), e.g. {_clip(reason)}; each one in the findings table",
            evidence=first.evidence, evidence_sha256=first.evidence_sha256, offset=offset,
            length=length, source=first.source, tensors=tuple(tensors[:SHOWN_TENSORS]),
            details=details)


def merge_ranges(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted byte ranges with touching or overlapping ones merged."""
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _reason(finding: Finding) -> str:
    title = finding.title
    for name in finding.tensors[:1]:
        if title.startswith(f"{name}: "):
            return f"{name}: {title[len(name) + 2:]}"
    return title


def _clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def plan(findings: list[Finding]) -> list[Finding | Group]:
    """The findings in order, groups of more than :data:`AGGREGATE_OVER` of one kind folded
    into a :class:`Group` at the place of their first member."""
    keys = [(f.code, str(f.severity), f.evidence, f.source) for f in findings]
    sizes: dict[tuple[Any, ...], int] = {}
    for key in keys:
        sizes[key] = sizes.get(key, 0) + 1
    groups: dict[tuple[Any, ...], Group] = {}
    out: list[Finding | Group] = []
    for key, finding in zip(keys, findings, strict=True):
        if sizes[key] <= AGGREGATE_OVER:
            out.append(finding)
            continue
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group([])
            out.append(group)
        group.members.append(finding)
    return out


def write(case: Case, findings: list[Finding], *, name: str = "findings") -> list[Finding]:
    """Record ``findings`` in ``case``: each one, or for a large group its table (an artifact)
    and one finding naming it. Returns the findings as recorded."""
    written: list[Finding] = []
    if not findings:
        return written
    with case.writer():
        for item in plan(findings):
            if isinstance(item, Finding):
                case.add_finding(item)
                written.append(item)
                continue
            first = item.members[0]
            with case.artifact_writer(name=f"{name}.{first.code}.jsonl", kind=TABLE_KIND) as out:
                for member in item.members:
                    out.write(json.dumps(member.to_json(), sort_keys=True,
                                         separators=(",", ":")).encode() + b"\n")
            assert out.sha256 is not None
            summary = item.summary(out.sha256)
            case.log("finding", {"finding": summary.to_json()}, artifacts=[out.sha256])
            written.append(summary)
    return written


def table_of(finding: Finding | dict[str, Any]) -> str | None:
    """The SHA-256 of the table an aggregated finding names (None for a single finding)."""
    details = finding.details if isinstance(finding, Finding) else finding.get("details") or {}
    table = details.get("table") if isinstance(details, dict) else None
    return table if isinstance(table, str) and details.get("aggregated") else None


def open_table(case: Case, table: str) -> IO[bytes]:
    """The table artifact, open at its start, after checking that it is still what the case
    stored (a regular file of the case with its SHA-256); else ``ArtifactChangedError``: a
    reader never pages through an edited table as the case's."""
    from ckptrescue.record.case import ArtifactChangedError

    path = case.artifact_path(table)
    try:
        fh = os.fdopen(open_regular(path), "rb")
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EINVAL):
            raise ArtifactChangedError(f"{path}: not the findings table the case stored (a "
                                       "symlink or a special file)") from exc
        raise
    digest = hashlib.sha256()
    while block := fh.read(1 << 20):
        digest.update(block)
    if digest.hexdigest() != table:
        fh.close()
        raise ArtifactChangedError(f"{path}: the findings table was changed after it was "
                                   "stored; `case verify` names it")
    fh.seek(0)
    return fh


def rows(case: Case, finding: Finding | dict[str, Any], *, start: int = 0,
         limit: int | None = None) -> Iterator[Finding]:
    """Page through an aggregated finding's table (streamed; ``start``/``limit`` rows)."""
    table = table_of(finding)
    if table is None:
        return
    with open_table(case, table) as fh:
        for i, line in enumerate(fh):
            if i < start:
                continue
            if limit is not None and i >= start + limit:
                return
            yield Finding.from_json(json.loads(line))


def expand(case: Case, findings: Iterable[Finding]) -> Iterator[Finding]:
    """Every finding, aggregated ones replaced by the rows of their tables."""
    for finding in findings:
        if table_of(finding) is None:
            yield finding
        else:
            yield from rows(case, finding)
