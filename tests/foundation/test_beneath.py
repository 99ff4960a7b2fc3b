"""Writing beneath a root: no symlink, '..' or mount below the destination leads outside it,
with openat2 and with the component-by-component walk the kit falls back to."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckptrescue.effects import beneath
from ckptrescue.errors import RefusedError


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "walk":
        monkeypatch.setattr(beneath, "has_openat2", lambda: False)
    elif not beneath.has_openat2():
        pytest.skip("this kernel has no openat2")
    return str(request.param)


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b"evidence")
    return outside


def test_symlinked_directory_inside_the_root_is_never_followed(tmp_path: Path,
                                                                resolver: str) -> None:
    outside = _outside(tmp_path)
    root = tmp_path / "to"
    root.mkdir()
    (root / "p").symlink_to(outside)
    with pytest.raises(RefusedError, match="symlink"):
        beneath.open_file(root, root / "p" / "ok.txt", "xb")
    with pytest.raises(RefusedError, match="symlink"):
        beneath.makedirs(root, root / "p" / "deeper")
    with pytest.raises(RefusedError):
        beneath.write_bytes(root, root / "p" / "ok.txt.restore.json", b"{}")
    assert sorted(os.listdir(outside)) == ["precious"]


def test_dotdot_and_absolute_names_are_refused(tmp_path: Path, resolver: str) -> None:
    outside = _outside(tmp_path)
    root = tmp_path / "to"
    for name in ("../outside/x", "a/../../outside/x", "a/b/../../../outside/precious"):
        with pytest.raises(RefusedError, match=r"'\.\.'"):
            beneath.open_file(root, root / name, "wb")
    with pytest.raises(RefusedError, match="not beneath"):
        beneath.open_file(root, outside / "x", "xb")
    with pytest.raises(RefusedError, match="NUL"):
        beneath.open_file(root, "a\x00b", "xb")
    assert (outside / "precious").read_bytes() == b"evidence"
    assert sorted(os.listdir(outside)) == ["precious"]


def test_a_symlink_at_the_name_itself_is_replaced_not_followed(tmp_path: Path,
                                                                resolver: str) -> None:
    outside = _outside(tmp_path)
    root = tmp_path / "to"
    root.mkdir()
    (root / "report.md").symlink_to(outside / "precious")
    with pytest.raises(RefusedError):
        beneath.open_file(root, root / "report.md", "wb")
    beneath.write_text(root, root / "report.md", "# report\n")
    assert not (root / "report.md").is_symlink()
    assert (root / "report.md").read_text() == "# report\n"
    assert (outside / "precious").read_bytes() == b"evidence"


def test_a_hard_link_at_the_name_is_replaced_not_written_through(tmp_path: Path,
                                                                  resolver: str) -> None:
    outside = _outside(tmp_path)
    root = tmp_path / "to"
    root.mkdir()
    os.link(outside / "precious", root / "out.json")
    with pytest.raises(RefusedError, match="hard links"):
        beneath.open_file(root, root / "out.json", "wb")
    beneath.write_bytes(root, root / "out.json", b"new")
    assert (root / "out.json").read_bytes() == b"new"
    assert (outside / "precious").read_bytes() == b"evidence"


def test_rename_and_link_stay_beneath(tmp_path: Path, resolver: str) -> None:
    outside = _outside(tmp_path)
    root = tmp_path / "to"
    with beneath.open_file(root, root / "a" / "b" / "f.partial", "xb") as fh:
        fh.write(b"data")
    beneath.rename(root, root / "a/b/f.partial", root / "a/b/f")
    beneath.link(root, root / "a/b/f", root / "c/f")
    assert (root / "c" / "f").read_bytes() == b"data"
    (root / "d").symlink_to(outside)
    with pytest.raises(RefusedError):
        beneath.rename(root, root / "a/b/f", root / "d/f")
    with pytest.raises(RefusedError):
        beneath.link(root, root / "a/b/f", root / "d/f")
    with pytest.raises(FileExistsError):
        beneath.rename(root, root / "a/b/f", root / "c/f", replace=False)
    assert beneath.lexists(root, root / "d")
    assert not beneath.lexists(root, root / "nope" / "x")
    beneath.chmod(root, root / "c/f", 0o444)
    assert (root / "c" / "f").stat().st_mode & 0o777 == 0o444
    assert sorted(os.listdir(outside)) == ["precious"]


@pytest.mark.privileged
def test_a_bind_mount_inside_the_root_is_not_crossed(tmp_path: Path, resolver: str) -> None:
    import subprocess  # the test makes its own mount, outside the kit

    outside = _outside(tmp_path)
    root = tmp_path / "to"
    (root / "m").mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(outside), str(root / "m")], check=True)
    (root / "f").write_bytes(b"mine")
    subprocess.run(["mount", "--bind", str(outside / "precious"), str(root / "f")], check=True)
    try:
        with pytest.raises(RefusedError, match=r"another filesystem|mount"):
            beneath.open_file(root, root / "m" / "new", "xb")
        with pytest.raises(RefusedError, match=r"another filesystem|mount"):
            beneath.open_file(root, root / "f", "wb")
    finally:
        subprocess.run(["umount", str(root / "m")], check=True)
        subprocess.run(["umount", str(root / "f")], check=True)
    assert (outside / "precious").read_bytes() == b"evidence"
    assert sorted(os.listdir(outside)) == ["precious"]


def test_a_report_replaces_a_symlink_planted_at_its_name(case, tmp_path: Path) -> None:
    from ckptrescue.report.render import write

    outside = _outside(tmp_path)
    out_dir = tmp_path / "reports"
    out_dir.mkdir()
    (out_dir / "report.md").symlink_to(outside / "precious")
    write(case, out_dir / "report.md", "md")
    assert not (out_dir / "report.md").is_symlink()
    assert (out_dir / "report.md").read_text().startswith("#")
    assert (outside / "precious").read_bytes() == b"evidence"


def test_a_device_node_or_a_fifo_at_the_name_is_never_renamed_over(tmp_path: Path,
                                                                   resolver: str) -> None:
    """A write or a rename onto a device node replaced the node itself (``report -o
    /dev/null`` as root replaced the machine's /dev/null with the report), onto a FIFO what
    another program reads: both are refused before anything is written."""
    root = tmp_path / "to"
    root.mkdir()
    os.mkfifo(root / "fifo")
    targets = [root / "fifo"]
    if os.geteuid() == 0:
        os.mknod(root / "null", 0o666 | 0o020000, os.makedev(1, 3))  # a char device, as root
        targets.append(root / "null")
    with beneath.open_file(root, root / "f.partial", "xb") as fh:
        fh.write(b"x")
    for target in targets:
        kind = target.lstat().st_mode
        with pytest.raises(RefusedError, match=r"a FIFO|a device node"):
            beneath.write_bytes(root, target, b"report")
        with pytest.raises(RefusedError, match=r"a FIFO|a device node"):
            beneath.rename(root, root / "f.partial", target)
        assert target.lstat().st_mode == kind
    assert sorted(os.listdir(root)) == sorted(["f.partial", *(t.name for t in targets)])


@pytest.mark.privileged
def test_report_to_dev_null_leaves_the_device_node(tmp_path: Path) -> None:
    """``report CASE -o /dev/null`` in a private mount namespace whose /dev is a fresh tmpfs
    (the machine's /dev is never at risk): the node is still the null device afterwards."""
    import subprocess
    import sys

    from ckptrescue.record.case import Case

    Case.create(tmp_path / "case", title="dev null")
    exe = str(Path(sys.executable).with_name("ckptrescue"))
    script = ("set -e; mount -t tmpfs none /dev; mknod -m 666 /dev/null c 1 3; "
              "mknod -m 666 /dev/urandom c 1 9; ln -s /proc/self/fd /dev/fd; "
              f"rc=0; {exe} report {tmp_path / 'case'} -o /dev/null --format md || rc=$?; "
              "echo rc=$rc; stat -c %F /dev/null")
    res = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                         capture_output=True, text=True, timeout=120)
    assert res.stdout.strip().splitlines()[-1] == "character special file", \
        res.stdout + res.stderr
    assert "rc=3" in res.stdout and "a device node" in res.stderr, res.stdout + res.stderr


@pytest.fixture(params=["renameat2", "link", "check"])
def noreplace(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The three ways a rename refuses an existing name: the kernel's RENAME_NOREPLACE, a hard
    link (a filesystem without the first), a check (a filesystem without either)."""
    if request.param != "renameat2":
        monkeypatch.setattr(beneath, "_libc", lambda: None)
    if request.param == "check":
        def no_links(*_a: object, **_k: object) -> None:
            raise PermissionError(1, "Operation not permitted")
        monkeypatch.setattr(beneath.os, "link", no_links)
    return str(request.param)


def test_a_name_taken_while_the_file_was_written_is_never_renamed_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, noreplace: str) -> None:
    """Another writer's file appears at the name after the check that it was free (the check
    is made to miss it here): the rename refuses it and leaves it as it is, and the new file
    keeps its temporary name."""
    root = tmp_path / "out"
    root.mkdir()
    (root / "f.partial").write_bytes(b"ours")
    (root / "f").write_bytes(b"the other writer's")
    real = beneath._lexists_at
    calls: list[str] = []

    def missed_once(dirfd: int, name: str) -> bool:
        calls.append(name)
        return False if len(calls) == 1 else real(dirfd, name)

    monkeypatch.setattr(beneath, "_lexists_at", missed_once)
    with pytest.raises(FileExistsError):
        beneath.rename(root, "f.partial", "f", replace=False)
    # refused by the rename itself; only a filesystem with neither way looks a second time
    assert calls == (["f", "f"] if noreplace == "check" else ["f"])
    assert (root / "f").read_bytes() == b"the other writer's"
    assert (root / "f.partial").read_bytes() == b"ours"
    monkeypatch.setattr(beneath, "_lexists_at", real)
    beneath.rename(root, "f.partial", "g", replace=False)  # a free name: renamed, no copy left
    assert sorted(os.listdir(root)) == ["f", "g"] and (root / "g").read_bytes() == b"ours"


def test_a_folder_is_renamed_to_a_free_name_and_refused_at_a_taken_one(
        tmp_path: Path, noreplace: str) -> None:
    root = tmp_path / "out"
    (root / "tmp").mkdir(parents=True)
    (root / "tmp" / "x").write_bytes(b"x")
    (root / "taken").mkdir()
    with pytest.raises(FileExistsError):
        beneath.rename(root, "tmp", "taken", replace=False)
    beneath.rename(root, "tmp", "final", replace=False)
    assert sorted(os.listdir(root)) == ["final", "taken"]
    assert (root / "final" / "x").read_bytes() == b"x"


def _folder_syncs(monkeypatch: pytest.MonkeyPatch, folder: Path, name: str, *,
                  fail: bool = False) -> list[bool]:
    """For each ``fsync`` of ``folder``: whether ``name`` was in it at that moment (``fail``:
    each one fails as a filesystem without directory fsync, or a dying disk, would)."""
    import errno
    import stat

    real = os.fsync
    seen: list[bool] = []

    def spy(fd: int) -> None:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode) and os.path.samestat(st, os.stat(folder)):
            seen.append(name in os.listdir(folder))
            if fail:
                raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return seen


@pytest.mark.parametrize("way", ["anonymous", "named", "write_bytes", "rename"])
def test_a_name_once_given_is_synced_in_its_folder(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   way: str) -> None:
    """The bytes are synced before the name is given; then the folder, so that the name
    outlives a power loss too (an anonymous file whose link never reached the disk is freed
    on the next mount: a salvaged file the case records would be gone)."""
    root = tmp_path / "out"
    (root / "d").mkdir(parents=True)
    seen = _folder_syncs(monkeypatch, root / "d", "f")
    made: list[int | None] = []
    real_anonymous = beneath._anonymous_file  # noqa: SLF001
    monkeypatch.setattr(beneath, "_anonymous_file",
                        (lambda *a: None) if way == "named"
                        else lambda *a: made.append(real_anonymous(*a)) or made[-1])
    if way == "write_bytes":
        beneath.write_bytes(root, "d/f", b"ours")
    elif way == "rename":
        (root / "tmp").write_bytes(b"ours")
        beneath.rename(root, "tmp", "d/f", replace=False)
    else:
        with beneath.creating(root, "d/f") as fh:
            fh.write(b"ours")
    assert (root / "d" / "f").read_bytes() == b"ours"
    assert True in seen  # synced with the name in it
    if way == "anonymous":
        assert made and made[0] is not None  # (not the named fallback after all)


def test_a_folder_made_on_the_way_is_synced_in_its_parent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file in a folder that did not exist: the folder's own name is synced in its parent
    too, or a power loss takes the folder and the file with it."""
    root = tmp_path / "out"
    root.mkdir()
    seen = _folder_syncs(monkeypatch, root, "new")
    with beneath.creating(root, "new/f") as fh:
        fh.write(b"ours")
    assert seen == [True] and (root / "new" / "f").read_bytes() == b"ours"


def test_a_rename_that_happened_is_never_reported_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the rename asks of its folders is asked before it: a folder that cannot be
    examined after the rename (a stale NFS handle) does not turn a placed file into an
    error (a restore would then remove nothing and refuse its own rerun)."""
    import errno

    root = tmp_path / "out"
    (root / "d").mkdir(parents=True)
    (root / "tmp").write_bytes(b"ours")
    real = os.fstat

    def stale_after_rename(fd: int) -> os.stat_result:
        if (root / "d" / "f").exists():
            raise OSError(errno.ESTALE, "Stale file handle")
        return real(fd)

    monkeypatch.setattr(os, "fstat", stale_after_rename)
    beneath.rename(root, "tmp", "d/f", replace=False)
    assert (root / "d" / "f").read_bytes() == b"ours"


def test_a_folder_that_cannot_be_synced_keeps_the_file_and_no_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The name is given and the bytes are synced: a folder sync that fails makes the name
    less durable, not the write wrong, so the file stays and the caller is not told it
    failed (a retry would find its own file and refuse it)."""
    root = tmp_path / "out"
    root.mkdir()
    seen = _folder_syncs(monkeypatch, root, "f", fail=True)
    with beneath.creating(root, "f") as fh:
        fh.write(b"ours")
    assert seen == [True] and (root / "f").read_bytes() == b"ours"
    assert os.listdir(root) == ["f"]


KILLED_WRITER = r"""
import os, signal, sys
from ckptrescue.effects import beneath
if sys.argv[2] == "named":
    beneath._anonymous_file = lambda *a: None
with beneath.creating(sys.argv[1], "out/model.bin") as fh:
    fh.write(b"x" * (1 << 20))
    fh.flush()
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("way", ["anonymous", "named"])
def test_a_writer_killed_mid_file_leaves_no_file(tmp_path: Path, way: str) -> None:
    """``kill -9`` during salvage or extract: no cleanup code runs. The anonymous file is freed
    by the kernel; the named temporary file of the fallback is what is left."""
    import subprocess
    import sys

    root = tmp_path / "dest"
    root.mkdir()
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(root), way], timeout=60)
    assert proc.returncode == -9
    left = os.listdir(root / "out")
    if way == "anonymous":
        assert left == []
    else:  # the fallback's one weakness, kept visible here
        assert len(left) == 1 and left[0].startswith(".model.bin.") and \
            left[0].endswith(".partial")
    with beneath.creating(root, "out/model.bin") as fh:  # the rerun
        fh.write(b"whole")
    assert (root / "out" / "model.bin").read_bytes() == b"whole"


@pytest.mark.parametrize("way", ["anonymous", "named"])
def test_a_created_file_never_replaces_one_made_while_it_was_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, way: str) -> None:
    if way == "named":
        monkeypatch.setattr(beneath, "_anonymous_file", lambda *a: None)
    root = tmp_path / "dest"
    with pytest.raises(FileExistsError) as caught, \
            beneath.creating(root, "model.bin", perms=0o600) as fh:
        fh.write(b"ours")
        (root / "model.bin").write_bytes(b"another writer's")
    assert caught.value.filename == str(root / "model.bin")
    assert os.listdir(root) == ["model.bin"]
    assert (root / "model.bin").read_bytes() == b"another writer's"
    with beneath.creating(root, "other.bin", perms=0o600) as fh:
        fh.write(b"ours")
    assert (root / "other.bin").read_bytes() == b"ours"
    assert (root / "other.bin").stat().st_mode & 0o777 == 0o600


UMASK_WRITER = r"""
import os, sys
from ckptrescue.effects import beneath
if sys.argv[2] == "named":
    beneath._anonymous_file = lambda *a: None
os.umask(0o077)
with beneath.creating(sys.argv[1], "model.bin") as fh:
    fh.write(b"x")
print(oct(os.stat(os.path.join(sys.argv[1], "model.bin")).st_mode & 0o777))
"""


@pytest.mark.parametrize("way", ["anonymous", "named"])
def test_a_created_file_has_the_mode_the_umask_allows(tmp_path: Path, way: str) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", UMASK_WRITER, str(tmp_path), way],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.strip() == "0o600"


def test_a_file_whose_link_through_proc_is_refused_is_copied_into_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A security module or a sandboxing kernel refuses the link through /proc after the
    bytes are written: they are not lost, they reach the name through a copy, and nothing else
    is left; a name taken meanwhile is still refused."""
    real = os.link

    def refuse_proc(src: str, *a: object, **k: object) -> None:
        if str(src).startswith("/proc/self/fd/"):
            raise PermissionError(1, "Operation not permitted")
        real(src, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(beneath.os, "link", refuse_proc)
    root = tmp_path / "dest"
    data = bytes(range(256)) * 9000  # more than one copy chunk
    with beneath.creating(root, "out/model.bin", perms=0o600) as fh:
        fh.write(data)
    assert (root / "out" / "model.bin").read_bytes() == data
    assert (root / "out" / "model.bin").stat().st_mode & 0o777 == 0o600
    assert os.listdir(root / "out") == ["model.bin"]
    with pytest.raises(FileExistsError) as caught, beneath.creating(root, "other.bin") as fh:
        fh.write(b"ours")
        (root / "other.bin").write_bytes(b"another writer's")
    assert caught.value.filename == str(root / "other.bin")
    assert (root / "other.bin").read_bytes() == b"another writer's"
    assert sorted(os.listdir(root)) == ["other.bin", "out"]


ACL_WRITER = r"""
import os, struct, sys
from ckptrescue.effects import beneath
folder = sys.argv[1]
entries = ((0x01, 6), (0x04, 6), (0x10, 6), (0x20, 4))  # user::rw- group::rw- mask::rw- other::r--
os.setxattr(folder, "system.posix_acl_default", struct.pack("<I", 2) + b"".join(
    struct.pack("<HHI", tag, perm, 0xFFFFFFFF) for tag, perm in entries))
os.umask(0o077)
os.close(os.open(os.path.join(folder, "named"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
with beneath.creating(folder, "created") as fh:
    fh.write(b"x")
print(*(oct(os.stat(os.path.join(folder, n)).st_mode & 0o777) for n in ("named", "created")))
"""


def test_a_folder_s_default_acl_gives_a_created_file_the_mode_a_named_one_gets(
        tmp_path: Path) -> None:
    """In a folder with a default ACL the kernel takes the mode from the ACL, never from the
    umask: the anonymous file is not narrowed to the umask there."""
    import subprocess
    import sys

    folder = tmp_path / "shared"
    folder.mkdir()
    proc = subprocess.run([sys.executable, "-c", ACL_WRITER, str(folder)],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 and "Operation not supported" in proc.stderr:
        pytest.skip("this filesystem has no POSIX ACLs")
    assert proc.returncode == 0, proc.stderr
    named, created = proc.stdout.split()
    assert created == named == "0o644"
