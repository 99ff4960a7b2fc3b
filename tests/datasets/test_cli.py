"""The CLI adapter: help with examples, exit codes, --json on stdout, progress on stderr."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import invoke

from fixtures.datasets import flip_byte, tfrecord_offsets, tree_digest
from fixtures.det import det_bytes

CLI = [sys.executable, "-m", "ckptrescue"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in this process (a real interrupt below still gets a process of its own)."""
    return invoke(*args)


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


def test_ctrl_c_then_the_same_command_resumes(tmp_path: Path) -> None:
    """A real SIGINT while a large (sparse) file is being hashed; the rerun takes over the files
    finished before the interruption and hashes only the rest."""
    import signal
    import time

    root = tmp_path / "ds"
    root.mkdir()
    for i in range(5):
        (root / f"a{i}.bin").write_bytes(det_bytes(4096, 1, i))
    with (root / "zz-big.bin").open("wb") as fh:
        fh.truncate(3 << 30)  # sparse: reads are zeros, hashing takes seconds
    out = tmp_path / "m.sha256"
    partial = Path(str(out) + ".partial.jsonl")
    proc = subprocess.Popen([*CLI, "manifest", "build", str(root), "-o", str(out), "--jobs", "1",
                             "--no-progress"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if partial.exists() and partial.read_text().count("\n") >= 5:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "run the same command again to resume" in err
    assert not out.exists() and partial.read_text().count("\n") == 5
    with (root / "zz-big.bin").open("r+b") as fh:
        fh.truncate(1 << 20)
    resumed = run("manifest", "build", str(root), "-o", str(out), "--json", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    data = json.loads(resumed.stdout)
    assert (data["resumed"], data["files"], data["bytes_hashed"]) == (5, 6, 1 << 20)
    check = subprocess.run(["sha256sum", "--quiet", "-c", str(out)], cwd=root, timeout=60)
    assert check.returncode == 0
