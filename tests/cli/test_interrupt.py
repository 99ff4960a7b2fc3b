"""Ctrl-C tells the truth (#30), with a real SIGINT to the console script:

* a playbook interrupted while its image is mounted says so, names the mount and the command
  that releases it (which then works), and the evidence hashes the same;
* a drill interrupted while it builds removes what it built, so the same command runs again;
* a manifest build without a case says where its finished files are, never "in the case".
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cli_helpers import EXE, run_cli  # noqa: E402


def start(*args: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([EXE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, cwd=cwd,
                            start_new_session=True)


def interrupt_when(proc: subprocess.Popen[str], ready: Callable[[], bool],
                   timeout: float = 300) -> tuple[int, str, str]:
    """Ctrl-C (SIGINT to the process, as a terminal sends it) once ``ready()``."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "never got ready"
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


SLOW_AFTER_MOUNT = """\
schema: 1
name: mount-then-wait
parameters:
  - {name: target, type: image}
steps:
  - id: mount
    action: mount
    with: {target: $target}
  - id: wait
    action: exec
    with: {argv: [sleep, "60"]}
  - id: release
    action: umount
    with: {mountpoint: "${mount.mountpoint}"}
"""


@pytest.mark.privileged
@pytest.mark.needs_tool("mkfs.ext4")
def test_an_interrupted_playbook_names_what_it_left_mounted(tmp_path: Path) -> None:
    from fixtures.storage import make_fs, sha256

    image = make_fs(tmp_path / "evidence.img", "ext4")
    before = sha256(image)
    book = tmp_path / "mount-then-wait.yaml"
    book.write_text(SLOW_AFTER_MOUNT)
    case = tmp_path / "case"
    mountpoint = case / "work" / "mnt-mount"
    proc = start("playbook", "run", str(book), "--case", str(case), "-p", f"target={image}")
    try:
        code, _out, err = interrupt_when(
            proc, lambda: (case / "audit.jsonl").exists()
            and b'"step":"wait"' in (case / "audit.jsonl").read_bytes())
        assert code == 130, err
        assert f"still mounted (read-only) by this case: {mountpoint}" in err, err
        assert "partial results are kept" not in err
        assert os.path.ismount(mountpoint)
        release = f"ckptrescue umount {mountpoint} --case {case}"
        assert release in err
        done = run_cli(*release.split()[1:])
        assert done.returncode == 0, done.stderr
        assert not os.path.ismount(mountpoint)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if os.path.ismount(mountpoint):
            subprocess.run(["umount", str(mountpoint)], check=False)
        out = subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True)
        for line in out.stdout.splitlines():
            subprocess.run(["losetup", "-d", line.split(":", 1)[0]], check=False)
    assert sha256(image) == before


def tf_writers(out: Path) -> list[int]:
    """The pids of the drill's TensorFlow children writing into ``out``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"ckptrescue.drill.tfrun" in argv and any(str(out).encode() in a for a in argv):
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_an_interrupted_drill_leaves_nothing_that_blocks_the_rerun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "drill"
    # interrupted while the torch run trains, the TensorFlow child writing beside it
    proc = start("drill", str(out))
    code, _stdout, err = interrupt_when(proc, lambda: (out / "staging").is_dir())
    try:
        assert code == 130, err
        assert "the half-built drill" in err and "run the same command again" in err, err
        assert "in the case" not in err
        assert not tf_writers(out), "the TensorFlow child outlived the interrupted drill"
        assert not out.exists() or not any(out.iterdir())
        again = run_cli("drill", str(out), "--no-s3", "--no-tf", timeout=600)
        assert again.returncode == 0, again.stderr
        assert "next: " in again.stdout and (out / "params.json").is_file()
    finally:
        run_cli("drill", str(out), "--stop")


@pytest.mark.slow
def test_a_killed_drill_takes_its_tensorflow_child_with_it(tmp_path: Path) -> None:
    """kill -9 of the drill while its TensorFlow child imports: the child is killed with it
    (it would otherwise run on for seconds and write into the folder the responder empties)."""
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    from ckptrescue.drill.build import TF_PENDING

    out = tmp_path / "drill"
    proc = start("drill", str(out), "--no-s3")
    try:
        deadline = time.monotonic() + 300
        while not tf_writers(out):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no TensorFlow child while the drill builds"
            time.sleep(0.05)
        assert not (out / TF_PENDING).exists(), "TensorFlow started saving before the kill"
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while tf_writers(out):
        assert time.monotonic() < deadline, "the TensorFlow child outlived the killed drill"
        time.sleep(0.1)
    assert not (out / TF_PENDING).exists(), "the orphaned child went on writing"


def test_a_build_that_fails_stops_its_tensorflow_child_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller that goes on after the drill failed (the TUI, a notebook) is not left with the
    TensorFlow child running on into the half-built folder."""
    pytest.importorskip("tensorflow")
    from ckptrescue.drill import build, trainrun

    out = tmp_path / "drill"
    seen: list[int] = []

    def failing_run(*_args: object, **_kwargs: object) -> None:
        seen.extend(tf_writers(out))
        raise RuntimeError("the torch run failed")

    monkeypatch.setattr(trainrun, "write_run", failing_run)
    with pytest.raises(RuntimeError, match="the torch run failed"):
        build.build(out, s3=False)
    assert seen, "no TensorFlow child was running beside the torch run"
    assert not tf_writers(out)


@pytest.mark.slow
def test_a_second_drill_into_the_same_folder_at_once_is_refused(tmp_path: Path) -> None:
    """Two drills started into one folder: the second is refused in one line the moment the
    first has made the folder (it used to pass the emptiness check while the first imported
    torch, and the two wrote over each other), and the first builds as if alone."""
    pytest.importorskip("torch")
    out = tmp_path / "drill"
    first = start("drill", str(out), "--no-s3", "--no-tf")
    try:
        deadline = time.monotonic() + 120
        while not out.is_dir():
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first drill never made its folder"
            time.sleep(0.01)
        second = run_cli("drill", str(out), "--no-s3", "--no-tf", timeout=600)
        assert second.returncode == 2, second.stderr
        assert second.stderr.count("ckptrescue:") == 1 and "Traceback" not in second.stderr
        assert str(out) in second.stderr, second.stderr
        _out, err = first.communicate(timeout=600)
        assert first.returncode == 0, err
        assert (out / "params.json").is_file() and not (out / "staging").exists()
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
        run_cli("drill", str(out), "--stop")  # its image destination in RAM (/dev/shm)


def test_an_interrupted_manifest_build_without_a_case_says_where_its_files_are(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        with open(data / f"big-{i}.bin", "wb") as fh:  # sparse: hashing takes a while
            fh.truncate(4 << 30)
    manifest = tmp_path / "data.sha256"
    proc = start("manifest", "build", str(data), "-o", str(manifest), "--no-progress")
    partial = Path(f"{manifest}.partial.jsonl")
    code, _out, err = interrupt_when(proc, partial.exists)
    assert code == 130, err
    assert "in the case" not in err and "kept in" in err and ".partial" in err, err
    assert err.count("ckptrescue:") == 1, err  # one line, said once
    partial = err.split("kept in ", 1)[1].split(": run", 1)[0]
    assert Path(partial).is_file(), "the message names a file that is not there"


def test_a_command_that_keeps_nothing_says_only_interrupted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cli_helpers import invoke

    from ckptrescue.record.case import Case

    def ctrl_c(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Case, "open", ctrl_c)
    res = invoke("case", "show", str(tmp_path))
    assert res.returncode == 130
    assert res.stderr.strip() == "ckptrescue: interrupted", res.stderr


def test_ctrl_c_while_the_program_starts_is_one_line_not_a_traceback() -> None:
    """The console script imports every command module before main() runs; a Ctrl-C then
    ends it with one line and 130 (the handler cli/__init__ installs for the program)."""
    code = ("import sys; sys.argv = ['ckptrescue']; import ckptrescue.cli, os, signal, time; "
            "os.kill(os.getpid(), signal.SIGINT); time.sleep(30)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=dict(os.environ))
    assert res.returncode == 130 and res.stderr.strip() == "ckptrescue: interrupted", res.stderr
    # and once main runs, Ctrl-C is Python's again, a KeyboardInterrupt the commands handle
    # themselves (counted as it arrives: cli/lost_interrupt)
    code = ("import sys, time; sys.argv = ['ckptrescue', '--version']; import signal; "
            "from ckptrescue.cli import lost_interrupt; "
            "from ckptrescue.cli.main import run; run(['--version'])\n"
            "try:\n    signal.raise_signal(signal.SIGINT); time.sleep(30); print('not raised')\n"
            "except KeyboardInterrupt:\n    print('KeyboardInterrupt', lost_interrupt.arrived())")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=dict(os.environ))
    assert res.stdout.strip().splitlines()[-1] == "KeyboardInterrupt 1", res.stdout + res.stderr
