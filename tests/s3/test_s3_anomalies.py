"""Listing anomalies (pure): histories that moto cannot produce faithfully (Suspended-versioning
null versions, inconsistent IsLatest across pages) are built as listing entries here."""

from __future__ import annotations

from ckptrescue.stores.s3.objects import VersionEntry
from ckptrescue.stores.s3.versions import find_anomalies


def v(version_id, when, *, latest=False, marker=False):
    return VersionEntry(key="k", version_id=version_id, is_latest=latest, delete_marker=marker,
                        last_modified=when, size=None if marker else 10)


def kinds(entries):
    return sorted(a.kind for a in find_anomalies(entries))


def test_clean_history_has_no_anomalies():
    assert kinds([v("b", "2026-01-02T00:00:00Z", latest=True), v("a", "2026-01-01T00:00:00Z")]) == []


def test_delete_marker_on_top_and_only_markers():
    assert kinds([v("m", "2026-01-03T00:00:00Z", latest=True, marker=True),
                  v("a", "2026-01-01T00:00:00Z")]) == ["delete-marker-on-top"]
    assert "only-delete-markers" in kinds([v("m", "2026-01-03T00:00:00Z", latest=True,
                                             marker=True)])


def test_null_version_mid_history_and_null_marker():
    found = kinds([v("c", "2026-01-03T00:00:00Z", latest=True), v("null", "2026-01-02T00:00:00Z"),
                   v("a", "2026-01-01T00:00:00Z")])
    assert found == ["null-version-mid-history"]
    assert kinds([v("null", "2026-01-03T00:00:00Z", latest=True, marker=True),
                  v("a", "2026-01-01T00:00:00Z")]) == ["delete-marker-on-top",
                                                      "null-delete-marker"]
    # A null version at the bottom (written before versioning was enabled) is normal.
    assert kinds([v("b", "2026-01-02T00:00:00Z", latest=True), v("null", "2026-01-01T00:00:00Z")]
                 ) == []


def test_latest_count_and_equal_timestamps():
    assert kinds([v("b", "2026-01-02T00:00:00Z", latest=True),
                  v("a", "2026-01-01T00:00:00Z", latest=True)]) == ["latest-count"]
    assert kinds([v("b", "2026-01-02T00:00:00Z"), v("a", "2026-01-01T00:00:00Z")]) == [
        "latest-count"]
    found = find_anomalies([v("b", "2026-01-02T00:00:00Z", latest=True),
                            v("a", "2026-01-02T00:00:00Z")])
    assert [a.kind for a in found] == ["equal-timestamps"]
    assert found[0].version_ids == ["b", "a"]
