"""--scheduler survives worker loss: real Dask processes are SIGKILLed while a build runs.

A worker killed under a nanny (restarted) or without one (gone for good): the build completes,
every file is yielded exactly once and the manifest equals a local ``--jobs 1`` build byte for
byte. Every worker gone, or the scheduler gone: a one-line error, exit 4, and the files finished so
far stay in OUT.partial.jsonl for the rerun, which resumes them.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ckptrescue.datasets import cluster, manifest
from ckptrescue.datasets.manifest import build_manifest, partial_path, sidecar_path
from ckptrescue.datasets.walk import FileEntry, walk
from ckptrescue.errors import RemoteError

distributed = pytest.importorskip("distributed")

FILES = 240
DASK = [sys.executable, "-m", "dask"]
# the knobs of the cluster run, small so that a few hundred files make ~120 tasks
FAST = {"MIN_BATCH_BYTES": 1, "MAX_BATCH_FILES": 2, "IN_FLIGHT_PER_THREAD": 2, "POLL_S": 0.1,
        "NO_WORKER_GRACE_S": 3.0, "CONNECT_TIMEOUT_S": 5.0}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """FILES files in 6 folders, 1-24 KiB each, bytes from a seeded integer generator."""
    root = tmp_path / "tree"
    for i in range(FILES):
        path = root / f"part-{i % 6}" / f"shard-{i:04d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(random.Random(i).randbytes(1024 * (1 + i % 24)))
    return root


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in FAST.items():
        monkeypatch.setattr(cluster, name, value)


@pytest.fixture
def yielded(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every name hash_many yields to build_manifest, in order (the real hash_many runs)."""
    names: list[bytes] = []
    real = manifest.hash_many

    def counting(*args: Any, **kwargs: Any) -> Iterable[Any]:
        for item in real(*args, **kwargs):
            names.append(item.rel)
            yield item

    monkeypatch.setattr(manifest, "hash_many", counting)
    return names


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _wait_until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class Build(threading.Thread):
    """build_manifest in a thread, its outcome kept."""

    def __init__(self, root: Path, out: Path, scheduler: str) -> None:
        super().__init__(daemon=True)
        self.args = (root, out, scheduler)
        self.result: manifest.ManifestResult | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        root, out, scheduler = self.args
        try:
            self.result = build_manifest(root, out, scheduler=scheduler)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc


def _kill_busy(client: Any, pids: dict[str, int], victim: dict[str, str]) -> None:
    """SIGKILL a worker that has a batch running or queued now (to be re-run elsewhere)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        busy = [w for w, keys in client.processing().items() if keys]
        if busy:
            os.kill(pids[busy[0]], signal.SIGKILL)
            victim["addr"] = busy[0]
            return


def _kill_during_build(root: Path, out: Path, address: str,
                       kill: Callable[[], None]) -> tuple[Build, int]:
    """Start a build, kill once some files are in the partial file; return it and that count."""
    build = Build(root, out, address)
    build.start()
    _wait_until(lambda: _lines(partial_path(out)) >= 20 or not build.is_alive(),
                "the partial file to grow")
    assert build.is_alive(), f"the build finished before the kill ({build.error!r})"
    kill()
    at_kill = _lines(partial_path(out))
    build.join(120)
    assert not build.is_alive(), "the build hangs after the kill"
    return build, at_kill


def _assert_same_as_local(root: Path, out: Path, tmp_path: Path, build: Build,
                          yielded: list[bytes]) -> None:
    assert build.error is None, repr(build.error)
    local = tmp_path / "local.sha256"
    build_manifest(root, local, jobs=1)
    assert out.read_bytes() == local.read_bytes()
    assert sidecar_path(out).read_bytes() == sidecar_path(local).read_bytes()
    assert build.result is not None and len(build.result.entries) == FILES
    # exactly once: nothing yielded twice by the cluster path, nothing missing
    remote = yielded[:len(yielded) - FILES]  # the local build above appended its own FILES
    assert len(remote) == FILES and set(Counter(remote).values()) == {1}
    assert not partial_path(out).exists()


# -- a LocalCluster whose nanny restarts the killed worker ---------------------------------------
def test_worker_killed_under_a_nanny_build_equals_local(tree: Path, tmp_path: Path, fast: None,
                                                        yielded: list[bytes]) -> None:
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None,
                                  memory_limit="1GiB") as lc, \
            distributed.Client(lc, set_as_default=False) as client:
        pids = client.run(os.getpid)
        victim: dict[str, str] = {}
        out = tmp_path / "remote.sha256"
        build, at_kill = _kill_during_build(tree, out, lc.scheduler_address,
                                            lambda: _kill_busy(client, pids, victim))
        assert at_kill < FILES and "addr" in victim, "no worker had a batch to lose"
        _assert_same_as_local(tree, out, tmp_path, build, yielded)
        # the nanny brought a new worker process up in place of the killed one
        _wait_until(lambda: len(client.scheduler_info()["workers"]) == 2, "the restarted worker")
        now = client.run(os.getpid)
        assert victim["addr"] not in now and pids[victim["addr"]] not in now.values()


# -- workers and scheduler as separate processes, no nanny: a killed worker stays dead -----------
@contextlib.contextmanager
def dask_processes(tmp_path: Path, workers: int) -> Iterator[tuple[str, subprocess.Popen[bytes],
                                                                   list[subprocess.Popen[bytes]]]]:
    """``dask scheduler`` and ``dask worker --no-nanny`` processes; all killed on the way out."""
    sched_file = tmp_path / "scheduler.json"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        sched = subprocess.Popen([*DASK, "scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--no-dashboard", "--scheduler-file", str(sched_file)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(sched)
        _wait_until(lambda: sched_file.exists() and sched_file.stat().st_size > 0,
                    "the scheduler file")
        import json

        address = json.loads(sched_file.read_text())["address"]
        pool = [subprocess.Popen([*DASK, "worker", address, "--no-nanny", "--nthreads", "1",
                                  "--memory-limit", "1GiB", "--no-dashboard"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for _ in range(workers)]
        procs.extend(pool)
        if workers:
            with distributed.Client(address, set_as_default=False) as client:
                client.wait_for_workers(workers, timeout=60)
        yield address, sched, pool
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)


def test_worker_killed_without_restart_build_equals_local(tree: Path, tmp_path: Path,
                                                          fast: None,
                                                          yielded: list[bytes]) -> None:
    with dask_processes(tmp_path, 2) as (address, _, pool), \
            distributed.Client(address, set_as_default=False) as client:
        pids = client.run(os.getpid)
        assert sorted(pids.values()) == sorted(p.pid for p in pool)
        victim: dict[str, str] = {}
        out = tmp_path / "remote.sha256"
        build, at_kill = _kill_during_build(tree, out, address,
                                            lambda: _kill_busy(client, pids, victim))
        assert at_kill < FILES and "addr" in victim, "no worker had a batch to lose"
        dead = next(p for p in pool if p.pid == pids[victim["addr"]])
        assert dead.wait(10) == -signal.SIGKILL
        _assert_same_as_local(tree, out, tmp_path, build, yielded)
        # nobody restarted it: one worker left
        assert list(client.scheduler_info()["workers"]) == [w for w in pids if w != victim["addr"]]


def _cli_build(tree: Path, out: Path, address: str) -> subprocess.Popen[str]:
    """``ckptrescue manifest build --scheduler`` in a child, with the FAST knobs."""
    knobs = "; ".join(f"C.{k} = {v!r}" for k, v in FAST.items())
    code = ("import sys; import ckptrescue.datasets.cluster as C; " + knobs + "\n"
            "sys.argv = ['ckptrescue', 'manifest', 'build', sys.argv[1], '-o', sys.argv[2],"
            " '--scheduler', sys.argv[3], '--no-progress']\n"
            "from ckptrescue.cli.process import main; main()\n")
    return subprocess.Popen([sys.executable, "-c", code, str(tree), str(out), address],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, CKPTRESCUE_DEBUG=""))


def _assert_one_line_error_and_resume(proc: subprocess.Popen[str], out: Path, tree: Path,
                                      tmp_path: Path, at_kill: int, message: str) -> None:
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 4, stderr
    assert "Traceback" not in stderr
    # one error line (and its hint): no log noise, no traceback
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines[0].startswith("ckptrescue: error: ") and message in lines[0], stderr
    assert all(line.strip().startswith("hint: ") for line in lines[1:]), stderr
    kept = _lines(partial_path(out))
    assert at_kill <= kept < FILES
    assert not out.exists()
    resumed = build_manifest(tree, out, jobs=1)
    assert resumed.resumed == kept
    build_manifest(tree, tmp_path / "local.sha256", jobs=1)
    assert out.read_bytes() == (tmp_path / "local.sha256").read_bytes()


def test_every_worker_gone_one_line_error_partial_kept(tree: Path, tmp_path: Path) -> None:
    with dask_processes(tmp_path, 2) as (address, _, pool):
        out = tmp_path / "remote.sha256"
        proc = _cli_build(tree, out, address)
        try:
            _wait_until(lambda: _lines(partial_path(out)) >= 20 or proc.poll() is not None,
                        "the partial file to grow")
            assert proc.poll() is None, proc.communicate()
            for worker in pool:
                worker.kill()
            at_kill = _lines(partial_path(out))
            _assert_one_line_error_and_resume(proc, out, tree, tmp_path, at_kill,
                                              "every Dask worker of")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def test_scheduler_gone_one_line_error_partial_kept(tree: Path, tmp_path: Path) -> None:
    with dask_processes(tmp_path, 2) as (address, sched, _):
        out = tmp_path / "remote.sha256"
        proc = _cli_build(tree, out, address)
        try:
            _wait_until(lambda: _lines(partial_path(out)) >= 20 or proc.poll() is not None,
                        "the partial file to grow")
            assert proc.poll() is None, proc.communicate()
            sched.kill()
            at_kill = _lines(partial_path(out))
            _assert_one_line_error_and_resume(proc, out, tree, tmp_path, at_kill,
                                              "lost the connection to the Dask scheduler")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def test_no_worker_at_all_is_a_one_line_error(tree: Path, tmp_path: Path, fast: None) -> None:
    with dask_processes(tmp_path, 0) as (address, _, _), \
            pytest.raises(RemoteError, match="has no workers"):
        build_manifest(tree, tmp_path / "m.sha256", scheduler=address)


def test_a_batch_that_kills_every_worker_it_meets_is_a_one_line_error(tree: Path, fast: None
                                                                      ) -> None:
    import dask

    (tree / "part-0" / "poison.bin").write_bytes(b"kills the worker that reads it")
    entries = walk(tree).files

    def hash_or_die(root: bytes, batch: list[FileEntry]) -> list[Any]:
        import os

        if any(e.rel.endswith(b"poison.bin") for e in batch):
            os._exit(1)  # what the OOM killer does to a worker
        from ckptrescue.datasets.manifest import hash_entries

        return hash_entries(root, batch)

    with dask.config.set({"distributed.scheduler.allowed-failures": 1}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     host="127.0.0.1", dashboard_address=None,
                                     memory_limit="1GiB") as lc:
        got: list[Any] = []
        with pytest.raises(RemoteError, match=r"from part-0/.* was on 2 Dask workers that all "
                                              r"died while running it"):
            for batch in cluster.map_batches(lc.scheduler_address, hash_or_die,
                                             os.fsencode(tree), entries):
                got.extend(batch)
        assert b"part-0/poison.bin" not in {e.rel for e in got}


def test_a_result_fetched_before_its_worker_died_is_kept(tmp_path: Path) -> None:
    """CI: every worker was killed while results were coming back; one batch's result had
    arrived whole, but its future read "lost" by the time the build looked at it, and the build
    stopped with "a Dask worker failed on the batch …: list: [ManifestEntry(…)]". An entry of
    as_completed is judged by what it holds: a result is kept, an error or a cancel is one."""
    from distributed import as_completed

    with dask_processes(tmp_path, 1) as (address, _, pool), \
            distributed.Client(address, set_as_default=False) as client:
        good = client.submit(list, range(3), pure=False)
        bad = client.submit(int, "seven", pure=False)
        entries = dict(as_completed([good, bad], loop=client.loop, with_results=True,
                                    raise_errors=False))
        pool[0].kill()
        _wait_until(lambda: good.status != "finished", "the scheduler to lose the result")
        assert cluster.batch_failure(entries[good]) is None
        assert entries[good] == [0, 1, 2]
        failure = cluster.batch_failure(entries[bad])
        assert isinstance(failure, ValueError) and "'seven'" in str(failure)
        gone = client.submit(list, range(4), pure=False)
        gone.cancel()
        (entry,) = dict(as_completed([gone], loop=client.loop, with_results=True,
                                     raise_errors=False)).values()
        assert type(cluster.batch_failure(entry)).__name__ in ("CancelledError",
                                                               "FutureCancelledError")
