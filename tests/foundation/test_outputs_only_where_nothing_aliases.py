"""Outputs only where nothing can alias evidence: a tool writes only beneath a directory the
kit made for the case (recorded in its log), into files it creates there; a pre-existing
destination, a hard link, a symlink or a bind mount planted inside is refused. Real tools
(rsync, dd) through the runner; the evidence hashed before and after."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.record.case import Case

pytestmark = [pytest.mark.needs_tool("rsync", "bwrap")]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def scene(tmp_path: Path):  # noqa: ANN201
    evidence = tmp_path / "evidence" / "model.pt"
    evidence.parent.mkdir()
    evidence.write_bytes(b"evidence bytes " * 100)
    src = tmp_path / "src"
    src.mkdir()
    (src / "x").write_bytes(b"OVERWRITTEN")
    case = Case.create(tmp_path / "case", title="outputs")
    case.ensure_evidence(evidence, how="test evidence")
    before = _sha(evidence)
    yield {"evidence": evidence, "src": src, "case": case, "root": tmp_path,
           "runner": SubprocessRunner(case)}
    assert _sha(evidence) == before, "the evidence changed"


def _run(scene: dict, *argv: str):  # noqa: ANN202
    return scene["runner"].run(ToolCall(argv=tuple(argv), timeout_s=60, purpose="test"))


def test_rsync_inplace_into_a_destination_holding_a_hard_link_to_evidence(scene: dict) -> None:
    dest = scene["root"] / "dest"
    dest.mkdir()
    os.link(scene["evidence"], dest / "x")  # planted before the kit saw the destination
    res = _run(scene, "rsync", "-r", "--inplace", f"{scene['src']}/", f"{dest}/")
    assert res.refused and "not inside a directory the kit made" in res.refused
    # a destination the kit makes: the copy runs; a hard link planted there afterwards is
    # refused on the next run
    new = scene["root"] / "new-dest"
    res = _run(scene, "rsync", "-r", "--inplace", f"{scene['src']}/", f"{new}/")
    assert res.refused is None and res.returncode == 0, (res.refused, res.stderr)
    assert (new / "x").read_bytes() == b"OVERWRITTEN"
    made = [r["details"] for r in scene["case"].records("safety.output_dir")]
    assert [d["path"] for d in made] == [str(new)]
    (new / "x").unlink()
    os.link(scene["evidence"], new / "x")
    res = _run(scene, "rsync", "-r", "--inplace", f"{scene['src']}/", f"{new}/")
    assert res.refused and "hard links" in res.refused
    # a symlink planted inside, leading to the evidence's folder
    (new / "x").unlink()
    (new / "sub").symlink_to(scene["evidence"].parent)
    res = _run(scene, "rsync", "-rK", "--inplace", f"{scene['src']}/", f"{new}/")
    assert res.refused and "symlink" in res.refused


def test_dd_writes_only_a_new_file_in_a_directory_the_kit_made(scene: dict) -> None:
    existing = scene["root"] / "mine"
    existing.mkdir()
    (existing / "notes.txt").write_text("the responder's own files\n")
    res = _run(scene, "dd", f"if={scene['src'] / 'x'}", f"of={existing / 'out.bin'}")
    assert res.refused and "not inside a directory the kit made" in res.refused
    target = scene["root"] / "out" / "deeper" / "out.bin"
    res = _run(scene, "dd", f"if={scene['src'] / 'x'}", f"of={target}")
    assert res.refused is None and res.returncode == 0, (res.refused, res.stderr)
    assert target.read_bytes() == b"OVERWRITTEN"
    # a symlink planted at the name, then a hard link: both refused
    target.unlink()
    target.symlink_to(scene["evidence"])
    res = _run(scene, "dd", f"if={scene['src'] / 'x'}", f"of={target}", "conv=notrunc")
    assert res.refused and ("symlink" in res.refused or "evidence" in res.refused)
    # a hard link to a file that is not registered evidence (a file the kit cannot know)
    other = scene["root"] / "other-file"
    other.write_bytes(b"someone else's")
    target.unlink()
    os.link(other, target)
    res = _run(scene, "dd", f"if={scene['src'] / 'x'}", f"of={target}", "conv=notrunc")
    assert res.refused and "hard links" in res.refused
    assert other.read_bytes() == b"someone else's"


def test_planted_files_under_work_are_not_outputs_of_the_kit(scene: dict) -> None:
    """CASE/work/ is not an output directory by itself: a tool cannot write there."""
    work = scene["case"].work_dir
    res = _run(scene, "rsync", "-r", f"{scene['src']}/", f"{work}/")
    assert res.refused


@pytest.mark.privileged
def test_a_bind_mount_planted_inside_a_kit_directory_is_refused(scene: dict) -> None:
    new = scene["root"] / "kit-dest"
    assert _run(scene, "rsync", "-r", f"{scene['src']}/", f"{new}/").returncode == 0
    (new / "m").mkdir()
    subprocess.run(["mount", "--bind", str(scene["evidence"].parent), str(new / "m")],
                   check=True)
    try:
        res = _run(scene, "rsync", "-r", "--inplace", f"{scene['src']}/", f"{new}/")
        assert res.refused and "mount" in res.refused
    finally:
        subprocess.run(["umount", str(new / "m")], check=True)
