"""``record.atomic.replacing``: the one way the kit replaces a file it writes (case files,
manifests and their sidecars, diffs, plans, metrics). A reader sees the old file or the new one;
a write that fails leaves neither a temp file nor a changed file; two writers of one path never
share a temp file, so the last to finish wins whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import invoke

from ckptrescue.record.atomic import replacing, write_atomic


def temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_write_that_raises_changes_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "m.sha256"
    target.write_bytes(b"old\n")
    with pytest.raises(RuntimeError), replacing(target) as fh:
        fh.write(b"half of the new")
        raise RuntimeError("the hashing failed")
    assert target.read_bytes() == b"old\n" and temps(tmp_path) == []


def test_a_rename_that_fails_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "a-folder"
    target.mkdir()
    with pytest.raises(IsADirectoryError):
        write_atomic(target, b"new\n")
    assert target.is_dir() and temps(tmp_path) == []


def test_two_writers_of_one_path_never_mix(tmp_path: Path) -> None:
    """Written in turns, block by block (what two processes at once do): each has its own temp
    file, and the path ends as one writer's whole content (with one shared temp file, as the
    manifests had, the two wrote into each other)."""
    target = tmp_path / "d.sha256"
    first, second = replacing(target), replacing(target)
    a, b = first.__enter__(), second.__enter__()
    for i in range(100):
        a.write(b"A%03d\n" % i)
        b.write(b"B%03d\n" % i)
    assert len(temps(tmp_path)) == 2
    first.__exit__(None, None, None)
    assert target.read_bytes() == b"".join(b"A%03d\n" % i for i in range(100))
    second.__exit__(None, None, None)
    assert target.read_bytes() == b"".join(b"B%03d\n" % i for i in range(100))
    assert temps(tmp_path) == []


def test_nested_blocks_replace_the_inner_file_first(tmp_path: Path) -> None:
    """A manifest's sidecar is renamed before the manifest (an audit joins a sidecar row to a
    manifest line only when their SHA-256 agree): when the outer rename fails, the inner file
    is in place and the outer one unchanged."""
    outer = tmp_path / "out"
    outer.mkdir()
    inner = tmp_path / "out.jsonl"
    with pytest.raises(IsADirectoryError), replacing(outer) as o, replacing(inner) as i:
        o.write(b"text\n")
        i.write(b"{}\n")
    assert inner.read_bytes() == b"{}\n" and outer.is_dir() and temps(tmp_path) == []


def test_a_killed_writer_leaves_the_old_file(tmp_path: Path) -> None:
    """kill -9 in the middle of a write: the path holds the old content, whole."""
    target = tmp_path / "m.sha256"
    target.write_bytes(b"old\n")
    code = ("import os, sys, signal\n"
            "from ckptrescue.record.atomic import replacing\n"
            "with replacing(sys.argv[1]) as fh:\n"
            "    fh.write(b'x' * (1 << 20)); fh.flush()\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n")
    res = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True)
    assert res.returncode == -9, res.stderr
    assert target.read_bytes() == b"old\n"


def test_manifest_build_refuses_a_folder_as_its_output_before_hashing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a")
    out = tmp_path / "out"
    out.mkdir()
    res = invoke("manifest", "build", str(data), "-o", str(out), "--no-progress")
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip() == (f"ckptrescue: error: {out}: is a directory; -o names the "
                                  "manifest file to write")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "out"]


def test_a_manifest_whose_sidecar_cannot_be_placed_leaves_no_temp_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a")
    (tmp_path / "m.sha256.jsonl").mkdir()  # where the sidecar must go
    res = invoke("manifest", "build", str(data), "-o", str(tmp_path / "m.sha256"),
                 "--no-progress")
    assert res.returncode == 4, res.stderr
    assert "m.sha256.jsonl: Is a directory" in res.stderr.strip().splitlines()[-1]
    assert temps(tmp_path) == [] and not (tmp_path / "m.sha256").exists()
