"""The CLI adapter: help with examples, exit codes, --json on stdout, progress on stderr."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.datasets import flip_byte, tfrecord_offsets, tree_digest

CLI = [sys.executable, "-m", "ckptrescue"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", [["manifest", "build"], ["manifest", "audit"],
                                     ["dataset", "verify"], ["recover"]])
def test_every_command_has_help_with_an_example(command: list[str]) -> None:
    proc = run(*command, "--help")
    assert proc.returncode == 0
    assert "Example" in proc.stdout


def test_build_audit_verify_recover_end_to_end(dataset, tmp_path: Path) -> None:
    root, files = dataset
    manifest = tmp_path / "m.sha256"
    snaps = tmp_path / "snaps"
    built = run("manifest", "build", str(root), "-o", str(manifest), "--jobs", "2")
    assert built.returncode == 0, built.stderr
    assert "hashing: 9/9 files" in built.stderr
    assert built.stdout.startswith("9 files")
    shutil.copytree(root, snaps / "s1")
    flip_byte(files["tfrecord"], tfrecord_offsets(files["tfrecord"])[1] + 12)
    before = tree_digest(root)

    audited = run("manifest", "audit", str(root), str(manifest), "--json", "--no-progress")
    assert audited.returncode == 1
    data = json.loads(audited.stdout)
    assert data["counts"]["corrupted"] == 1 and data["counts"]["ok"] == 8

    human = run("manifest", "audit", str(root), str(manifest), "--no-progress")
    assert "CORRUPTED   tfrecords/train-00000-of-00002.tfrecord" in human.stdout
    assert human.stdout.rstrip().endswith("1 of 9 files in the manifest do not match "
                                          "(1 corrupted)")

    verified = run("dataset", "verify", str(root), "--json")
    assert verified.returncode == 1
    bad = [f for f in json.loads(verified.stdout)["files"] if f["status"] == "damaged"]
    assert [(f["path"], f["bad_records"][0]["index"]) for f in bad] == [
        ("tfrecords/train-00000-of-00002.tfrecord", 1)]

    recovered = run("recover", str(root), "--manifest", str(manifest), "--from", str(snaps),
                    "--to", str(tmp_path / "out"))
    assert recovered.returncode == 0, recovered.stderr
    assert "RECOVERED     tfrecords/train-00000-of-00002.tfrecord" in recovered.stdout
    assert tree_digest(root) == before


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = run("manifest", "audit", str(tmp_path / "nope"), str(tmp_path / "m"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("ckptrescue: error:") and "Traceback" not in proc.stderr


def test_manifest_inside_dir_is_refused_with_a_hint(dataset) -> None:
    root, _ = dataset
    proc = run("manifest", "build", str(root), "-o", str(root / "m.sha256"))
    assert proc.returncode == 2 and "hint:" in proc.stderr
    assert not (root / "m.sha256").exists()
