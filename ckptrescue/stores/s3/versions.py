"""What an S3 version listing says that no other store's does (pure): the anomalies of one key's
history — delete markers, null versions written while versioning was suspended, equal
timestamps, listing and HEAD disagreeing, mixed checksum forms — and a version's stored
full-object SHA-256 (a known-good version judged without downloading it). The S3 backend's
:meth:`~ckptrescue.stores.base.Store.version_anomalies` and
:meth:`~ckptrescue.stores.base.Store.stored_sha256`."""

from __future__ import annotations

import base64
from collections import Counter

from ckptrescue.stores.outputs import VersionAnomaly
from ckptrescue.stores.s3.objects import VersionEntry


def find_anomalies(entries: list[VersionEntry]) -> list[VersionAnomaly]:
    """Listing anomalies of one key's history (newest first); pure."""
    out: list[VersionAnomaly] = []
    if not entries:
        return out
    latest = [e.version_id for e in entries if e.is_latest]
    if len(latest) != 1:
        out.append(VersionAnomaly("latest-count",
                                  f"{len(latest)} entries are marked latest (expected exactly one); "
                                  "the listing may have changed while it was read: list again",
                                  latest))
    if all(e.delete_marker for e in entries):
        out.append(VersionAnomaly("only-delete-markers",
                                  "only delete markers remain: there is no version to recover",
                                  [e.version_id for e in entries]))
    elif entries[0].delete_marker:
        out.append(VersionAnomaly("delete-marker-on-top",
                                  "the current entry is a delete marker: GET returns 404, older "
                                  "versions are still recoverable", [entries[0].version_id]))
    for index, entry in enumerate(entries):
        if entry.version_id == "null" and entry.delete_marker:
            out.append(VersionAnomaly("null-delete-marker",
                                      "a null delete marker: written while versioning was suspended",
                                      ["null"]))
        elif entry.version_id == "null" and index != len(entries) - 1:
            out.append(VersionAnomaly("null-version-mid-history",
                                      "a null version is not the oldest entry: a write while "
                                      "versioning was suspended replaced the previous null version "
                                      "for good", ["null"]))
    times = Counter(e.last_modified for e in entries if e.last_modified)
    for when, count in times.items():
        if count > 1:
            out.append(VersionAnomaly("equal-timestamps",
                                      f"{count} entries share LastModified {when} (1-second "
                                      "resolution): their order comes from the listing only",
                                      [e.version_id for e in entries if e.last_modified == when]))
    out += _head_anomalies(entries)
    for entry in entries:
        if entry.error:
            out.append(VersionAnomaly("unreadable-version", f"version {entry.version_id}: {entry.error}",
                                      [entry.version_id]))
    return out


def _head_anomalies(entries: list[VersionEntry]) -> list[VersionAnomaly]:
    """What the versions' HEADs say against the listing and against each other."""
    out: list[VersionAnomaly] = []
    forms = set()
    for entry in entries:
        if entry.head is None:
            continue
        best = entry.head.checksum_json()
        if best:
            kind = best.get("type") or ("COMPOSITE" if entry.head.part_count else "FULL_OBJECT")
            forms.add(f"{best['algorithm']}/{kind}")
        else:
            forms.add("none")
        if entry.size is not None and entry.head.size is not None and entry.size != (
                entry.head.size):
            out.append(VersionAnomaly("listing-head-disagree",
                                      f"version {entry.version_id}: listing says {entry.size} bytes, "
                                      f"HEAD says {entry.head.size}", [entry.version_id]))
        elif entry.etag and entry.head.etag and entry.etag.strip('"') != entry.head.etag.strip(
                '"'):
            out.append(VersionAnomaly("listing-head-disagree",
                                      f"version {entry.version_id}: listing and HEAD ETags differ",
                                      [entry.version_id]))
    if len(forms) > 1:
        out.append(VersionAnomaly("mixed-checksum-forms",
                                  "versions carry different checksum forms (" + ", ".join(sorted(forms))
                                  + "): compare them by content, not by checksum strings"))
    return out


def stored_sha256_hex(entry: VersionEntry) -> str | None:
    """The version's full-object SHA-256 as hex, if it carries one (never a composite)."""
    head = entry.head
    if head is None:
        return None
    value = head.checksums.get("SHA256")
    if value is None or value.parts or head.part_count:
        return None
    if (value.checksum_type or head.checksum_type) == "COMPOSITE":
        return None
    try:
        return base64.b64decode(value.value).hex()
    except ValueError:
        return None
