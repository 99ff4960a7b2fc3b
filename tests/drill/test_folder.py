"""The folder a drill builds into (``drill/folder.py``): a path that cannot hold one is a
one-line usage error (exit 2) for both drills, never an internal error, and nothing is made."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import invoke

from ckptrescue.drill import folder
from ckptrescue.errors import UsageError

DRILLS = {"full": ("--no-s3", "--no-tf"), "silent": ("--silent",)}


def bad_folders(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    return {"a file": (a_file, "not a directory"),
            "under a file": (a_file / "drill", "Not a directory"),
            "where nothing can be made": (Path("/proc/ckptrescue-drill"),
                                          "No such file or directory")}


@pytest.mark.parametrize("kind", sorted(DRILLS))
@pytest.mark.parametrize("case", ["a file", "under a file", "where nothing can be made"])
def test_a_folder_that_cannot_be_made_is_one_line(tmp_path: Path, kind: str, case: str) -> None:
    path, says = bad_folders(tmp_path)[case]
    if kind == "silent" and case == "a file":  # DIR/silent is the silent drill's own folder
        path.unlink()
        path.mkdir()
        (path / "silent").write_text("x")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    res = invoke("drill", str(path), *DRILLS[kind])
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("ckptrescue:") == 1 and "internal error" not in res.stderr
    assert says in res.stderr and "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_the_claim_is_made_once(tmp_path: Path) -> None:
    """The first claim makes the folder and its marker; the second finds the marker."""
    root = tmp_path / "d"
    assert folder.claim(root, "staging", what="the drill") == root / "staging"
    assert (root / "staging").is_dir()
    with pytest.raises(UsageError, match="not empty"):
        folder.claim(root, "staging", what="the drill")


def test_an_empty_folder_is_claimed_and_a_held_marker_refused(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """A second drill that passed the emptiness check just before the first claimed the folder
    (the check and the claim are two steps) is refused by the claim itself."""
    root = tmp_path / "d"
    root.mkdir()
    assert folder.claim(root, "staging", what="the drill").is_dir()
    real_iterdir = Path.iterdir

    def empty_for_the_check(self: Path):  # type: ignore[no-untyped-def]
        return iter(()) if self == root else real_iterdir(self)

    monkeypatch.setattr(Path, "iterdir", empty_for_the_check)
    with pytest.raises(UsageError, match="another drill is building here"):
        folder.claim(root, "staging", what="the drill")
