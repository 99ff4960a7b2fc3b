"""The processes of ``probe --jobs 2``: a real kill -9 of the command leaves no worker behind, and a
real Ctrl-C (SIGINT to the whole process group, as a terminal sends it) gives one line, exit 130,
no worker traceback, and no worker left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_helpers import still_running

from fixtures.families.deepspeed_synth import make_step

psutil = pytest.importorskip("psutil")
pytest.importorskip("torch")
EXE = str(Path(sys.executable).with_name("ckptrescue"))


@pytest.fixture(scope="module")
def many_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2048-rank DeepSpeed-layout step: its probe at --jobs 2 takes seconds (6 s here), so a
    signal sent once the workers run lands mid-way on a machine several times faster too (256
    ranks took 0.7 s in all, and a probe could finish before the Ctrl-C)."""
    return make_step(tmp_path_factory.mktemp("ranks") / "run", 2048, 1, numel=500)


def _start(step: Path, case: Path) -> tuple[subprocess.Popen[bytes], list[int]]:
    proc = subprocess.Popen([EXE, "probe", str(step), "--jobs", "2", "--case", str(case)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    workers: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            workers = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)
                       if "python" in " ".join(c.cmdline()).lower()]
        except psutil.Error:
            workers = []
        if len(workers) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None and len(workers) >= 2, "the probe ended before its workers ran"
    return proc, workers


def test_kill_9_of_the_probe_leaves_no_worker(tmp_path: Path, many_ranks: Path) -> None:
    case = tmp_path / "case"
    subprocess.run([EXE, "case", "new", str(case)], check=True, capture_output=True)
    proc, workers = _start(many_ranks, case)
    os.kill(proc.pid, signal.SIGKILL)  # the command only: its workers must follow
    proc.wait()
    try:
        assert still_running(workers) == []
    finally:
        for pid in workers:  # never leave them behind, even when the test fails
            if psutil.pid_exists(pid):
                os.kill(pid, signal.SIGKILL)
    # the case is not left locked by an orphan, and it verifies
    res = subprocess.run([EXE, "case", "verify", str(case)], capture_output=True, text=True,
                         env={**os.environ, "CKPTRESCUE_CASE_WAIT": "5"})
    assert res.returncode == 0, res.stdout + res.stderr


def test_ctrl_c_gives_one_line_and_exit_130(tmp_path: Path, many_ranks: Path) -> None:
    case = tmp_path / "case"
    subprocess.run([EXE, "case", "new", str(case)], check=True, capture_output=True)
    proc, workers = _start(many_ranks, case)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    try:
        code = proc.wait(timeout=60)
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        assert code == 130, err
        assert "Traceback" not in err and "KeyboardInterrupt" not in err \
            and "EOFError" not in err, err
        lines = [x for x in err.splitlines() if x.strip() and "rank files" not in x]
        assert len(lines) == 1 and "interrupted" in lines[0], err
        assert still_running(workers) == []
    finally:
        for pid in workers:
            if psutil.pid_exists(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
    res = subprocess.run([EXE, "case", "verify", str(case)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout
