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


def test_nested_blocks_replace_the_inner_file_first(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A manifest's sidecar is renamed before the manifest (an audit joins a sidecar row to a
    manifest line only when their SHA-256 agree)."""
    import os

    renamed: list[str] = []
    real_replace = os.replace

    def replace(src: str, dst: str) -> None:
        renamed.append(Path(dst).name)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with replacing(tmp_path / "m.sha256") as text, replacing(tmp_path / "m.sha256.jsonl") as side:
        text.write(b"text\n")
        side.write(b"{}\n")
    assert renamed == ["m.sha256.jsonl", "m.sha256"]


def test_every_path_is_checked_before_anything_is_written(tmp_path: Path) -> None:
    """The outer path cannot take a file (a folder is there): refused before the inner file is
    written, so neither changes."""
    outer = tmp_path / "out"
    outer.mkdir()
    inner = tmp_path / "out.jsonl"
    inner.write_bytes(b"old\n")
    with pytest.raises(IsADirectoryError) as err, replacing(outer) as o, \
            replacing(inner) as i:
        o.write(b"text\n")
        i.write(b"{}\n")
    assert err.value.filename == str(outer)
    assert inner.read_bytes() == b"old\n" and outer.is_dir() and temps(tmp_path) == []


def test_a_device_a_pipe_or_a_link_is_never_replaced_through(tmp_path: Path) -> None:
    """-o /dev/null as root once replaced the machine's /dev/null with a regular file (the
    rename): a device or a pipe at the path is refused before anything is written. A symbolic
    link at the path is replaced itself, never written through."""
    import os

    from ckptrescue.errors import RefusedError

    with pytest.raises(RefusedError, match=r"^/dev/null: a device node; the kit reads and"):
        write_atomic("/dev/null", b"x")
    assert Path("/dev/null").is_char_device()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(RefusedError, match="a FIFO"):
        write_atomic(fifo, b"x")
    assert fifo.is_fifo()
    target = tmp_path / "evidence.bin"
    target.write_bytes(b"evidence\n")
    link = tmp_path / "out.json"
    link.symlink_to(target)
    write_atomic(link, b"{}\n")
    assert target.read_bytes() == b"evidence\n"
    assert not link.is_symlink() and link.read_bytes() == b"{}\n"


def test_an_error_names_the_path_asked_for_not_the_temp_file(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    with pytest.raises(NotADirectoryError) as err:
        write_atomic(a_file / "p.json", b"{}")
    assert err.value.filename == str(a_file / "p.json") and err.value.filename2 is None
    with pytest.raises(FileNotFoundError) as err2:
        write_atomic(tmp_path / "no-folder" / "p.json", b"{}")
    assert err2.value.filename == str(tmp_path / "no-folder" / "p.json")


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
    assert res.stderr.strip() == (f"ckptrescue: error: {out}: Is a directory; -o names the "
                                  "manifest file to write (out.jsonl, out.partial.jsonl and "
                                  "out.build.sqlite go beside it)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "out"]


def test_a_manifest_whose_sidecar_cannot_be_placed_is_refused_before_hashing(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a")
    (tmp_path / "m.sha256.jsonl").mkdir()  # where the sidecar must go
    res = invoke("manifest", "build", str(data), "-o", str(tmp_path / "m.sha256"),
                 "--no-progress")
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip() == (
        f"ckptrescue: error: {tmp_path / 'm.sha256.jsonl'}: Is a directory; -o names the "
        "manifest file to write (m.sha256.jsonl, m.sha256.partial.jsonl and "
        "m.sha256.build.sqlite go beside it)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "m.sha256.jsonl"]


def test_manifest_build_never_replaces_a_device(tmp_path: Path) -> None:
    """-o /dev/null: refused in one line before anything is made (the rename at the end once
    replaced the device node with the manifest, as root)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a")
    res = invoke("manifest", "build", str(data), "-o", "/dev/null", "--no-progress")
    assert res.returncode == 3, res.stderr  # the kit's refusal, as beneath's and the guard's
    assert res.stderr.startswith("ckptrescue: error: /dev/null: a device node; "), res.stderr
    assert Path("/dev/null").is_char_device() and not Path("/dev/null.jsonl").exists()


def test_os_error_lines() -> None:
    """What ``errors.os_error_line`` says: the path(s) and the reason; the reason alone for a
    system call's error with no path; the type too for a library's own (it has no errno)."""
    import errno
    import gzip
    import os

    from ckptrescue.errors import os_error_line

    assert os_error_line(OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), "/x/f/p.json")) \
        == "/x/f/p.json: Not a directory"
    assert os_error_line(OSError(errno.EISDIR, "Is a directory", "a", None, "b")) \
        == "a -> b: Is a directory"
    assert os_error_line(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))) \
        == "No space left on device"
    assert os_error_line(gzip.BadGzipFile("Not a gzipped file (b'ab')")) \
        == "BadGzipFile: Not a gzipped file (b'ab')"


def test_a_fifo_at_the_partial_files_name_is_refused_not_waited_on(tmp_path: Path) -> None:
    """The partial file (the resume's record) is opened for appending: a FIFO there blocked
    the build for good; it is refused before anything starts."""
    import os

    from cli_helpers import run_cli

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a")
    os.mkfifo(tmp_path / "m.sha256.partial.jsonl")
    res = run_cli("manifest", "build", str(data), "-o", str(tmp_path / "m.sha256"),
                  "--no-progress", timeout=60)
    assert res.returncode == 3, res.stderr
    assert res.stderr.startswith(
        f"ckptrescue: error: {tmp_path / 'm.sha256.partial.jsonl'}: a FIFO; "), res.stderr


def test_an_own_file_opened_to_write_over_a_fifo_or_a_socket_is_the_kit_s_refusal(
        tmp_path: Path) -> None:
    """Opened write-only without a reader, a FIFO answers ENXIO at the open (before the
    descriptor can be proven regular), as a socket does: still the kit's refusal naming what
    is there (exit 3), never a bare 'No such device or address'."""
    import os
    import socket

    from ckptrescue.effects.files import open_own_file
    from ckptrescue.errors import RefusedError

    os.mkfifo(tmp_path / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    try:
        for name, what in (("fifo", "a FIFO"), ("sock", "a socket")):
            with pytest.raises(RefusedError, match=f"{name}: {what}"):
                open_own_file(tmp_path / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    finally:
        sock.close()


def test_a_link_at_the_partial_files_name_is_never_followed(tmp_path: Path) -> None:
    """The partial file is appended to, and emptied when nothing in it can be resumed: a link
    planted there made the build, as root, empty the file it pointed to and fill it with hash
    lines. It is refused; and the file is opened without following one (O_NOFOLLOW)."""
    from ckptrescue.datasets.manifest import _open_partial
    from ckptrescue.errors import RefusedError

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a")
    victim = tmp_path / "victim"
    victim.write_text("precious line\n")
    (tmp_path / "m.sha256.partial.jsonl").symlink_to(victim)
    res = invoke("manifest", "build", str(data), "-o", str(tmp_path / "m.sha256"),
                 "--no-progress")
    assert res.returncode == 3, res.stderr
    assert "a symbolic link where the build keeps its own file" in res.stderr
    assert victim.read_text() == "precious line\n"
    with pytest.raises(RefusedError, match="a symbolic link"):  # the open itself (O_NOFOLLOW),
        _open_partial(tmp_path / "m.sha256.partial.jsonl")  # whatever a check before it saw
    assert victim.read_text() == "precious line\n"


def test_report_to_a_relative_path_lands_where_it_says(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """-o r2/report.md wrote r2/r2/report.md (the relative OUT read again under its own folder)
    and printed r2/report.md; the checks looked at the one, the write went to the other."""
    from ckptrescue.record.case import Case

    Case.create(tmp_path / "case", title="relative")
    (tmp_path / "r2").mkdir()
    monkeypatch.chdir(tmp_path)
    res = invoke("report", str(tmp_path / "case"), "--format", "md", "-o", "r2/report.md")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "r2" / "report.md").read_text().startswith("# Incident report")
    assert not (tmp_path / "r2" / "r2").exists()
    assert res.stdout.strip() == str(tmp_path / "r2" / "report.md")


def test_manifest_update_checks_the_prev_pair_before_hashing(tmp_path: Path) -> None:
    """manifest update keeps the old pair as MANIFEST.prev and .prev.jsonl: a FIFO there was
    renamed over, and a folder failed only after hashing, naming a temp file."""
    import os

    from ckptrescue.datasets.manifest import build_manifest

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a")
    manifest = tmp_path / "m.sha256"
    build_manifest(data, manifest)
    (data / "b.bin").write_bytes(b"b")
    os.mkfifo(tmp_path / "m.sha256.prev")
    res = invoke("manifest", "update", str(data), str(manifest), "--no-progress")
    assert res.returncode == 3, res.stderr
    assert res.stderr.startswith(f"ckptrescue: error: {tmp_path / 'm.sha256.prev'}: a FIFO")
    assert (tmp_path / "m.sha256.prev").is_fifo()
    os.unlink(tmp_path / "m.sha256.prev")
    (tmp_path / "m.sha256.prev.jsonl").mkdir()
    res = invoke("manifest", "update", str(data), str(manifest), "--no-progress")
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(
        f"ckptrescue: error: {tmp_path / 'm.sha256.prev.jsonl'}: Is a directory; manifest "
        "update replaces"), res.stderr
    assert "b.bin" not in manifest.read_text() and temps(tmp_path) == []


def test_a_profile_onto_a_fifo_is_refused_before_the_work(tmp_path: Path) -> None:
    """dataset profile -o FIFO (or /dev/null) ran the whole profile, then failed at the write
    with exit 4: the kit's writers refuse a device node, a FIFO or a socket up front."""
    import os

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.jsonl").write_text('{"text": "a"}\n')
    os.mkfifo(tmp_path / "p.json")
    res = invoke("dataset", "profile", str(data), "-o", str(tmp_path / "p.json"))
    assert res.returncode == 3, res.stderr
    assert res.stderr.strip() == (
        f"ckptrescue: error: {tmp_path / 'p.json'}: a FIFO; the kit reads and writes only "
        "regular files (it never opens a device node or a FIFO, and never renames over one)")
    assert res.stdout == "" and (tmp_path / "p.json").is_fifo()


def test_manifest_diff_checks_both_outputs_as_the_other_writers(tmp_path: Path) -> None:
    """OUT and OUT.changes.jsonl: a FIFO at the second was found only at its rename (after
    the comparison); the same refusal and exit as every writer now, before the work."""
    import os

    from ckptrescue.datasets.manifest import build_manifest

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a")
    build_manifest(data, tmp_path / "old.sha256")
    os.mkfifo(tmp_path / "d.sha256.changes.jsonl")
    res = invoke("manifest", "diff", str(tmp_path / "old.sha256"), str(tmp_path / "old.sha256"),
                 "-o", str(tmp_path / "d.sha256"))
    assert res.returncode == 3, res.stderr
    assert res.stderr.startswith(f"ckptrescue: error: {tmp_path / 'd.sha256.changes.jsonl'}: "
                                 "a FIFO"), res.stderr


@pytest.mark.parametrize("name", ["m.sha256.build.sqlite", "m.sha256.audit.sqlite"])
def test_a_link_at_a_scratch_or_state_database_is_never_followed(tmp_path: Path,
                                                                   name: str) -> None:
    """The build's scratch database and the audit's state sit beside the manifest and are
    emptied or rewritten: a link planted there made the kit, as root, overwrite the file it
    pointed to with SQLite pages; a FIFO there was deleted. Both are refused, and the
    victim and the node stay."""
    import os

    from ckptrescue.datasets.manifest import build_manifest

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a")
    manifest = tmp_path / "m.sha256"
    if name.endswith(".audit.sqlite"):
        build_manifest(data, manifest)
        argv = ["manifest", "audit", str(data), str(manifest)]
    else:
        argv = ["manifest", "build", str(data), "-o", str(manifest), "--no-progress"]
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / name).symlink_to(victim)
    res = invoke(*argv)
    assert res.returncode in (2, 3), res.stderr
    assert "a symbolic link" in res.stderr and victim.read_text() == "precious\n", res.stderr
    (tmp_path / name).unlink()
    os.mkfifo(tmp_path / name)
    res = invoke(*argv)
    assert res.returncode in (2, 3), res.stderr
    assert "a FIFO" in res.stderr and (tmp_path / name).is_fifo(), res.stderr


@pytest.mark.privileged
def test_a_build_resumes_without_proc(tmp_path: Path) -> None:
    """The resume reads the partial file through the descriptor the build opened, not through
    /proc/self/fd (which a chroot or a sandbox without /proc lacks): run where /proc is an
    empty tmpfs, it takes over every entry."""
    import shutil
    import subprocess
    import sys

    from ckptrescue.datasets.manifest import build_manifest

    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        (data / f"f{i}.bin").write_bytes(bytes([i]) * 4096)
    build_manifest(data, tmp_path / "m.sha256")
    shutil.copy(tmp_path / "m.sha256.jsonl", tmp_path / "m2.sha256.partial.jsonl")
    code = ("import sys\n"
            "from ckptrescue.datasets.manifest import build_manifest\n"
            "print(build_manifest(sys.argv[1], sys.argv[2], jobs=1).resumed)\n")
    res = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                          'mount -t tmpfs none /proc && exec "$0" -c "$1" "$2" "$3"',
                          sys.executable, code, str(data), str(tmp_path / "m2.sha256")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["3"], res.stdout + res.stderr


def test_the_image_sidecar_is_never_read_or_written_through_a_link(tmp_path: Path) -> None:
    """The imaging sidecar in the destination (which a rerun reads): a link planted at its
    name was written through (the kit's own write; the guard judged ddrescue's), and a FIFO
    there hung the rerun. Both are refused; the sidecar is written atomically."""
    import json
    import os

    from ckptrescue.errors import RefusedError
    from ckptrescue.storage.imaging import _sidecar_check

    facts = {"size": 4096, "sector_size": 512}
    outside = tmp_path / "outside.json"
    sidecar = tmp_path / "dest" / "src.sidecar.json"
    sidecar.parent.mkdir()
    sidecar.symlink_to(outside)
    with pytest.raises(RefusedError, match="a symbolic link"):
        _sidecar_check(sidecar, facts, tmp_path / "dest" / "src.img",
                       tmp_path / "dest" / "src.mapfile")
    assert not outside.exists()
    sidecar.unlink()
    os.mkfifo(sidecar)
    with pytest.raises(RefusedError, match="a FIFO"):
        _sidecar_check(sidecar, facts, tmp_path / "dest" / "src.img",
                       tmp_path / "dest" / "src.mapfile")
    sidecar.unlink()
    assert _sidecar_check(sidecar, facts, tmp_path / "dest" / "src.img",
                          tmp_path / "dest" / "src.mapfile") is False
    assert json.loads(sidecar.read_text()) == facts and not sidecar.is_symlink()


def test_a_link_at_the_watch_state_is_never_followed(tmp_path: Path) -> None:
    """--state names a SQLite file the watch writes on every pass: a link there was followed
    by SQLite (an empty target became the watch's database); it is refused like the build's
    own files, and a file that is no watch state is refused in one line, not rewritten."""
    from ckptrescue.datasets.watch.state import WatchState
    from ckptrescue.errors import RefusedError, UsageError

    victim = tmp_path / "victim"
    victim.write_bytes(b"")
    (tmp_path / "state.sqlite").symlink_to(victim)
    with pytest.raises(RefusedError, match="a symbolic link"):
        WatchState(tmp_path / "state.sqlite", "/data")
    assert victim.read_bytes() == b""
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database, but kept\n" * 100)
    with pytest.raises(UsageError, match="not a watch state"):
        WatchState(notes, "/data")
    assert notes.read_text() == "not a database, but kept\n" * 100
    state = WatchState(tmp_path / "ok.sqlite", "/data")
    state.close()
    WatchState(tmp_path / "ok.sqlite", "/data").close()


def test_the_tuis_recent_list_is_never_written_through_a_link(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The TUI's list of recent cases (XDG_STATE_HOME) was written through a link at its
    temp name. A list kept as a link (a dotfile manager) is read, and left alone: never
    written through, never replaced by a list of one case."""
    import json

    from ckptrescue.record.case import Case
    from ckptrescue.tui import recent

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    Case.create(tmp_path / "old", title="old")
    kept = tmp_path / "dotfiles" / "recent-cases.json"
    kept.parent.mkdir()
    kept.write_text(json.dumps([str(tmp_path / "old")]))
    target = recent.state_file()
    target.parent.mkdir(parents=True)
    target.symlink_to(kept)
    target.with_suffix(".tmp").symlink_to(tmp_path / "victim")
    Case.create(tmp_path / "case", title="recent")
    recent.remember(tmp_path / "case")
    assert target.is_symlink() and json.loads(kept.read_text()) == [str(tmp_path / "old")]
    assert not (tmp_path / "victim").exists()
    assert [c.path for c in recent.recent_cases()] == [tmp_path / "old"]
    target.unlink()
    recent.remember(tmp_path / "case")
    assert not target.is_symlink() and str(tmp_path / "case") in target.read_text()


def test_the_start_screen_never_waits_on_a_fifo(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A FIFO at the recent list's name, or at a case.json the start screen lists, hung the
    TUI's start: both are passed over."""
    import os
    import threading

    from ckptrescue.tui import recent

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    recent.state_file().parent.mkdir(parents=True)
    os.mkfifo(recent.state_file())
    (tmp_path / "cases" / "c1").mkdir(parents=True)
    os.mkfifo(tmp_path / "cases" / "c1" / "case.json")
    found: list[object] = []
    worker = threading.Thread(target=lambda: found.append(recent.recent_cases(tmp_path / "cases")),
                              daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "the start screen waited on a FIFO"
    assert found == [[]]


def test_the_imaging_mapfile_is_never_read_from_a_fifo(tmp_path: Path) -> None:
    import os

    from ckptrescue.errors import RefusedError
    from ckptrescue.storage.imaging import _read_own

    os.mkfifo(tmp_path / "src.map")
    with pytest.raises(RefusedError, match="a FIFO"):
        _read_own(tmp_path / "src.map")


def test_another_programs_sqlite_is_no_watch_state(tmp_path: Path) -> None:
    """A SQLite database whose meta table is not the watch's surfaced as a traceback
    (OperationalError); it is one line, and the database is not used."""
    import sqlite3

    from ckptrescue.datasets.watch.state import WatchState
    from ckptrescue.errors import UsageError

    other = tmp_path / "app.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE meta (name TEXT)")
    with pytest.raises(UsageError, match="not a watch state"):
        WatchState(other, "/data")
    with sqlite3.connect(other) as db:  # refused untouched: not given a files table first
        assert {r[0] for r in db.execute("SELECT name FROM sqlite_master")} == {"meta"}
    only_files = tmp_path / "files.sqlite"  # a common table name, other columns: not adopted
    with sqlite3.connect(only_files) as db:
        db.execute("CREATE TABLE files (id INTEGER, name TEXT)")
    with pytest.raises(UsageError, match="not a watch state"):
        WatchState(only_files, "/data")
    with sqlite3.connect(only_files) as db:
        assert {r[0] for r in db.execute("SELECT name FROM sqlite_master")} == {"files"}
    app = tmp_path / "app2.sqlite"  # any program's database: never given the watch's tables
    with sqlite3.connect(app) as db:
        db.execute("CREATE TABLE users (id INTEGER)")
    with pytest.raises(UsageError, match="not a watch state"):
        WatchState(app, "/data")
    with sqlite3.connect(app) as db:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
    assert names == {"users"}


def test_two_writers_of_one_pair_never_interleave_their_renames(tmp_path: Path) -> None:
    # each writer's renames run under an exclusive lock on the folder: while another holds
    # it (here: the test, as the other writer would), no file of the pair is replaced
    import fcntl
    import os
    import threading

    from ckptrescue.record.atomic import replacing_all

    first, second = tmp_path / "d.sha256", tmp_path / "d.sha256.changes.jsonl"
    first.write_bytes(b"old diff\n")
    second.write_bytes(b"old changes\n")
    dfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(dfd, fcntl.LOCK_EX)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with replacing_all(second, first) as (side, text):
                side.write(b"new changes\n")
                text.write(b"new diff\n")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        writer.join(0.5)
        assert writer.is_alive()  # written whole, waiting to rename
        assert (first.read_bytes(), second.read_bytes()) == (b"old diff\n", b"old changes\n")
    finally:
        fcntl.flock(dfd, fcntl.LOCK_UN)
        os.close(dfd)
        writer.join(10)
    assert errors == []
    assert (first.read_bytes(), second.read_bytes()) == (b"new diff\n", b"new changes\n")
