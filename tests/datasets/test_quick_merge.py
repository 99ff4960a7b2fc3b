"""The quick audit as a streaming sorted merge (no state database) gives exactly the rows, counts,
notes and findings of the audit through the state database, over hostile trees (#17)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import stat
from pathlib import Path
from typing import Any

import pytest

from ckptrescue.datasets import audit as audit_module
from ckptrescue.datasets import quick_merge, sha256sum_format
from ckptrescue.datasets.audit import AuditResult, audit
from ckptrescue.datasets.audit_state import default_path
from ckptrescue.datasets.manifest import build_manifest, sidecar_path
from ckptrescue.datasets.quick_merge import NotSorted, expected_rows
from ckptrescue.datasets.walk import Skipped, scan, sorted_scan
from ckptrescue.errors import UsageError
from fixtures.det import det_bytes

# names sorting around '/', '.', '-', ' ' and each other; odd bytes; deep nesting
NAMES = [
    b"a.txt", b"a-b", b"a b", b"a0", b"a/b.c", b"a/b/c", b"a/b-c", b"a/b0", b"a.d/x",
    b"a-/y", b"a /z", b"ab", b"-rf", b"dir/new\nline.bin", b"bad\xff\xfe.bin",
    b"back\\slash\\n.bin", b'quote".bin', b"caf\xc3\xa9.bin", b"tab\there\r.bin",
    b"\xe2\x80\xaertl.txt", b"z/" + b"/".join(b"d%02d" % i for i in range(40)) + b"/deep.bin",
    b"plain/f1.bin", b"plain/f2.bin", b"plain/f10.bin", b"plain/sub/f.bin",
    b"gone/only.bin", b"grow.bin", b"touch.bin",
]


def _p(root: Path, rel: bytes) -> bytes:
    return os.path.join(os.fsencode(root), rel)  # noqa: PTH118


def _write(root: Path, rel: bytes, data: bytes) -> None:
    path = _p(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)  # noqa: PTH103, PTH120
    with open(path, "wb") as fh:
        fh.write(data)


def evidence_digest(root: Path) -> str:
    """Every entry under root (names, kinds, sizes, mtimes, link targets, contents)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(os.fsencode(root)):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)  # noqa: PTH118
            st = os.lstat(path)
            h.update(path + b"\0" + f"{st.st_mode}:{st.st_size}:{st.st_mtime_ns}".encode())
            if stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


def _hostile(tmp_path: Path, *, manifest_inside: bool = False) -> tuple[Path, Path]:
    """A hostile tree, its manifest (built by the kit), then damage of every kind."""
    root = tmp_path / "ds"
    root.mkdir()
    for i, rel in enumerate(NAMES):
        _write(root, rel, det_bytes(16 + 7 * i, "quick-merge", i))
    os.symlink("a.txt", _p(root, b"link-in"))  # followed: a regular file inside DIR
    os.symlink("plain", _p(root, b"link-dir"))  # a directory: not followed
    os.symlink("/etc/hostname", _p(root, b"link-out"))  # leads out: not followed
    os.symlink("nowhere", _p(root, b"link-dangling"))
    os.symlink(os.fsdecode(_p(root, b"plain/f1.bin")), _p(root, b"plain/abs-link"))
    os.mkfifo(_p(root, b"fifo"))
    os.mkfifo(_p(root, b"plain/fifo2"))
    manifest = tmp_path / "m.sha256"
    build_manifest(root, manifest, jobs=1)
    if manifest_inside:  # moved in after the build (the kit never writes into DIR)
        sidecar_path(manifest).rename(sidecar_path(root / manifest.name))
        manifest = manifest.rename(root / manifest.name)
    # damage: missing (a file, a whole directory), new, size changed, mtime changed only
    os.unlink(_p(root, b"a/b.c"))
    os.unlink(_p(root, b"gone/only.bin"))
    os.rmdir(_p(root, b"gone"))
    _write(root, b"a/new.bin", det_bytes(9, "new"))
    _write(root, b"new dir/x\ny", det_bytes(5, "new2"))
    _write(root, b"new\xfe.bin", det_bytes(5, "new3"))
    with open(_p(root, b"grow.bin"), "ab") as fh:
        fh.write(b"+")
    st = os.stat(_p(root, b"touch.bin"))
    os.utime(_p(root, b"touch.bin"), ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    return root, manifest


def _add_entries(manifest: Path, names: list[bytes]) -> None:
    """Hand-added manifest lines (no sidecar line), the text kept sorted by name."""
    lines = manifest.read_bytes().splitlines(keepends=True)
    lines += [hashlib.sha256(n).hexdigest().encode() + b"  " + n + b"\n" for n in names]
    lines.sort(key=lambda line: sha256sum_format.parse_line(line[:-1], 1).name)  # type: ignore[union-attr]
    manifest.write_bytes(b"".join(lines))


def _view(result: AuditResult) -> dict[str, Any]:
    """Everything a caller sees, but the state database's path."""
    out = result.to_json()
    out.pop("state")
    records = [(e.action, {k: v for k, v in e.details.items() if k != "state"})
               for e in result.audit]
    findings = [(f.code, f.severity, f.title, f.evidence, f.evidence_sha256, f.offset,
                 f.details) for f in result.findings()]
    return {"json": json.dumps(out, sort_keys=True), "notes": result.notes,
            "records": records, "findings": findings,
            "rows": [(r.rel, r.status, r.expected, r.actual, r.reason) for r in result.files]}


def _both(root: Path, manifest: Path, tmp_path: Path) -> tuple[AuditResult, AuditResult]:
    """The sorted merge, then the state-database path (``state`` given), same tree."""
    before = evidence_digest(root)
    merged = audit(root, manifest, quick=True)
    stored = audit(root, manifest, quick=True, state=tmp_path / "forced.sqlite")
    assert evidence_digest(root) == before
    assert merged.state is None and merged.resumed == 0
    assert stored.state == str(tmp_path / "forced.sqlite")
    return merged, stored


def test_the_walk_in_name_order_is_the_walk_sorted(tmp_path: Path) -> None:
    root, manifest = _hostile(tmp_path)
    exclude = [manifest, sidecar_path(manifest)]
    ordered = list(sorted_scan(root, exclude=exclude))
    files = [i for i in ordered if isinstance(i, tuple)]
    plain = [i for i in scan(root, exclude=exclude) if isinstance(i, tuple)]
    assert [f[0] for f in files] == sorted(f[0] for f in plain)  # plain bytewise order
    assert sorted(files) == sorted(plain)
    skips = {s.rel: s.reason for s in ordered if isinstance(s, Skipped)}
    assert skips == {s.rel: s.reason for s in scan(root, exclude=exclude)
                     if isinstance(s, Skipped)}
    assert skips[b"fifo"] == "a FIFO, not hashed"
    assert skips[b"link-out"] == "symlink leading out of the directory, not followed"


def test_quick_merge_equals_the_state_path_on_a_hostile_tree(tmp_path: Path) -> None:
    root, manifest = _hostile(tmp_path)
    _add_entries(manifest, [b"../escaped.bin", b"/etc/passwd", b"a//b", b"plain/./f1.bin"])
    merged, stored = _both(root, manifest, tmp_path)
    assert _view(merged) == _view(stored)
    rows = {r.rel: (r.status, r.reason) for r in merged.files}
    assert rows[b"a/b.c"] == ("missing", "")
    assert rows[b"gone/only.bin"] == ("missing", "")
    assert rows[b"../escaped.bin"] == ("missing", "the name leads outside DIR; never opened")
    assert rows[b"a//b"] == ("missing", "the name leads outside DIR; never opened")
    assert rows[b"grow.bin"] == ("changed", "size differs")
    assert rows[b"touch.bin"] == ("changed", "same size, mtime differs")
    assert rows[b"new dir/x\ny"] == ("new", "")
    assert rows[b"new\xfe.bin"] == ("new", "")
    assert rows[b"link-in"] == ("ok", "")
    assert rows[b"bad\xff\xfe.bin"] == ("ok", "")
    assert [r.rel for r in merged.files] == sorted(r.rel for r in merged.files)
    assert "fifo: skipped: a FIFO, not hashed" in merged.notes
    assert not default_path(manifest).exists()  # the merge writes no state


def test_the_manifest_inside_dir_is_excluded_and_needs_no_state(tmp_path: Path) -> None:
    root, manifest = _hostile(tmp_path, manifest_inside=True)
    merged, stored = _both(root, manifest, tmp_path)
    assert _view(merged) == _view(stored)
    assert b"m.sha256" not in {r.rel for r in merged.files}
    assert not default_path(manifest).exists()


def test_a_jsonl_manifest_and_a_disagreeing_or_torn_sidecar(tmp_path: Path) -> None:
    root, manifest = _hostile(tmp_path)
    side = sidecar_path(manifest)
    lines = side.read_bytes().splitlines(keepends=True)
    first = json.loads(lines[0])
    first["sha256"] = "0" * 64  # the sidecar disagrees with the text on this file's hash
    lines[0] = json.dumps(first).encode() + b"\n"
    lines.insert(3, b"not json at all\n")  # a bad line is passed over
    side.write_bytes(b"".join(lines) + b'{"path": "zzz-torn", "size": 1')
    merged, stored = _both(root, manifest, tmp_path)
    assert _view(merged) == _view(stored)
    assert {r.rel: r.expected for r in merged.files}[os.fsencode(first["path"])] == \
        "size=None mtime_ns=None"
    # the sidecar itself given as the manifest (a JSON-lines manifest)
    merged, stored = _both(root, side, tmp_path)
    assert _view(merged) == _view(stored)


def test_an_unsorted_manifest_falls_back_to_a_temporary_state(tmp_path: Path) -> None:
    root, manifest = _hostile(tmp_path)
    lines = manifest.read_bytes().splitlines(keepends=True)
    random.Random(5).shuffle(lines)
    manifest.write_bytes(b"".join(lines))
    with pytest.raises(NotSorted):
        list(expected_rows(manifest))
    merged, stored = _both(root, manifest, tmp_path)
    assert any("not sorted by name" in n and "temporary state database" in n
               for n in merged.notes)
    view, want = _view(merged), _view(stored)
    view["notes"] = [n for n in view["notes"] if "not sorted by name" not in n]
    assert view == want
    assert not default_path(manifest).exists()


def test_a_repeated_sidecar_name_falls_back(tmp_path: Path) -> None:
    root, manifest = _hostile(tmp_path)
    side = sidecar_path(manifest)
    lines = side.read_bytes().splitlines(keepends=True)
    side.write_bytes(b"".join(lines[:2] + lines[1:]))
    merged, stored = _both(root, manifest, tmp_path)
    assert any("not sorted by name" in n for n in merged.notes)
    assert merged.files == stored.files


def test_above_the_listing_limit_only_rows_not_ok_are_listed(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    root, manifest = _hostile(tmp_path)
    monkeypatch.setattr(audit_module, "LIST_ALL_MAX", 10)
    merged, stored = _both(root, manifest, tmp_path)
    assert _view(merged) == _view(stored)
    assert merged.files_omitted == merged.counts["ok"] > 0
    assert {r.status for r in merged.files} <= {"missing", "changed", "new"}


def test_ok_rows_spooled_to_disk_come_back_in_order(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    root, manifest = _hostile(tmp_path)
    monkeypatch.setattr(quick_merge, "SPOOL_MEMORY", 64)  # past 64 bytes: a temporary file
    merged, stored = _both(root, manifest, tmp_path)
    assert _view(merged) == _view(stored)
    assert merged.files_omitted == 0 and merged.counts["ok"] > 20


def test_restart_with_quick_and_no_state_is_a_note(tmp_path: Path) -> None:
    root, manifest = _hostile(tmp_path)
    result = audit(root, manifest, quick=True, restart=True)
    assert result.state is None
    assert any("--restart" in n and "nothing to restart" in n for n in result.notes)
    assert not default_path(manifest).exists()


def test_many_files_across_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Manifest blocks cut mid-file (small blocks), thousands of plain names."""
    root = tmp_path / "ds"
    for i in range(2500):
        _write(root, b"d%02d/f%04d.bin" % (i % 37, i), det_bytes(i % 13, "many", i))
    manifest = tmp_path / "many.sha256"
    build_manifest(root, manifest, jobs=2)
    os.unlink(_p(root, b"d05/f0005.bin"))
    _write(root, b"d05/f0005.binx", b"x")
    monkeypatch.setattr(quick_merge, "BLOCK", 777)
    merged, stored = _both(root, manifest, tmp_path)
    assert _view(merged) == _view(stored)
    assert merged.counts["ok"] == 2499 and merged.counts["missing"] == 1
    # a hand-added line mid-manifest: compared blocks up to it, parsed and joined after it
    _add_entries(manifest, [b"d20/f0500.bin-hand-added"])
    merged, stored = _both(root, manifest, tmp_path)
    assert _view(merged) == _view(stored)
    assert merged.counts["ok"] == 2499 and merged.counts["missing"] == 2


def test_a_bad_manifest_line_is_the_same_error_both_ways(tmp_path: Path) -> None:
    root, manifest = _hostile(tmp_path)
    lines = manifest.read_bytes().splitlines(keepends=True)
    lines.insert(len(lines) // 2, b"this is not a manifest line\n")
    manifest.write_bytes(b"".join(lines))
    messages = []
    for state in (None, tmp_path / "forced.sqlite"):
        with pytest.raises(UsageError, match="not a sha256sum manifest") as err:
            audit(root, manifest, quick=True, state=state)
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert f"line {len(lines) // 2 + 1}" in messages[0]


def test_a_clean_view_is_audited_through_its_links(tmp_path: Path) -> None:
    """``recover --clean-view`` makes absolute links into DIR and RECOVERY_DIR: audited as a
    tree they all lead out (every entry missing); with --follow-links-into both, all ok."""
    from cli_helpers import invoke

    from ckptrescue.datasets.recover import recover

    root = tmp_path / "ds"
    names = [b"a/one.bin", b"a/two.bin", b"odd name\n.bin", b"raw\xff.bin", b"b/c/deep.bin"]
    for i, rel in enumerate(names):
        _write(root, rel, det_bytes(300 + 11 * i, "view", i))
    manifest = tmp_path / "m.sha256"
    build_manifest(root, manifest, jobs=1)
    snaps = tmp_path / "snapshots"
    snap = snaps / "2024-05-01"
    for rel in names:
        with open(_p(root, rel), "rb") as fh:
            _write(snap, rel, fh.read())
    with open(_p(root, b"a/two.bin"), "r+b") as fh:  # damaged, then recovered from the snapshot
        fh.write(b"\x00\x01")
    before = evidence_digest(root)
    to, view = tmp_path / "recovered", tmp_path / "clean" / "view"
    result = recover(root, manifest=manifest, source=snaps, to=to, clean_view=view)
    assert result.clean_view_files == len(names)
    assert os.readlink(_p(view, b"a/two.bin")) == _p(to, b"a/two.bin")
    view_manifest = Path(result.clean_view_manifest or "")
    view_before = evidence_digest(view)
    for quick in (False, True):
        alone = audit(view, view_manifest, quick=quick, state=tmp_path / "v.sqlite")
        assert alone.counts["missing"] == len(names)
        assert sum("symlink leading out of the directory" in n for n in alone.notes) == len(names)
        followed = audit(view, view_manifest, quick=quick, follow_into=[root, to],
                         state=None if quick else tmp_path / "v.sqlite")
        assert followed.ok and followed.counts["ok"] == len(names), followed.files
        # only into the directories given: DIR alone leaves the recovered file's link out
        partial = audit(view, view_manifest, quick=quick, follow_into=[root],
                        state=tmp_path / "p.sqlite", restart=True)
        assert {r.rel: r.status for r in partial.files if r.status != "ok"} == {
            b"a/two.bin": "missing"}
    proc = invoke("manifest", "audit", str(view), str(view_manifest), "--follow-links-into",
                  str(root), "--follow-links-into", str(to), "--state",
                  str(tmp_path / "cli.sqlite"), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["counts"]["ok"] == len(names)
    assert evidence_digest(root) == before and evidence_digest(view) == view_before


def test_cli_quick_audit_keeps_no_state_even_with_the_manifest_inside_dir(tmp_path: Path
                                                                          ) -> None:
    from cli_helpers import invoke

    root = tmp_path / "ds"
    for i in range(30):
        _write(root, b"d%d/f%02d.bin" % (i % 4, i), det_bytes(40 + i, "cli", i))
    built = tmp_path / "m.sha256"
    build_manifest(root, built, jobs=1)
    sidecar_path(built).rename(sidecar_path(root / "m.sha256"))
    manifest = built.rename(root / "m.sha256")
    before = evidence_digest(root)
    proc = invoke("manifest", "audit", str(root), str(manifest), "--quick", "--restart", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["state"] is None and out["resumed"] == 0 and out["counts"]["ok"] == 30
    assert evidence_digest(root) == before  # no state file written beside the manifest in DIR
    refused = invoke("manifest", "audit", str(root), str(manifest), "--json")
    assert refused.returncode != 0 and "inside DIR" in refused.stderr + refused.stdout
