"""The kit's scratch directories (``effects/scratch.py``): what a kit process killed with -9
during a load left under the temporary directory, the next process removes; a directory whose
owner still runs, one without an owner file and anything that is not the kit's directory stay.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckptrescue.effects.sandbox import STARTED

REPO = Path(__file__).resolve().parents[2]

LOAD = ("import sys; from ckptrescue.effects.sandbox import run_child; "
        "run_child('echo', {'action': sys.argv[1], 'seconds': 300}, timeout_s=600)")
HOLD = ("import time; from ckptrescue.effects import scratch; "
        "print(scratch.make('ckptrescue-eval-').path, flush=True); time.sleep(120)")


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(REPO), **extra}


def _wait_for(what, seconds: float = 60):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.mark.parametrize("mode", ["cold", "warm"])
def test_what_a_killed_process_left_the_next_one_removes(mode: str, tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD], env=_env(tmp), text=True,
                              stdout=subprocess.PIPE)
    try:
        held = Path(holder.stdout.readline().strip()) if holder.stdout else Path()
        assert held.is_dir() and (held / ".owner").is_file()
        foreign = tmp / "ckptrescue-sandbox-notours"  # no owner file: never judged
        foreign.mkdir()
        (tmp / "ckptrescue-tool-file").write_text("not a directory")
        loader = subprocess.Popen([sys.executable, "-c", LOAD, "sleep"],
                                  env=_env(tmp, CKPTRESCUE_SANDBOX=mode))
        prefix = "ckptrescue-sandbox-" if mode == "cold" else "ckptrescue-warm-"
        try:  # killed once the load runs (bubblewrap's own start is not the point here)
            left = _wait_for(lambda: [p for p in tmp.iterdir() if p.name.startswith(prefix)
                                      and p != foreign and (p / ".owner").exists()
                                      and any(p.rglob(STARTED))])
        finally:
            loader.send_signal(signal.SIGKILL)
            loader.wait()
        (stale,) = left
        if mode == "warm":  # the zygote empties its directory when its socket ends: the
            _wait_for(lambda: not stale.exists())  # next process has nothing to do
        else:
            time.sleep(0.5)
            assert stale.is_dir(), "a cold load's scratch directory outlived its process"
        done = subprocess.run([sys.executable, "-c", LOAD.replace("300", "0"), "echo"],
                              env=_env(tmp), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert not stale.exists()
        assert held.is_dir() and foreign.is_dir() and (tmp / "ckptrescue-tool-file").is_file()
    finally:
        holder.kill()
        holder.wait()


def test_a_directory_whose_lock_is_free_goes_and_one_held_stays(tmp_path: Path,
                                                                 monkeypatch) -> None:
    import fcntl
    import tempfile

    from ckptrescue.effects import scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    mine = scratch.make("ckptrescue-tool-")
    stale = tmp_path / "ckptrescue-eval-gone"
    stale.mkdir()
    (stale / ".owner").write_text("")
    (stale / "request.json").write_text("{}")
    held = tmp_path / "ckptrescue-warm-held"
    held.mkdir()
    (held / ".owner").write_text("")
    other = tmp_path / "else"
    other.mkdir()
    (other / ".owner").write_text("")
    with open(held / ".owner") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # another process's, as far as the sweep can tell
        removed = scratch.sweep(f"{tmp_path}/.")  # a spelling not swept yet
    assert removed == [f"{tmp_path}/./ckptrescue-eval-gone"]
    assert not stale.exists() and held.is_dir() and other.is_dir() and Path(mine.path).is_dir()
    assert scratch.sweep(f"{tmp_path}/.") == []  # once per process
    mine.remove()
    mine.remove()
    assert not Path(mine.path).exists()
    with pytest.raises(ValueError):
        scratch.make("elsewhere-")


def test_the_temporary_case_of_a_killed_command_goes_with_the_next_command(
        tmp_path: Path) -> None:
    """A command run without ``--case`` records into a temporary case, removed when it ends.
    Killed with -9 (here while it waits on an endpoint that never answers), it removes
    nothing: the next command that makes a temporary case removes it, and leaves none."""
    import socket

    (tmp_path / "local").mkdir()
    env = _env(tmp_path, AWS_ACCESS_KEY_ID="drill", AWS_SECRET_ACCESS_KEY="drill",
               AWS_EC2_METADATA_DISABLED="true")
    cli = [sys.executable, "-m", "ckptrescue", "s3", "verify", "s3://bucket/prefix/",
           str(tmp_path / "local"), "--endpoint-url"]
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        silent.settimeout(60)
        proc = subprocess.Popen([*cli, f"http://127.0.0.1:{silent.getsockname()[1]}"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            conn, _ = silent.accept()  # it asks; no answer comes
            conn.close()
            left = [p for p in tmp_path.glob("ckptrescue-*") if (p / "case").is_dir()]
            proc.kill()
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert len(left) == 1 and (left[0] / "case" / "audit.jsonl").is_file()
    refused = subprocess.run([*cli, "http://127.0.0.1:1"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 4, refused.stderr  # the endpoint refused: a one-line error
    assert "Traceback" not in refused.stderr
    assert not list(tmp_path.glob("ckptrescue-*"))
