"""Evidence reached under another name the path does not spell: a bind mount of an evidence
*subdirectory*, an overlay whose upper layer is evidence (a container's writable layer), an
overlay whose merged view is the evidence while the write goes to its upper layer, a symlinked
destination leading into another evidence directory. Each is decided in the filesystem's own
coordinates (the mount table's device and the path from that filesystem's root, through
overlay layers), for tool outputs (``exec``) and for the kit's own writers (``salvage``,
``extract``, ``s3 restore``). Real bind and overlay mounts made by the test; the evidence
trees are hashed before and after."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptrescue.record.case import Case

pytestmark = [pytest.mark.privileged]
CLI = str(Path(sys.executable).with_name("ckptrescue"))
REPO = Path(__file__).resolve().parents[2]


def _tree(root: Path) -> str:
    """Names, kinds and contents of everything under ``root``."""
    h = hashlib.sha256()
    for dirpath, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        h.update(f"D {os.path.relpath(dirpath, root)}\n".encode())
        for name in sorted(files):
            p = Path(dirpath, name)
            h.update(f"F {p.relative_to(root)} ".encode() + hashlib.sha256(p.read_bytes())
                     .hexdigest().encode() + b"\n")
    return h.hexdigest()


class Scene:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.mounts: list[Path] = []
        self.case = Case.create(root / "case", title="evidence through mounts")
        self.evidence: list[Path] = []
        self.src = root / "src.bin"
        self.src.write_bytes(b"tool output\n")

    def add_evidence(self, path: Path) -> Path:
        self.case.ensure_evidence(path, how="test evidence")
        self.evidence.append(path)
        return path

    def mount(self, *argv: str) -> None:
        subprocess.run(["mount", *argv], check=True, capture_output=True)
        self.mounts.append(Path(argv[-1]))

    def cli(self, *argv: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        return subprocess.run([CLI, *argv], capture_output=True, text=True, timeout=300,
                              env=env)

    def exec(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return self.cli("exec", "--case", str(self.case.root), "--", *argv)

    def cleanup(self) -> None:
        for where in reversed(self.mounts):
            subprocess.run(["umount", str(where)], check=False, capture_output=True)


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    s = Scene(tmp_path)
    try:
        yield s
        expected = getattr(s, "expected", None)
        assert expected is not None, "the test seals its evidence before acting"
        assert {p: _tree(p) for p in s.evidence} == expected  # before the mounts go
    finally:
        s.cleanup()


def _seal(s: Scene) -> None:
    s.expected = {p: _tree(p) for p in s.evidence}  # type: ignore[attr-defined]


def test_a_bind_mount_of_an_evidence_subdirectory_is_evidence(scene: Scene) -> None:
    ev = scene.root / "ev"
    (ev / "run" / "step-100").mkdir(parents=True)
    (ev / "run" / "step-100" / "model.pt").write_bytes(b"weights")
    scene.add_evidence(ev)
    view = scene.root / "view"
    view.mkdir()
    scene.mount("--bind", str(ev / "run"), str(view))
    _seal(scene)
    r = scene.exec("dd", f"if={scene.src}", f"of={view}/new/out.bin")
    assert r.returncode == 3 and "evidence" in r.stderr, (r.returncode, r.stderr)
    r = scene.exec("dd", f"if={scene.src}", f"of={view}/step-100/model.pt", "conv=notrunc")
    assert r.returncode == 3, r.stderr
    assert not (ev / "run" / "new").exists()


def test_an_overlay_whose_upper_layer_is_evidence(scene: Scene) -> None:
    upper, lower, work, merged = (scene.root / n for n in ("upper", "lower", "work", "merged"))
    for d in (upper, lower, work, merged):
        d.mkdir()
    (upper / "step.pt").write_bytes(b"the container wrote this checkpoint")
    scene.add_evidence(upper)
    scene.mount("-t", "overlay", "overlay", "-o",
                f"lowerdir={lower},upperdir={upper},workdir={work}", str(merged))
    _seal(scene)
    r = scene.exec("dd", f"if={scene.src}", f"of={merged}/new/out.bin")
    assert r.returncode == 3 and "evidence" in r.stderr, (r.returncode, r.stderr)
    assert not (upper / "new").exists()


def test_evidence_seen_through_an_overlay_includes_its_layers(scene: Scene) -> None:
    upper, lower, work, merged = (scene.root / n for n in ("upper", "lower", "work", "merged"))
    for d in (upper, lower, work, merged):
        d.mkdir()
    (lower / "base.pt").write_bytes(b"base")
    scene.mount("-t", "overlay", "overlay", "-o",
                f"lowerdir={lower},upperdir={upper},workdir={work}", str(merged))
    (merged / "step.pt").write_bytes(b"written through the overlay")
    scene.add_evidence(merged)
    # the hashes are of the merged view: a write into the upper layer changes it
    _seal(scene)
    r = scene.exec("dd", f"if={scene.src}", f"of={upper}/new/out.bin")
    assert r.returncode == 3 and "evidence" in r.stderr, (r.returncode, r.stderr)
    assert not (merged / "new").exists()


def test_salvage_into_a_symlink_to_another_evidence_directory_is_refused(scene: Scene) -> None:
    sys.path.insert(0, str(REPO))
    from fixtures.checkpoints import exact_tensor, save_safetensors

    ev1, ev2 = scene.root / "ev1", scene.root / "ev2"
    ev1.mkdir()
    ev2.mkdir()
    save_safetensors(ev1 / "step.safetensors", {"w": exact_tensor(64, seed=1)})
    save_safetensors(ev2 / "other.safetensors", {"w": exact_tensor(64, seed=2)})
    scene.add_evidence(ev1)
    scene.add_evidence(ev2)
    (scene.root / "out").symlink_to(ev2)
    sub = ev2 / "sub"
    sub.mkdir()
    view = scene.root / "view"
    view.mkdir()
    scene.mount("--bind", str(sub), str(view))
    _seal(scene)
    for out in (scene.root / "out", view / "salvaged"):
        r = scene.cli("salvage", str(ev1 / "step.safetensors"), str(out), "--case",
                      str(scene.case.root))
        assert r.returncode == 3 and "evidence" in r.stderr, (out, r.returncode, r.stderr)


def test_extract_and_restore_into_a_bind_of_evidence_are_refused(scene: Scene) -> None:
    sys.path.insert(0, str(REPO))
    from fixtures.checkpoints import exact_tensor, save_safetensors

    src = scene.root / "ckpts"
    src.mkdir()
    save_safetensors(src / "step.safetensors", {"w": exact_tensor(64, seed=3)})
    ro = scene.root / "ro"
    ro.mkdir()
    scene.mount("--bind", "-o", "ro", str(src), str(ro))
    ev = scene.root / "ev"
    (ev / "sub").mkdir(parents=True)
    (ev / "sub" / "keep.pt").write_bytes(b"evidence")
    scene.add_evidence(ev)
    view = scene.root / "view"
    view.mkdir()
    scene.mount("--bind", str(ev / "sub"), str(view))
    _seal(scene)
    r = scene.cli("extract", str(ro), "--to", str(view / "out"), "--case", str(scene.case.root))
    assert r.returncode == 3 and "evidence" in r.stderr, (r.returncode, r.stderr)
    # refused before any request: no server is needed to prove it
    r = scene.cli("s3", "restore", "s3://bucket/run/ok.txt", "--version", "v1", "--to",
                  str(view / "restored"), "--case", str(scene.case.root),
                  "--endpoint-url", "http://127.0.0.1:9")
    assert r.returncode == 3 and "evidence" in r.stderr, (r.returncode, r.stderr)
