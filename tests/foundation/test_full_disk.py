"""A full disk under the kit's own outputs: whatever the point at which the space runs out, the
error is one line naming the file that could not be written, no temporary file is left, files
that belong together (a manifest and its sidecar) are both new or both as they were, nothing
looks finished that is not, and the same command works once there is room. Real tmpfs mounts of
a few hundred KiB; the point of failure is swept, never guessed."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import run_cli

from ckptrescue.datasets.manifest import build_manifest
from ckptrescue.effects import beneath
from ckptrescue.record.atomic import replacing_all
from ckptrescue.record.case import Case
from fixtures.storage import sha256

pytestmark = pytest.mark.privileged


@pytest.fixture
def mnt() -> Iterator[Path]:
    from fixtures.storage import small_tmpfs

    with small_tmpfs("256k") as where:
        yield where


def _leave(where: Path, free: int) -> None:
    """Fill ``where`` so that about ``free`` bytes stay free (the filler is replaced)."""
    filler = where / "filler"
    filler.unlink(missing_ok=True)
    st = os.statvfs(where)
    with open(filler, "wb", buffering=0) as fh:
        left = max(0, st.f_bavail * st.f_frsize - free)
        try:
            while left > 0:
                left -= fh.write(b"\0" * min(left, 1 << 16))
        except OSError:
            pass


def _dataset(root: Path) -> None:
    """51 files from an integer generator: 50 small ones and one of 64 KiB."""
    root.mkdir()
    for i in range(50):
        (root / f"shard {i:02d}.txt").write_bytes(bytes((i * 7 + j) % 251 for j in range(97 + i)))
    (root / "big.bin").write_bytes(bytes((j * 31) % 256 for j in range(1 << 16)))


def test_manifest_build_as_the_disk_fills_at_every_point(tmp_path: Path, mnt: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    _dataset(src)
    before = {p.name: sha256(p) for p in src.iterdir()}
    reference = tmp_path / "ref.sha256"
    build_manifest(src, reference, jobs=1)
    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    out = mnt / "m.sha256"
    failed: set[str] = set()
    succeeded = 0
    for free in range(0, 68 << 10, 4 << 10):
        _leave(mnt, free)
        try:
            build_manifest(src, out, jobs=2)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            assert exc.filename and str(exc.filename).startswith(str(out)), exc
            failed.add(str(exc.filename))
            # nothing that looks finished: no manifest, no sidecar, no temporary file; the
            # partial file of finished hashes is what the rerun resumes from
            assert {p.name for p in mnt.iterdir()} <= {"filler", "m.sha256.partial.jsonl"}, \
                (free, sorted(os.listdir(mnt)))
            (mnt / "filler").unlink()
            build_manifest(src, out, jobs=2)  # room again: the same build finishes
        else:
            succeeded += 1
        assert {p.name for p in mnt.iterdir()} <= {"filler", "m.sha256", "m.sha256.jsonl"}
        assert out.read_bytes() == reference.read_bytes(), free
        assert (mnt / "m.sha256.jsonl").read_bytes() == \
            (tmp_path / "ref.sha256.jsonl").read_bytes()
        out.unlink()
        (mnt / "m.sha256.jsonl").unlink()
    assert failed and succeeded, (failed, succeeded)  # the sweep crossed the boundary
    assert unraisable == []  # no generator or database left to be collected half closed
    assert {p.name: sha256(p) for p in src.iterdir()} == before


def test_manifest_build_through_the_cli_on_a_full_disk_is_one_line(tmp_path: Path,
                                                                   mnt: Path) -> None:
    src = tmp_path / "src"
    _dataset(src)
    _leave(mnt, 0)
    res = run_cli("manifest", "build", str(src), "-o", str(mnt / "m.sha256"), "--no-progress")
    assert res.returncode == 4, res.stdout + res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr  # no traceback, no "Exception ignored"
    assert lines[0].startswith(f"ckptrescue: error: {mnt / 'm.sha256'}")
    assert lines[0].endswith(": No space left on device")


def test_a_report_that_does_not_fit_names_its_file_and_leaves_nothing(tmp_path: Path,
                                                                      mnt: Path) -> None:
    case = Case.create(tmp_path / "case", title="full disk")
    _leave(mnt, 0)
    res = run_cli("report", str(case.root), "-o", str(mnt / "r.html"))
    assert res.returncode == 4, res.stdout + res.stderr
    assert res.stderr.strip() == f"ckptrescue: error: {mnt / 'r.html'}: No space left on device"
    assert sorted(os.listdir(mnt)) == ["filler"]


def test_a_case_that_could_not_be_created_can_be_created_again(mnt: Path) -> None:
    _leave(mnt, 0)
    res = run_cli("case", "new", str(mnt / "c"), "--title", "t")
    assert res.returncode == 4 and "No space left on device" in res.stderr
    assert "Traceback" not in res.stderr
    # what to do next: the same command once there is room
    assert "run the same command again" in res.stderr or \
        "while creating the case directory" in res.stderr, res.stderr
    assert (mnt / "c").is_dir()  # what it made before the space ran out: no case, no block
    assert not (mnt / "c" / "audit.jsonl").exists() or \
        (mnt / "c" / "audit.jsonl").stat().st_size == 0
    (mnt / "filler").unlink()
    # not a case to record into: a command with --case says so and writes nothing
    res = run_cli("case", "verify", str(mnt / "c"))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "creation failed before its first record" in res.stderr or \
        "not a case directory" in res.stderr, res.stderr
    assert not (mnt / "c" / "audit.jsonl").exists() or \
        (mnt / "c" / "audit.jsonl").stat().st_size == 0
    res = run_cli("case", "new", str(mnt / "c"), "--title", "t")
    assert res.returncode == 0, res.stderr
    report = Case.open(mnt / "c").verify()
    assert report.ok and [r["action"] for r in report.chain.records] == ["case.created"]
    res = run_cli("case", "new", str(mnt / "c"), "--title", "t")  # now it is a case
    assert res.returncode == 2 and "a case already exists here" in res.stderr


def test_a_folder_with_anything_else_in_it_is_still_refused(tmp_path: Path) -> None:
    # a user's own files, even named like the case's, are never taken over
    for leftover in ("notes.txt", "artifacts/x", "index.jsonl", ".draft.tmp", "case.json"):
        root = tmp_path / leftover.replace("/", "-")
        (root / leftover).parent.mkdir(parents=True, exist_ok=True)
        (root / leftover).write_text("mine")
        res = run_cli("case", "new", str(root), "--title", "t")
        assert res.returncode == 2 and "not empty" in res.stderr, (leftover, res.stderr)
        assert (root / leftover).read_text() == "mine"


def test_what_a_failed_creation_left_is_no_case_to_record_into(tmp_path: Path) -> None:
    made = Case.create(tmp_path / "made", title="t")
    root = tmp_path / "left"
    for sub in ("artifacts", "work"):
        (root / sub).mkdir(parents=True)
    (root / "case.json").write_bytes((made.root / "case.json").read_bytes())
    (root / "audit.jsonl").write_bytes(b"")
    (root / ".writer.lock").write_bytes(b"")
    (root / "index.jsonl").write_bytes(b"")  # (a second failed try leaves an empty index)
    (root / ".creating").write_bytes(b"")  # the mark a creation keeps until its first record
    res = run_cli("probe", str(made.root / "case.json"), "--case", str(root))
    assert res.returncode == 2 and "creation failed before its first record" in res.stderr, \
        res.stderr
    assert (root / "audit.jsonl").stat().st_size == 0
    res = run_cli("case", "new", str(root), "--title", "again")
    assert res.returncode == 0, res.stderr
    [created] = Case.open(root).records("case.created")
    took_over = created["details"]["took_over_a_failed_creation"]["case_json"]
    assert took_over["id"] == made.manifest["id"]  # what was there is said, not lost


def test_a_damaged_case_with_an_empty_log_is_never_created_over(tmp_path: Path) -> None:
    root = tmp_path / "c"
    Case.create(root, title="the real one")
    first = (root / "case.json").read_bytes()
    (root / "audit.jsonl").write_bytes(b"")  # the log emptied: damage (or tampering)
    for argv in (("case", "new", str(root), "--title", "attacker"),
                 ("watch", str(tmp_path), "--case", str(root), "--passes", "1",
                  "--state", str(tmp_path.parent / f"{tmp_path.name}-w.sqlite"))):
        res = run_cli(*argv)
        assert res.returncode != 0 and "Traceback" not in res.stderr, (argv, res.stderr)
        assert (root / "case.json").read_bytes() == first


def _refused_as_damage(root: Path, tmp_path: Path) -> None:
    """A case whose log was emptied: case new refuses the folder, and a command that would
    record into it refuses too, writing nothing."""
    res = run_cli("case", "new", str(root), "--title", "again")
    assert res.returncode == 2 and "not empty" in res.stderr, res.stderr
    (tmp_path / "x.txt").write_text("x")
    res = run_cli("probe", str(tmp_path / "x.txt"), "--case", str(root))
    assert res.returncode == 2 and "holds no records" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert (root / "audit.jsonl").stat().st_size == 0


def test_a_case_whose_log_was_emptied_and_derived_files_removed_is_damage(
        tmp_path: Path) -> None:
    """Without its derived files, a case whose log was emptied holds what a failed creation
    leaves (case.json, an empty log), except the creation's mark: it is reported as damaged,
    never created over, and nothing is recorded into it (a first record would begin a new chain
    that hides the loss)."""
    root = tmp_path / "c"
    Case.create(root, title="the real one")
    assert not (root / ".creating").exists()  # gone with the first record
    first = (root / "case.json").read_bytes()
    (root / "audit.jsonl").write_bytes(b"")
    for derived in ("index.jsonl", "evidence.json"):
        (root / derived).unlink()
    res = run_cli("case", "verify", str(root))
    assert res.returncode == 1 and "audit.jsonl holds no records" in res.stdout + res.stderr
    _refused_as_damage(root, tmp_path)
    assert (root / "case.json").read_bytes() == first


def test_a_creation_that_fails_after_its_first_record_leaves_no_mark(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills after ``case.created`` is in the log (its derived evidence list does not
    fit): the case exists, and the creation's mark is gone with the first record, so a later
    emptied log is still damage, never a failed creation to take over or to write into."""
    import ckptrescue.record.case as case_module
    from ckptrescue.record.audit import CaseWriteError

    real = case_module.write_json_atomic

    def full(path: Path, data: object, **kw: object) -> None:
        if Path(path).name == "evidence.json":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, data, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(case_module, "write_json_atomic", full)
    root = tmp_path / "c"
    with pytest.raises(CaseWriteError):
        Case.create(root, title="t")
    monkeypatch.undo()
    assert not (root / ".creating").exists()
    assert [r["action"] for r in Case.open(root).records()] == ["case.created"]
    (root / "audit.jsonl").write_bytes(b"")
    (root / "index.jsonl").unlink()
    _refused_as_damage(root, tmp_path)


@pytest.mark.parametrize("fault", ["torn write", "failed sync", "torn, not taken back"])
def test_a_first_record_that_is_not_wholly_in_the_log_is_no_case(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    """The disk fills in the middle of ``case.created`` (a torn line), or the log's sync
    fails (NFS writeback, EIO): the log goes back to empty and the creation's mark stays, so
    the folder is a failed creation, which the same ``case new`` takes over. Where the log
    cannot be taken back (or a crash came first), the torn line beside the mark is no case
    either, and the takeover cuts it."""
    import ckptrescue.record.audit as audit_module
    import ckptrescue.record.case as case_module
    from ckptrescue.record.audit import CaseWriteError

    def is_log(fd: int) -> bool:
        return os.readlink(f"/proc/self/fd/{fd}").endswith("audit.jsonl")

    real_write, real_fsync = audit_module.os.write, audit_module.os.fsync

    def torn(fd: int, data: bytes) -> int:
        if is_log(fd):
            real_write(fd, bytes(data)[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    failed: list[int] = []

    def unsynced(fd: int) -> None:  # the first record's sync fails (a later one works)
        if is_log(fd) and not failed:
            failed.append(fd)
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        real_fsync(fd)

    real_empty = case_module._empty_beside

    def cannot_take_back(at: Path, name: str, **kw: bool) -> None:
        if (at / name).exists() and (at / name).stat().st_size:  # (the torn line: not cut)
            raise OSError(errno.EROFS, "Read-only file system")
        real_empty(at, name, **kw)

    if fault == "failed sync":
        monkeypatch.setattr(audit_module.os, "fsync", unsynced)
    else:
        monkeypatch.setattr(audit_module.os, "write", torn)
    if fault == "torn, not taken back":
        monkeypatch.setattr(case_module, "_empty_beside", cannot_take_back)
    root = tmp_path / "c"
    with pytest.raises(CaseWriteError) as caught:
        Case.create(root, title="t")
    monkeypatch.undo()
    assert "the case could not be created" in caught.value.message
    assert (root / ".creating").exists()
    if fault == "torn, not taken back":
        assert (root / "audit.jsonl").stat().st_size > 0
        res = run_cli("probe", str(root / "case.json"), "--case", str(root))
        assert res.returncode == 2 and "creation failed before its first record" in res.stderr
    else:
        assert "the log was taken back to empty" in caught.value.message
        assert (root / "audit.jsonl").stat().st_size == 0
    assert not (root / "index.jsonl").exists() or (root / "index.jsonl").stat().st_size == 0
    res = run_cli("case", "new", str(root), "--title", "again")
    assert res.returncode == 0, res.stderr
    assert [r["action"] for r in Case.open(root).records()] == ["case.created"]
    assert not (root / ".creating").exists()


def test_open_or_create_opens_a_damaged_case_and_its_writer_refuses(tmp_path: Path) -> None:
    root = tmp_path / "c"
    Case.create(root, title="t")
    (root / "audit.jsonl").write_bytes(b"")
    case = Case.open_or_create(root)  # not "directory is not empty": the case is there
    with pytest.raises(Exception, match="holds no records"):
        case.log("note", {"text": "x"})
    assert (root / "audit.jsonl").stat().st_size == 0


def test_files_that_belong_together_are_both_new_or_both_old(mnt: Path) -> None:
    first, second = mnt / "m.sha256", mnt / "m.sha256.jsonl"
    first.write_bytes(b"old manifest\n")
    second.write_bytes(b"old sidecar\n")
    _leave(mnt, 8 << 10)
    with pytest.raises(OSError) as caught, replacing_all(second, first) as (side, text):
        side.write(b"s" * (4 << 10))
        text.write(b"m" * (64 << 10))  # does not fit
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(first)
    assert first.read_bytes() == b"old manifest\n" and second.read_bytes() == b"old sidecar\n"
    assert sorted(os.listdir(mnt)) == ["filler", "m.sha256", "m.sha256.jsonl"]


def test_a_created_file_is_whole_or_absent(mnt: Path) -> None:
    _leave(mnt, 8 << 10)
    with pytest.raises(OSError) as caught, beneath.creating(mnt, mnt / "out" / "model.bin") as fh:
        for _ in range(32):
            fh.write(b"x" * (4 << 10))
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.filename == str(mnt / "out" / "model.bin")
    assert os.listdir(mnt / "out") == []  # neither the name nor its temporary file
    (mnt / "filler").unlink()
    with beneath.creating(mnt, mnt / "out" / "model.bin") as fh:
        fh.write(b"whole")
    assert (mnt / "out" / "model.bin").read_bytes() == b"whole"
    with pytest.raises(FileExistsError), beneath.creating(mnt, mnt / "out" / "model.bin"):
        pass
    assert (mnt / "out" / "model.bin").read_bytes() == b"whole"


def test_an_audit_state_that_does_not_fit_is_a_full_disk_not_a_foreign_database(
        tmp_path: Path, mnt: Path) -> None:
    src = tmp_path / "src"
    _dataset(src)
    manifest = tmp_path / "m.sha256"
    build_manifest(src, manifest, jobs=1)
    state = mnt / "audit.sqlite"
    said = []
    for free in (0, 16 << 10, 48 << 10):
        _leave(mnt, free)
        res = run_cli("manifest", "audit", str(src), str(manifest), "--state", str(state),
                      "--no-progress")
        assert res.returncode == 4, res.stdout + res.stderr
        [line] = res.stderr.splitlines()
        assert line.startswith(f"ckptrescue: error: {state}: "), line
        assert "not an audit state" not in line and "Input/output error" not in line, line
        said.append(line)
        # a state the failed run made is not left behind (nothing in it to resume)
        assert sorted(os.listdir(mnt)) == ["filler"]
    assert any(line.endswith("No space left on device") for line in said), said
    (mnt / "filler").unlink()
    res = run_cli("manifest", "audit", str(src), str(manifest), "--state", str(state),
                  "--no-progress")
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_watch_whose_state_does_not_fit_leaves_no_state(tmp_path: Path, mnt: Path) -> None:
    src = tmp_path / "src"
    _dataset(src)
    state = mnt / "w.sqlite"
    _leave(mnt, 0)
    res = run_cli("watch", str(src), "--case", str(tmp_path / "case"), "--state", str(state),
                  "--passes", "1")
    assert res.returncode == 4, res.stdout + res.stderr
    [line] = [x for x in res.stderr.splitlines() if x.startswith("ckptrescue: error:")]
    assert line.startswith(f"ckptrescue: error: {state}"), line
    assert sorted(os.listdir(mnt)) == ["filler"]
    (mnt / "filler").unlink()
    res = run_cli("watch", str(src), "--case", str(tmp_path / "case"), "--state", str(state),
                  "--passes", "1")
    assert res.returncode == 0, res.stdout + res.stderr
