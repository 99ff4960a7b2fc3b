"""Fail closed: what a manifest skipped (never hashed) or an audit could not check does not count
toward "everything verifies". A FIFO in a dataset tree is skipped by the walk (never opened: it
would block); ``manifest build`` and ``manifest audit`` then exit 1 and say how many entries went
unverified, unless ``--allow-unverified``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ckptrescue.datasets.audit import audit
from ckptrescue.datasets.manifest import build_manifest
from fixtures.datasets import write_jsonl

REPO = Path(__file__).resolve().parents[2]


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "ckptrescue", *argv], capture_output=True,
                          text=True, timeout=300, env=env, cwd=REPO)


def test_skipped_entries_fail_the_build_and_the_audit(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    for i in range(3):
        write_jsonl(root / f"part-{i}.jsonl", lines=5)
    manifest = tmp_path / "data.sha256"
    assert build_manifest(root, manifest, jobs=1).ok
    os.mkfifo(root / "pipe.jsonl")  # a special file: skipped, never opened
    built = build_manifest(root, tmp_path / "with-fifo.sha256", jobs=1)
    assert not built.ok and len(built.skipped) == 1
    assert "1 skipped (not in the manifest: unverified" in built.answer()
    result = audit(root, manifest)
    assert result.counts["corrupted"] == 0 and result.counts["missing"] == 0
    assert not result.ok
    assert "1 entr(ies) skipped while walking, not checked (unverified: pipe.jsonl" \
        in result.answer()
    assert any(f.code == "MF006" and str(f.severity) == "warning" for f in result.findings())
    strict = cli("manifest", "audit", str(root), str(manifest), "--json")
    assert strict.returncode == 1, strict.stderr
    out = json.loads(strict.stdout)
    assert out["skipped"] == 1 and out["allow_unverified"] is False
    allowed = cli("manifest", "audit", str(root), str(manifest), "--allow-unverified")
    assert allowed.returncode == 0, allowed.stderr
    assert "accepted with --allow-unverified" in allowed.stdout
    build = cli("manifest", "build", str(root), "-o", str(tmp_path / "b.sha256"))
    assert build.returncode == 1 and "unverified" in build.stdout
    build = cli("manifest", "build", str(root), "-o", str(tmp_path / "c.sha256"),
                "--allow-unverified")
    assert build.returncode == 0, build.stderr
