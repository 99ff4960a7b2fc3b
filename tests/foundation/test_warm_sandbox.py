"""Warm loads (``effects/warm_sandbox.py``): a child forked from a zygote that imported torch
once gives the outcome a cold child gives, inside the same boundary, and every way the warm
machinery can fail ends in the cold child's outcome, never in a wrong one."""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ckptrescue.effects.sandbox import ChildOutcome, run_child
from ckptrescue.effects.warm_sandbox import MODE_ENV
from ckptrescue.record.case import Case

pytestmark = pytest.mark.needs_tool("bwrap")


@pytest.fixture(autouse=True)
def _no_zygote_of_another_test() -> Any:
    """Each test starts with no zygote in this process and leaves none: the test before it
    in this worker may have left an idle one, its directory under another temporary
    directory (what a full disk there would not reach)."""
    from ckptrescue.effects import warm_sandbox

    warm_sandbox.close_all()
    yield
    warm_sandbox.close_all()


def _runs(case: Case) -> list[dict[str, Any]]:
    return [r["details"] for r in case.records("sandbox.run")]


def _zygote_of_last_run(case: Case) -> int | None:
    warm = _runs(case)[-1].get("warm")
    return warm["zygote_pid"] if warm else None


def _comparable(out: ChildOutcome) -> tuple[Any, ...]:
    result = {k: v for k, v in out.result.items() if k != "echo"}
    return (out.status, out.signal_name, json.dumps(result, sort_keys=True),
            sorted(a["event"] for a in out.attempts))


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(os.fsencode(path.relative_to(root)))
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


# what a loader may meet: each request is run warm and cold, and must end the same way
REQUESTS = {
    "echo": {"action": "echo", "x": 1},
    "exception": {"action": "raise"},
    "abort": {"action": "abort"},
    "program": {"action": "system", "command": "true"},
    "program past the hook": {"action": "system", "command": "true", "layers": ["seccomp"]},
    "network": {"action": "connect", "port": 9},
    "network past the hook": {"action": "connect", "port": 9, "layers": ["seccomp"]},
    "root listing": {"action": "listdir", "path": "/"},
    "unrelated read": {"action": "read", "path": "/etc/hostname"},
    "host sysctl": {"action": "write", "path": "/proc/sys/kernel/hostname",
                    "layers": ["seccomp"]},
    "user namespace past hook and filter": {"action": "userns", "layers": []},
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_a_warm_child_ends_as_a_cold_child(name: str, case: Case, monkeypatch) -> None:
    warm = run_child("echo", REQUESTS[name], case=case, timeout_s=60)
    assert _zygote_of_last_run(case) is not None  # served warm
    monkeypatch.setenv(MODE_ENV, "cold")
    cold = run_child("echo", REQUESTS[name], case=case, timeout_s=60)
    assert _zygote_of_last_run(case) is None  # served cold
    assert _comparable(warm) == _comparable(cold), (warm, cold)
    if name == "exception":
        assert "ValueError: boom" in warm.stderr_tail and "ValueError: boom" in cold.stderr_tail


def test_a_warm_child_holds_no_capability_and_runs_filtered(case: Case) -> None:
    out = run_child("echo", {"action": "status"}, case=case, timeout_s=60)
    assert _zygote_of_last_run(case) is not None
    fields = dict(line.split(":", 1) for line in out.result["status"].splitlines() if ":" in line)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[cap].strip(), 16) == 0, (cap, fields[cap])
    assert fields["NoNewPrivs"].strip() == "1" and fields["Seccomp"].strip() == "2"


@pytest.mark.parametrize("path", ["/proc/1/root/etc/hostname", "/proc/1/cwd/zygote.log",
                                  "/proc/1/environ", "/proc/1/fd/0"])
def test_a_warm_child_cannot_reach_past_its_view(path: str, case: Case) -> None:
    """The zygote sees the whole host read-only and its own directory writable; the loader's
    pid 1 (its namespace's init) holds capabilities the loader lacks: nothing of either is
    reachable from the loader, even past hook and filter."""
    out = run_child("echo", {"action": "read", "path": path, "layers": []}, case=case,
                    timeout_s=60)
    assert _zygote_of_last_run(case) is not None
    assert out.status == "ok" and out.result["worked"] is False, out.result


def test_a_warm_load_is_the_cold_load_and_leaves_the_checkpoint_unchanged(
        case: Case, tmp_path: Path, monkeypatch) -> None:
    import torch

    evidence = tmp_path / "evidence"
    evidence.mkdir()
    # a hostile name: a newline and a byte that is not UTF-8
    ckpt = evidence / os.fsdecode(b"run\nckpt-\xff.pt")
    torch.save({"w": torch.arange(12, dtype=torch.int32).reshape(3, 4),
                "b": torch.full((3,), 7, dtype=torch.int16)}, ckpt)
    before = _tree_digest(evidence)
    request = {"path": str(ckpt), "loader": "torch", "files": []}
    first = run_child("torch_load", request, inputs=[str(ckpt)], case=case, timeout_s=120)
    zygote = _zygote_of_last_run(case)
    second = run_child("torch_load", request, inputs=[str(ckpt)], case=case, timeout_s=120)
    assert zygote is not None and _zygote_of_last_run(case) == zygote  # one zygote, reused
    monkeypatch.setenv(MODE_ENV, "cold")
    cold = run_child("torch_load", request, inputs=[str(ckpt)], case=case, timeout_s=120)
    assert first.status == second.status == cold.status == "ok", (first, cold)
    assert first.result == second.result == cold.result
    assert set(first.result["map"]) == {"w", "b"}
    assert _tree_digest(evidence) == before


def test_a_warm_child_cannot_write_what_it_loads(case: Case, tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "shard.bin").write_bytes(b"\x00" * 4096)
    before = _tree_digest(evidence)
    for target in (evidence / "shard.bin", evidence / "new-file"):
        out = run_child("echo", {"action": "write", "path": str(target), "layers": []},
                        inputs=[str(evidence)], case=case, timeout_s=60)
        assert _zygote_of_last_run(case) is not None
        assert out.result["worked"] is False and "Read-only file system" in out.result["error"]
    assert _tree_digest(evidence) == before


def test_nothing_a_load_started_outlives_it(case: Case) -> None:
    """Without hook and filter (the sandbox's own tests only), a child can start a program;
    when the child ends, the zygote kills it: the next child sees no process but bubblewrap's
    pid 1 (the zygote) and itself."""
    out = run_child("echo", {"action": "system", "command": "sleep 300 & sleep 300 &",
                             "layers": []}, case=case, timeout_s=60)
    assert out.status == "ok" and out.result["worked"] is True
    zygote = _zygote_of_last_run(case)
    after = run_child("echo", {"action": "listdir", "path": "/proc"}, case=case, timeout_s=60)
    assert _zygote_of_last_run(case) == zygote
    pids = [int(e) for e in after.result["entries"] if e.isdigit()]
    assert sorted(pids) == [1, 2], pids


def _ended(pid: int, seconds: float = 30) -> bool:
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([handle], [], [], seconds)[0])
    finally:
        os.close(handle)


@pytest.mark.parametrize("request_", [{"action": "sleep", "seconds": 60}, {"action": "abort"}],
                         ids=["hang", "crash"])
def test_a_zygote_is_retired_after_a_load_that_did_not_end_well(request_, case: Case) -> None:
    """A fork server's children share its memory layout: after a crash or a hang (what a
    payload probing the layout would cause) the zygote is ended and the next load gets a new
    one."""
    out = run_child("echo", request_, case=case, timeout_s=2)
    assert out.status in ("timeout", "crashed"), out
    zygote = _zygote_of_last_run(case)
    assert zygote is not None and _ended(zygote)
    out = run_child("echo", {"action": "echo"}, case=case, timeout_s=60)
    assert out.status == "ok" and _zygote_of_last_run(case) not in (None, zygote)


def test_a_load_cannot_change_the_next_one(case: Case) -> None:
    """Past hook and filter, a load lowers the limits of every process it can name, signals
    them, and leaves files in /dev, /dev/shm and /tmp and a System V segment: the next load,
    from the same zygote, meets none of it."""
    harm = ("prlimit --pid 1 --data=1000000 --nofile=24 --stack=262144; kill -INT 1; "
            "kill -TERM 1; touch /dev/shm/planted /dev/planted /tmp/planted; "
            "ipcmk -M 1000000")
    out = run_child("echo", {"action": "system", "command": harm, "layers": []}, case=case,
                    timeout_s=60)
    assert out.status == "ok", out
    zygote = _zygote_of_last_run(case)
    big = run_child("echo", {"action": "allocate", "mb": 300}, case=case, timeout_s=60)
    assert big.status == "ok" and _zygote_of_last_run(case) == zygote, big
    for path in ("/dev/shm", "/dev", "/tmp"):
        seen = run_child("echo", {"action": "listdir", "path": path}, case=case, timeout_s=60)
        assert "planted" not in seen.result["entries"], (path, seen.result)
    segments = run_child("echo", {"action": "read", "path": "/proc/sysvipc/shm"}, case=case,
                         timeout_s=60)
    assert segments.result["worked"] and len(segments.result["data"].splitlines()) == 1
    assert _zygote_of_last_run(case) == zygote


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_a_zygote_killed_between_loads_is_replaced(case: Case) -> None:
    run_child("echo", {"action": "echo"}, case=case, timeout_s=60)
    first = _zygote_of_last_run(case)
    assert first is not None
    handle = os.pidfd_open(first)
    try:
        _kill(first)
        assert select.select([handle], [], [], 30)[0]  # gone before the next load
    finally:
        os.close(handle)
    out = run_child("echo", {"action": "echo", "x": 2}, case=case, timeout_s=60)
    assert out.status == "ok" and out.result["echo"]["x"] == 2
    assert _zygote_of_last_run(case) not in (None, first)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except FileNotFoundError:  # it ended
        return []


@pytest.mark.parametrize("victim", ["zygote", "handler"])
def test_a_zygote_or_handler_killed_during_a_load(victim: str, case: Case) -> None:
    """kill -9 mid-load. Of the zygote: the handler it forked runs the load to its end and
    answers, and the next load gets a new zygote. Of the handler: the load is run again cold,
    and that run's outcome is the one reported (nothing is taken from the warm attempt)."""
    run_child("echo", {"action": "echo"}, case=case, timeout_s=60)
    zygote = _zygote_of_last_run(case)
    assert zygote is not None

    def kill() -> None:
        _kill(zygote if victim == "zygote" else _children(zygote)[0])

    timer = threading.Timer(0.5, kill)
    timer.start()
    try:
        out = run_child("echo", {"action": "sleep", "seconds": 2}, case=case, timeout_s=60)
    finally:
        timer.cancel()
    assert out.status == "ok", out
    if victim == "handler":
        assert _zygote_of_last_run(case) is None  # the outcome is the cold run's
    assert run_child("echo", {"action": "echo"}, case=case, timeout_s=60).status == "ok"
    if victim == "zygote":
        assert _zygote_of_last_run(case) not in (None, zygote)


def test_the_zygote_ends_with_the_process_that_started_it(tmp_path: Path) -> None:
    """The parent killed with -9 mid-load: its zygote, and the child it was running, end,
    and its directory under the temporary directory is gone."""
    script = (
        "import json, sys; from ckptrescue.effects.sandbox import run_child; "
        "from ckptrescue.record.case import Case; "
        "case = Case.create(sys.argv[1], title='t', examiner='pytest'); "
        "run_child('echo', {'action': 'echo'}, case=case, timeout_s=60); "
        "rec = [r['details'] for r in case.records('sandbox.run')][-1]; "
        "print(rec['warm']['zygote_pid'], flush=True); "
        "run_child('echo', {'action': 'sleep', 'seconds': 300}, case=case, timeout_s=600)")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "case")],
                            stdout=subprocess.PIPE, text=True, cwd=Path.cwd(),
                            env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        zygote = int(line)
        handle = os.pidfd_open(zygote)
        base = Path(os.readlink(f"/proc/{zygote}/cwd"))
        assert base.name.startswith("ckptrescue-warm-") and (base / "tmp").is_dir()
    finally:
        proc.kill()
        proc.wait()
    try:
        assert select.select([handle], [], [], 30)[0], "the zygote outlived its parent"
    finally:
        os.close(handle)
    assert not base.exists()


def test_a_forked_copy_of_the_parent_starts_its_own_zygote(case: Case, tmp_path: Path) -> None:
    run_child("echo", {"action": "echo"}, case=case, timeout_s=60)
    ours = _zygote_of_last_run(case)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked copy
        code = 1
        try:
            from ckptrescue.record.case import Case as ForkCase

            copy = ForkCase.create(tmp_path / "forked-case", title="f", examiner="pytest")
            out = run_child("echo", {"action": "echo"}, case=copy, timeout_s=60)
            os.write(write, json.dumps([out.status, _zygote_of_last_run(copy)]).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as fh:
        status, theirs = json.loads(fh.read() or '[null, null]')
    os.waitpid(pid, 0)
    assert status == "ok" and theirs not in (None, ours)
    assert run_child("echo", {"action": "echo"}, case=case, timeout_s=60).status == "ok"
    assert _zygote_of_last_run(case) == ours  # the parent's zygote was not disturbed


def test_a_copy_forked_while_another_thread_held_the_pool_loads(case: Case,
                                                                 tmp_path: Path) -> None:
    """A fork (a ``probe --jobs`` worker, a library's) taken while another thread held the
    pool's lock: the copy's own loads run (it once inherited the lock held, by a thread it
    does not have, and waited for it forever)."""
    from ckptrescue.effects import warm_sandbox

    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with warm_sandbox._POOL.lock:
            holding.set()
            done.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(30)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the forked copy
            code = 1
            try:
                signal.signal(signal.SIGALRM, signal.SIG_DFL)  # a copy that waits forever
                signal.alarm(30)  # is killed, and the test says so
                from ckptrescue.record.case import Case as ForkCase

                copy = ForkCase.create(tmp_path / "forked-case", title="f", examiner="pytest")
                out = run_child("echo", {"action": "echo", "n": 9}, case=copy, timeout_s=60)
                os.write(write, json.dumps([out.status, out.result.get("echo", {}).get("n"),
                                            _zygote_of_last_run(copy)]).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read) as fh:
            answer = fh.read()
        _, status = os.waitpid(pid, 0)
    finally:
        done.set()
        holder.join()
    assert os.waitstatus_to_exitcode(status) == 0 and answer, status
    out_status, n, zygote = json.loads(answer)
    assert out_status == "ok" and n == 9 and zygote is not None


def test_a_caller_environment_or_a_non_warm_child_runs_cold(case: Case) -> None:
    out = run_child("echo", {"action": "echo"}, case=case, timeout_s=60,
                    env_extra={"EXTRA": "1"})
    assert out.status == "ok" and _zygote_of_last_run(case) is None


def test_a_loader_holds_no_descriptor_of_the_zygote_or_the_parent(case: Case) -> None:
    """Past hook and filter, a program started by the loader inherits what the loader holds:
    nothing but its standard streams (no socket to the parent, no status pipe, no descriptor
    of a file to load)."""
    # no pipeline: its pipe would be the shell's own for a moment
    check = ("ls -l /proc/$$/fd > /tmp/fds; cat /tmp/fds >&2; "
             "grep -qE 'socket:|pipe:|[.]pt$' /tmp/fds && exit 9; exit 0")
    out = run_child("echo", {"action": "system", "command": check, "layers": []}, case=case,
                    timeout_s=60)
    assert _zygote_of_last_run(case) is not None
    assert out.status == "ok" and out.result["status"] == 0, out.stderr_tail


_SCAN = ("exec python3 -c \"import os, re, sys\n"
         "pid, found = os.getppid(), set()\n"
         "for line in open(f'/proc/{pid}/maps'):\n"
         "    span, perms = line.split()[:2]\n"
         "    if 'r' not in perms: continue\n"
         "    a, b = (int(x, 16) for x in span.split('-'))\n"
         "    try:\n"
         "        with open(f'/proc/{pid}/mem', 'rb') as m:\n"
         "            m.seek(a); data = m.read(b - a)\n"
         "    except (OSError, ValueError, OverflowError): continue\n"
         "    found.update(re.findall(rb'WARM-MARK-[A-Z]+-7', data))\n"
         # the markers are spelt in pieces here: this command is in the loader's memory too
         "this, earlier = (f'WARM-MARK-{w}-7'.encode() for w in ('TH' 'IS', 'EARL' 'IER'))\n"
         "sys.exit((this in found) + 2 * (earlier in found))\"")


def test_a_loader_finds_no_earlier_request_in_its_memory(case: Case, tmp_path: Path) -> None:
    """The zygote never reads a job (a one-shot fork of it does): what an earlier load was
    asked, and which file it loaded, is not in a later loader's memory. The later loader's own
    request is (the scan works)."""
    earlier = tmp_path / "WARM-MARK-EARLIER-7.pt"
    earlier.write_bytes(b"x")
    run_child("echo", {"action": "echo", "note": "WARM-MARK-EARLIER-7"}, inputs=[str(earlier)],
              case=case, timeout_s=60)
    zygote = _zygote_of_last_run(case)
    out = run_child("echo", {"action": "system", "command": _SCAN, "layers": [],
                             "note": "WARM-MARK-THIS-7"}, case=case, timeout_s=120)
    assert _zygote_of_last_run(case) == zygote is not None
    assert out.status == "ok" and os.waitstatus_to_exitcode(out.result["status"]) == 1, \
        out.result


def test_a_zygote_ends_with_the_step_that_started_it(tmp_path: Path, case: Case) -> None:
    """A zygote's mount namespace holds every mount that existed when it started: after a
    step that loaded warm, none runs (a later umount or losetup -d finds nothing of ours)."""
    import torch
    from cli_helpers import invoke

    from ckptrescue.effects import warm_sandbox

    ckpt = tmp_path / "ckpt.pt"
    torch.save({"w": torch.arange(8, dtype=torch.int32)}, ckpt)
    res = invoke("probe", str(ckpt), "--load", "--case", str(case.root))
    assert res.returncode == 0, res.stderr
    assert _zygote_of_last_run(Case.open(case.root)) is not None
    assert warm_sandbox.running() == 0


def _read_on_a_fresh_tmpfs(where: Path, case: Case) -> tuple[ChildOutcome, int | None]:
    """Mount a tmpfs at ``where``, load a file on it warm, unmount it (even on failure)."""
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], check=True)
    try:
        (where / "f").write_bytes(where.name.encode())
        out = run_child("echo", {"action": "read", "path": str(where / "f")},
                        inputs=[str(where / "f")], case=case, timeout_s=60)
        return out, _zygote_of_last_run(case)
    finally:
        subprocess.run(["umount", str(where)], check=True)


@pytest.mark.privileged
def test_a_zygote_holds_no_mount(case: Case, tmp_path: Path) -> None:
    """A zygote shares the host's mount namespace: a filesystem mounted when it started and
    unmounted later is gone for it too (a copy of the namespace kept the drill's XFS, and with
    it the loop device, busy for the zygote's whole life), and one mounted later is loadable."""
    out, zygote = _read_on_a_fresh_tmpfs(tmp_path / "first", case)
    assert zygote is not None and out.result["data"] == "first"
    assert os.readlink(f"/proc/{zygote}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
    assert str(tmp_path / "first") not in Path(f"/proc/{zygote}/mountinfo").read_text()
    out, again = _read_on_a_fresh_tmpfs(tmp_path / "later", case)
    assert again == zygote and out.result["data"] == "later"


def test_two_loads_at_once_each_get_their_own_answer(case: Case, tmp_path: Path) -> None:
    """Two threads load at once, again and again: each gets its own result (a second zygote,
    or a cold load), never the other's. A zygote busy in one thread, with an answer that thread
    had not read yet, once read as closed to the other, which closed it under the first."""
    results: dict[tuple[int, int], ChildOutcome] = {}

    def load(n: int) -> None:
        for i in range(6):
            results[n, i] = run_child("echo", {"action": "sleep", "seconds": 0.05, "n": n},
                                      case=case, timeout_s=60)

    threads = [threading.Thread(target=load, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 12
    for (n, _), out in results.items():
        assert out.status == "ok" and out.result["echo"]["n"] == n, out
    if (os.cpu_count() or 1) >= 2:  # room for a zygote each: a zygote closed under a load
        # would have made that load run again cold
        assert ["warm" in r for r in _runs(case)] == [True] * 12


def test_a_step_that_ends_does_not_end_another_steps_load(case: Case) -> None:
    """``close_all`` (the end of one engine step) while another thread loads: that load ends
    well, warm, and its zygote ends after it."""
    from ckptrescue.effects import warm_sandbox

    run_child("echo", {"action": "sleep", "seconds": 0}, case=case, timeout_s=60)  # started
    zygote = _zygote_of_last_run(case)
    assert zygote is not None
    results: list[ChildOutcome] = []
    loading = threading.Thread(target=lambda: results.append(run_child(
        "echo", {"action": "sleep", "seconds": 3, "n": 7}, case=case, timeout_s=60)))
    loading.start()
    deadline = time.monotonic() + 30
    while not any(_children(c) for c in _children(zygote)):  # the load's fork runs
        assert time.monotonic() < deadline and loading.is_alive()
        time.sleep(0.02)
    warm_sandbox.close_all()
    assert warm_sandbox.running() == 1  # still loading
    loading.join()
    assert results and results[0].status == "ok" and results[0].result["echo"]["n"] == 7
    assert _zygote_of_last_run(case) == zygote
    assert warm_sandbox.running() == 0 and _ended(zygote)


def _fill(where: Path) -> Path:
    filler = where / "filler"
    with filler.open("wb", buffering=0) as fh, \
            pytest.raises(OSError, match="No space left on device"):
        while True:
            fh.write(b"\0" * 65536)
    return filler


@pytest.mark.privileged
def test_a_full_temporary_directory_runs_nothing_and_says_where(case: Case, tmp_path: Path,
                                                                 monkeypatch) -> None:
    """The disk under the temporary directory fills between two loads: the second is not run,
    warm or cold (the reason names the directory and the error), and leaves nothing there; with
    room again the next load runs in the same zygote. ``probe --load`` keeps its static
    verdict and says why the load did not run (LD006), never a traceback."""
    import tempfile

    import torch
    from cli_helpers import invoke

    from ckptrescue.effects import warm_sandbox
    from fixtures.storage import small_tmpfs

    ckpt = tmp_path / "ckpt.pt"
    torch.save({"w": torch.arange(8, dtype=torch.int32)}, ckpt)
    before = hashlib.sha256(ckpt.read_bytes()).hexdigest()
    with small_tmpfs("1m") as mnt:
        monkeypatch.setattr(tempfile, "tempdir", str(mnt))
        try:
            assert run_child("echo", {"action": "echo"}, case=case, timeout_s=60).status == "ok"
            zygote = _zygote_of_last_run(case)
            assert zygote is not None
            filler = _fill(mnt)
            out = run_child("echo", {"action": "echo", "n": 2}, case=case, timeout_s=60)
            assert out.status == "sandbox-unavailable", out
            assert f"under {mnt} could not be written (No space left on device)" in out.reason
            (base,) = [p for p in mnt.iterdir() if p.name.startswith("ckptrescue-warm-")]
            assert sorted(p.name for p in base.iterdir()) == [".owner", "root", "tmp", "zygote.log"]
            filler.unlink()
            out = run_child("echo", {"action": "echo", "n": 3}, case=case, timeout_s=60)
            assert out.status == "ok" and out.result["echo"]["n"] == 3, out
            assert _zygote_of_last_run(case) == zygote
            _fill(mnt)
            res = invoke("probe", str(ckpt), "--load", "--case", str(case.root))
        finally:
            warm_sandbox.close_all()
        assert sorted(p.name for p in mnt.iterdir()) == ["filler"]
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert res.stdout.startswith("INTACT") and "[LD006] torch load not run: the sandbox's " \
        f"scratch directory under {mnt} could not be written (No space left on device)" \
        in res.stdout, res.stdout
    assert hashlib.sha256(ckpt.read_bytes()).hexdigest() == before


def test_a_zygote_that_cannot_start_says_why_and_leaves_nothing(case: Case, monkeypatch) -> None:
    """A zygote whose imports fail: the load runs cold, the kind stays cold in this process
    with the zygote's own last words as the reason, and its directory is gone (the zygote
    once emptied it, its log too, before the interpreter wrote why it ended)."""
    from ckptrescue.effects import warm_sandbox

    real = warm_sandbox.zygote_argv
    bases: list[str] = []

    def failing(unshare: str, base: str, module: str, fd: int, **kw: str) -> list[str]:
        bases.append(base)
        return real(unshare, base, "ckptrescue.sandbox_children.no_such_child", fd, **kw)

    monkeypatch.setattr(warm_sandbox, "zygote_argv", failing)
    monkeypatch.setattr(warm_sandbox._POOL, "unavailable", {})  # the worker's others keep theirs
    out = run_child("echo", {"action": "echo", "n": 5}, case=case, timeout_s=60)
    assert out.status == "ok" and out.result["echo"]["n"] == 5, out
    assert _zygote_of_last_run(case) is None  # it ran cold
    why = next(v for k, v in warm_sandbox.unavailable().items() if k.startswith("echo ("))
    assert "No module named 'ckptrescue.sandbox_children.no_such_child'" in why, why
    assert len(bases) == 1
    assert not os.path.exists(bases[0])
