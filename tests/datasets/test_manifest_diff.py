"""``manifest diff OLD NEW``: two manifests written by GNU ``sha256sum`` (names escaped the way
coreutils escapes them, a name that is not UTF-8), compared without reading data; the manifest
of the changes verifies with ``sha256sum -c`` in the new tree; hostile inputs are findings or a
one-line error, never a traceback or a hang."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest
from cli_helpers import invoke

from ckptrescue.datasets.manifest_diff import diff_manifests
from ckptrescue.record.case import Case
from fixtures.det import det_bytes


def sha256sum_manifest(root: Path, out: Path) -> None:
    """The manifest as a responder makes it: coreutils ``sha256sum`` over every file, sorted."""
    names = sorted(p.relative_to(root).as_posix().encode("utf-8", "surrogateescape")
                   for p in root.rglob("*") if p.is_file())
    proc = subprocess.run(["sha256sum", "--", *[os.fsdecode(n) for n in names]], cwd=root,
                          capture_output=True, check=True)
    out.write_bytes(proc.stdout)


def write(root: Path, name: str | bytes, data: bytes) -> None:
    path = Path(os.fsdecode(root / os.fsdecode(name) if isinstance(name, bytes) else root / name))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@pytest.fixture
def two_versions(tmp_path: Path) -> tuple[Path, Path, Path]:
    """OLD and NEW manifests of one dataset tree, before and after a known set of changes."""
    root = tmp_path / "data"
    for i in range(6):
        write(root, f"shard-{i}.bin", det_bytes(300, "shard", i))
    write(root, "dup-a.bin", det_bytes(64, "dup"))  # two files with one content
    write(root, "dup-b.bin", det_bytes(64, "dup"))
    write(root, "odd\nname\\x.bin", det_bytes(40, "odd"))  # escaped by sha256sum
    write(root, b"latin-\xe9.bin", det_bytes(40, "latin"))  # not UTF-8
    old = tmp_path / "old.sha256"
    sha256sum_manifest(root, old)
    (root / "moved").mkdir()
    (root / "shard-0.bin").rename(root / "moved" / "shard-0.bin")
    write(root, "shard-1.bin", det_bytes(300, "shard", 1, "rewritten"))
    (root / "shard-2.bin").unlink()
    write(root, "shard-9.bin", det_bytes(300, "shard", 9))
    (root / "dup-a.bin").unlink()  # a copy of dup-b arrives under a third name
    write(root, "dup-c.bin", det_bytes(64, "dup"))
    os.rename(root / "odd\nname\\x.bin", root / "odd\nname\\y.bin")
    new = tmp_path / "new.sha256"
    sha256sum_manifest(root, new)
    return root, old, new


def test_changes_from_real_sha256sum_manifests(two_versions, tmp_path: Path) -> None:
    root, old, new = two_versions
    before = (old.read_bytes(), new.read_bytes())
    out = tmp_path / "changes.sha256"
    res = invoke("manifest", "diff", str(old), str(new), "-o", str(out), "--json")
    assert res.returncode == 1, res.stderr
    data = json.loads(res.stdout)
    assert data["counts"] == {"added": 1, "removed": 1, "changed": 1, "renamed": 3,
                              "unchanged": 5}
    by = {(c["status"], c.get("old_path"), c["path"]) for c in data["changes"]}
    assert ("renamed", "shard-0.bin", "moved/shard-0.bin") in by
    assert ("renamed", "dup-a.bin", "dup-c.bin") in by  # dup-b is unchanged, dup-a moved
    assert ("renamed", "odd\nname\\x.bin", "odd\nname\\y.bin") in by
    assert ("changed", None, "shard-1.bin") in by
    assert ("removed", None, "shard-2.bin") in by
    assert ("added", None, "shard-9.bin") in by
    # the manifest of the changes is NEW's new entries: coreutils verifies it in the new tree
    check = subprocess.run(["sha256sum", "-c", str(out)], cwd=root, capture_output=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(b": OK") == 5
    rows = [json.loads(line) for line in Path(str(out) + ".changes.jsonl").read_text()
            .splitlines()]
    assert len(rows) == 6 and {r["status"] for r in rows} == {"added", "removed", "changed",
                                                                "renamed"}
    assert (old.read_bytes(), new.read_bytes()) == before


def test_identical_manifests_agree_and_order_does_not_matter(two_versions,
                                                             tmp_path: Path) -> None:
    root, old, new = two_versions
    kit = tmp_path / "kit.sha256"
    built = invoke("manifest", "build", str(root), "-o", str(kit), "--no-progress")
    assert built.returncode == 0, built.stderr
    same = invoke("manifest", "diff", str(new), str(kit))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "manifests agree: 10 entries" in same.stdout
    shuffled = tmp_path / "shuffled.sha256"
    lines = old.read_bytes().splitlines(keepends=True)
    random.Random(7).shuffle(lines)
    shuffled.write_bytes(b"".join(lines))
    a = diff_manifests(old, new)
    b = diff_manifests(shuffled, new)
    assert a.counts == b.counts and [c.to_json() for c in a.changes] == \
        [c.to_json() for c in b.changes]


def test_torn_and_duplicate_lines_are_findings(two_versions, tmp_path: Path) -> None:
    _root, old, new = two_versions
    torn = tmp_path / "torn.sha256"
    data = new.read_bytes()
    torn.write_bytes(data + data.splitlines(keepends=True)[0][:40])  # a write cut short
    dup = next(line for line in data.splitlines(keepends=True) if line.endswith(b"shard-3.bin\n"))
    result = diff_manifests(old, torn)
    codes = {f.code for f in result.findings()}
    assert "MD005" in codes
    assert result.bad_line_counts["new"] == 1
    assert "1 line(s) not in sha256sum format were left out" in result.answer()
    conflict = tmp_path / "conflict.sha256"
    conflict.write_bytes(data + b"0" * 64 + dup[64:])
    result = diff_manifests(old, conflict)
    assert "MD006" in {f.code for f in result.findings()}
    name = dup[66:-1].decode()
    assert any(c.status == "changed" and c.rel.decode() == name for c in result.changes), \
        "the last line of a name listed twice is the one compared"


@pytest.mark.parametrize("kind", ["fifo", "loop", "dir", "missing", "foreign"])
def test_hostile_inputs_are_one_line_errors(kind: str, tmp_path: Path, two_versions) -> None:
    """... and a foreign file (no line in sha256sum format) is refused as manifest audit and
    gate refuse it: it was compared as an empty manifest, every entry 'removed', exit 1."""
    _root, old, _new = two_versions
    bad = tmp_path / "bad"
    if kind == "foreign":
        bad.write_text("# Release notes\n\nNothing here is a manifest.\n")
    elif kind == "fifo":
        os.mkfifo(bad)
    elif kind == "loop":
        os.symlink(tmp_path / "bad2", bad)
        os.symlink(bad, tmp_path / "bad2")
    elif kind == "dir":
        bad.mkdir()
    res = invoke("manifest", "diff", str(old), str(bad))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert str(bad) in res.stderr and len(res.stderr.strip().splitlines()) <= 2


def test_output_never_overwrites_an_input(two_versions) -> None:
    _root, old, new = two_versions
    before = new.read_bytes()
    res = invoke("manifest", "diff", str(old), str(new), "-o", str(new))
    assert res.returncode != 0 and "is an input manifest" in res.stderr
    assert new.read_bytes() == before


def test_case_answer_report_and_playbook(two_versions, tmp_path: Path) -> None:
    root, old, new = two_versions
    case_dir = tmp_path / "case"
    res = invoke("playbook", "run", "dataset-audit", "--case", str(case_dir), "--yes", "--json",
                 "-p", f"dir={root}", "-p", f"manifest={new}", "-p", f"previous_manifest={old}")
    assert res.returncode in (0, 1), res.stderr
    case = Case.open(case_dir)
    steps = {r["details"]["step"]: r["details"]["status"] for r in case.records("step.finished")}
    assert steps["manifest-diff"] == "findings"
    out = json.loads(res.stdout)
    assert "manifest diff: 1 changed, 1 removed, 1 added, 3 renamed" in out["answer"]
    md = invoke("report", str(case_dir), "--format", "md", "-o", str(tmp_path / "r.md"))
    assert md.returncode == 0, md.stderr
    text = (tmp_path / "r.md").read_text()
    assert "## Manifest to manifest" in text
    assert "| renamed | shard-0.bin | moved/shard-0.bin |" in text
    html = invoke("report", str(case_dir), "-o", str(tmp_path / "r.html"))
    assert html.returncode == 0, html.stderr
    assert 'data-testid="manifest-diff"' in (tmp_path / "r.html").read_text()
    assert {"MD001", "MD002", "MD003", "MD004"} <= {f.code for f in case.findings()}
