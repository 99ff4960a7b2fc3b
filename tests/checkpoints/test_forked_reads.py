"""Reading on forked processes gives exactly what one thread gives, and loses nothing when a
child fails, is killed, reports nonsense, meets an EIO, or outlives its parent.

File bytes come from numpy's seeded integer generator (float values are integers times powers
of two: exact on any CPU). ``PROCESS_MIN`` and the segment size are lowered so that a few MiB
go through the process path, cut into segments that different processes scan.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ckptrescue.checkpoints.formats import forked_reads, numeric, streaming, zipwalk

MiB = 1 << 20
OFFSET = 4160  # ranges start 64-byte aligned, not page aligned, as in a torch zip


def _payload(seed: int) -> bytes:
    """Six 3 MiB float32 tensors of different kinds, then 2 MiB of float16 and 4 KiB more."""
    rng = np.random.default_rng(seed)
    n = 3 * MiB // 4
    trained = (rng.integers(-1024, 1024, size=(4, n), dtype=np.int32).sum(axis=0)
               .astype(np.float32) * np.float32(2.0 ** -16))
    poisoned = trained.copy()
    poisoned[[5, 70_000, 500_001]] = np.nan
    poisoned[[9, 600_000]] = np.inf
    torn = trained.copy()
    torn[300_000:300_000 + 3 * 1024] = 0  # whole 4 KiB pages of zeros, mid-tensor
    flipped = trained.copy()
    flipped.view(np.uint32)[123_457] ^= 1 << 30  # one exponent bit: an outlier
    integer = rng.integers(-4096, 4096, size=n, dtype=np.int32).astype(np.float32)
    tiny = (rng.integers(-(1 << 20), 1 << 20, size=n, dtype=np.int32).astype(np.float64)
            * 2.0 ** -146).astype(np.float32)
    tiny[::97] = 0
    half = (rng.integers(-2048, 2048, size=MiB, dtype=np.int16).astype(np.float16)
            * np.float16(2.0 ** -12))
    tail = rng.integers(-5, 5, size=1024, dtype=np.int32).astype(np.float32)
    return b"".join(a.tobytes() for a in (trained, poisoned, torn, flipped, integer, tiny,
                                          half, tail))


LAYOUT = [("float32", 3 * MiB)] * 6 + [("float16", 2 * MiB), ("float32", 4096)]


@pytest.fixture
def evidence(tmp_path: Path) -> Path:
    path = tmp_path / "tensors.bin"
    path.write_bytes(b"\x07" * OFFSET + _payload(11))
    return path


@pytest.fixture
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forked_reads, "PROCESS_MIN", 4 * MiB)
    monkeypatch.setattr(streaming, "SEGMENT", zipwalk.CHUNK)  # 3 MiB: 4 segments
    monkeypatch.delenv("CKPTRESCUE_SCAN_PROCESSES", raising=False)


def _ranges(make: object = None, *, checksum: str = "crc32") -> list[streaming.ByteRange]:
    out, pos = [], OFFSET
    for dtype, size in LAYOUT:
        def scan(start: int, length: int, dtype: str = dtype) -> object:
            return numeric.StorageScan(dtype, start=start, length=length,
                                       names=["layer.weight", "exp_avg_sq"])
        out.append(streaming.ByteRange(pos, size, make_scan=make or scan,  # type: ignore[arg-type]
                                       itemsize=4 if dtype == "float32" else 2,
                                       checksum=checksum))
        pos += size
    return out


def _results(ranges: list[streaming.ByteRange]) -> list[tuple[int, int, dict]]:
    out = []
    for r in ranges:
        summary = r.scan.finish()
        summary = summary if isinstance(summary, dict) else dataclasses.asdict(summary)
        out.append((r.crc, r.got, summary))
    return out


def _reference(path: Path, **kw: object) -> list[tuple[int, int, dict]]:
    with path.open("rb") as fh:
        ranges = _ranges(**kw)  # type: ignore[arg-type]
        streaming.read_ranges(fh, ranges, threads=1)
    return _results(ranges)


def _pids(log: Path) -> set[int]:
    return {int(x) for x in log.read_text().split()} if log.exists() else set()


def _logging_maker(log: Path, parent: int, *, child_action: object = None,
                   parent_delay: float = 0.0) -> object:
    """A scan maker that notes which process made each scan (one line per scan). With
    ``parent_delay``, the parent rests at its first part (the empty warm-up read before the fork
    is not one): the children take the tasks meanwhile."""
    made: dict[int, int] = {}
    rested: list[bool] = []

    def make(start: int, length: int) -> numeric.StorageScan:
        pid = os.getpid()
        with log.open("a") as fh:
            fh.write(f"{pid}\n")
        made[pid] = made.get(pid, 0) + 1
        if pid != parent and child_action is not None:
            child_action(made[pid])  # type: ignore[operator]
        if pid == parent and length and parent_delay and not rested:
            rested.append(True)
            # under load a child can take longer than the delay to start at all (a fork of a
            # large test process, no free core): the rest counts from when one has begun
            deadline = time.monotonic() + 60
            while not _pids(log) - {parent} and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(parent_delay)
        dtype = next(d for (d, _s), r in zip(LAYOUT, _offsets(), strict=True)
                     if r <= start < r + _s)
        return numeric.StorageScan(dtype, start=start, length=length,
                                   names=["layer.weight", "exp_avg_sq"])
    return make


def _offsets() -> list[int]:
    out, pos = [], OFFSET
    for _d, size in LAYOUT:
        out.append(pos)
        pos += size
    return out


def _gone(pid: int) -> bool:
    """True when ``pid`` has exited (no such process, or a zombie nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_processes_give_what_one_thread_gives(evidence, small_thresholds, tmp_path):
    want = _reference(evidence)
    codes = {s.code for (_c, _g, summ), (dtype, _n) in zip(want, LAYOUT, strict=True)
             for s in numeric.judge(numeric.NumericSummary(**{**summ, "dtype": dtype}),
                                    ["layer.weight"])}
    assert {"NM001", "NM002", "NM003"} <= codes  # the fixture has something to find
    log = tmp_path / "pids.log"
    parent = os.getpid()
    with evidence.open("rb") as fh:
        ranges = _ranges(_logging_maker(log, parent, parent_delay=0.2))
        assert forked_reads.wanted(fh, [(r, s, n) for r in ranges for s, n in r.cuts()], 2)
        streaming.read_ranges(fh, ranges, threads=2)
    assert _results(ranges) == want
    children = _pids(log) - {parent}
    assert children, "no child process scanned anything"
    assert all(_reaped(pid) for pid in children)


def test_a_forked_read_unfreezes_only_what_it_froze(evidence, small_thresholds, tmp_path):
    """Before its fork the read freezes the heap (no collection in the parent then copies the
    pages a child shares), and unfreezes it once the children are done. What its caller had
    frozen (the CLI's start-up, a test worker's imports) stays frozen: an unfreeze gives back
    every frozen object, and each later full collection walked them all again."""
    import gc

    def forked_read(log: Path) -> None:
        with evidence.open("rb") as fh:
            ranges = _ranges(_logging_maker(log, os.getpid(), parent_delay=0.05))
            streaming.read_ranges(fh, ranges, threads=2)
        assert _pids(log) - {os.getpid()}, "no child process scanned anything"

    gc.freeze()
    forked_read(tmp_path / "a.log")
    assert gc.get_freeze_count() > 0  # (an unfreeze leaves none; some frozen ones were freed)
    gc.unfreeze()
    try:
        forked_read(tmp_path / "b.log")
        assert gc.get_freeze_count() == 0  # nothing frozen before: nothing left frozen
    finally:
        gc.freeze()


def test_crc32c_ranges_give_what_one_thread_gives(evidence, small_thresholds):
    want = _reference(evidence, checksum="crc32c")
    with evidence.open("rb") as fh:
        ranges = _ranges(checksum="crc32c")
        streaming.read_ranges(fh, ranges, threads=2)
    assert _results(ranges) == want
    from ckptrescue.checkpoints.formats.crc32c import crc32c

    data = evidence.read_bytes()
    assert [r[0] for r in want][:2] == [crc32c(data[o:o + n]) for o, (_d, n) in
                                        zip(_offsets()[:2], LAYOUT[:2], strict=True)]


def test_the_warm_up_read_loads_the_crc32c_the_children_use(tmp_path):
    """read_parts reads each part's first segment for 0 bytes before it forks, so that no child
    imports anything (an import in a forked child can wait forever on a lock another thread of
    the parent held at the fork): the CRC32C implementation, loaded on its first use, is loaded
    by that empty read too."""
    path = tmp_path / "f"
    path.write_bytes(b"x" * 64)
    code = (
        "import sys\n"
        "from ckptrescue.checkpoints.formats import streaming\n"
        f"fh = open({str(path)!r}, 'rb')\n"
        "rng = streaming.ByteRange(0, 64, checksum='crc32c')\n"
        "before = 'google_crc32c' in sys.modules\n"
        "streaming._scan_part(fh, rng, 0, 0, 1 << 20)\n"
        "print(before, 'google_crc32c' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.split() == ["False", "True"], done.stdout + done.stderr


def test_a_killed_child_loses_nothing(evidence, small_thresholds, tmp_path):
    def die(count: int) -> None:
        if count == 2:
            os.kill(os.getpid(), signal.SIGKILL)

    want = _reference(evidence)
    log = tmp_path / "pids.log"
    parent = os.getpid()
    with evidence.open("rb") as fh:
        ranges = _ranges(_logging_maker(log, parent, child_action=die, parent_delay=0.2))
        streaming.read_ranges(fh, ranges, threads=2)
    assert _results(ranges) == want
    children = _pids(log) - {parent}
    assert children and all(_reaped(pid) for pid in children)


def test_a_scan_a_child_cannot_carry_is_read_again(evidence, small_thresholds, tmp_path):
    class Opaque:  # no wire(): its state cannot leave the child
        def __init__(self, inner: numeric.StorageScan) -> None:
            self.inner = inner

        def feed(self, offset: int, data: bytes) -> None:
            self.inner.feed(offset, data)

        def merge(self, later: Opaque) -> None:
            self.inner.merge(later.inner)

        def finish(self) -> numeric.NumericSummary:
            return self.inner.finish()

    log = tmp_path / "pids.log"
    parent = os.getpid()
    base = _logging_maker(log, parent, parent_delay=0.2)
    want = _reference(evidence)
    with evidence.open("rb") as fh:
        ranges = _ranges(lambda s, n: Opaque(base(s, n)))  # type: ignore[arg-type, operator]
        streaming.read_ranges(fh, ranges, threads=2)
    assert _results(ranges) == want
    assert _pids(log) - {parent}  # a child did take work, and its scans were redone here


def test_malformed_reports_take_nothing():
    def make(start: int, length: int) -> numeric.StorageScan:
        return numeric.StorageScan("float32", start=start, length=length)

    rng = streaming.ByteRange(0, 8 * MiB, make_scan=make, itemsize=4)
    plain = streaming.ByteRange(8 * MiB, 8 * MiB)
    parts = [(rng, 0, 4 * MiB), (rng, 4 * MiB, 4 * MiB), (plain, 8 * MiB, 8 * MiB)]
    good = make(0, 4 * MiB)
    good.feed(0, np.arange(1024, dtype=np.float32).tobytes())
    state = good.wire()
    half = numeric.StorageScan("float16", start=0, length=4 * MiB).wire()
    for data in (b"", b"\x80garbage", b'{"a": 1}', b"[[0, 1, 2]]",
                 json.dumps([[0, "crc", 4, state]]).encode(),
                 json.dumps([[0, 1, 4 * MiB + 1, state]]).encode(),  # more than the part
                 json.dumps([[7, 1, 4, state]]).encode(),  # no such part
                 json.dumps([[2, 1, 4, state]]).encode(),  # a scan for a range without one
                 json.dumps([[0, 1, 4, None]]).encode(),  # no scan for a range with one
                 json.dumps([[0, 1, 4, half]]).encode(),  # another dtype's state
                 json.dumps([[0, 1, 4, {**state, "top": [["x", 1, 2]]}]]).encode(),
                 json.dumps([[0, 1, 4, {**state, "summary": {**state["summary"],
                                                             "nan": "3"}}]]).encode()):
        results: dict = {}
        forked_reads._collect(data, parts, results)
        assert results == {}, data
    results = {1: (5, 6, None)}
    forked_reads._collect(json.dumps([[0, 9, 4096, state], [1, 1, 4, state],
                                      [2, 3, 8 * MiB, None]]).encode(), parts, results)
    assert results[1] == (5, 6, None)  # already read: a report does not replace it
    assert results[2] == (3, 8 * MiB, None)
    crc, got, scan = results[0]
    assert (crc, got) == (9, 4096)
    assert dataclasses.asdict(scan.finish()) == dataclasses.asdict(good.finish())


def test_an_interrupted_parent_stops_and_reaps_its_children(evidence, small_thresholds,
                                                             tmp_path):
    log = tmp_path / "pids.log"
    parent = os.getpid()
    make = _logging_maker(log, parent)

    def interrupt(start: int, length: int) -> numeric.StorageScan:
        if os.getpid() == parent and length and _pids(log) - {parent}:
            raise KeyboardInterrupt
        time.sleep(0.1)  # a slow scan: the children would need seconds to finish the queue
        return make(start, length)  # type: ignore[operator]

    with evidence.open("rb") as fh, pytest.raises(KeyboardInterrupt):
        for _ in range(200):  # until a child has started before the parent's first part
            log.unlink(missing_ok=True)
            streaming.read_ranges(fh, _ranges(interrupt), threads=2)
    made = log.read_text().split()
    children = set(map(int, made)) - {parent}
    assert children and all(_reaped(pid) and _gone(pid) for pid in children)
    # killed, not waited for: a child that ran on would have scanned the whole queue (22
    # segments) before the parent could return
    assert sum(int(p) != parent for p in made) < 10


CHILD_OUTLIVES = r"""
import os, sys, time
from pathlib import Path
from ckptrescue.checkpoints.formats import forked_reads, numeric, streaming
forked_reads.PROCESS_MIN = 1 << 20
streaming.SEGMENT = 1 << 20
path, log = sys.argv[1], Path(sys.argv[2])
parent = os.getpid()

class Slow(numeric.StorageScan):
    def feed(self, offset, data):
        time.sleep(0.5)
        super().feed(offset, data)

def make(start, length):
    if os.getpid() != parent and length:
        with log.open("a") as fh:
            fh.write(f"{os.getpid()}\n")
    return Slow("float32", start=start, length=length)

size = os.path.getsize(path) // 4 * 4
with open(path, "rb") as fh:
    streaming.read_ranges(fh, [streaming.ByteRange(0, size, make_scan=make, itemsize=4)],
                          threads=3)
"""


def test_children_stop_when_their_parent_is_killed(evidence, tmp_path):
    log = tmp_path / "children.log"
    proc = subprocess.Popen([sys.executable, "-c", CHILD_OUTLIVES, str(evidence), str(log)],
                            env={**os.environ, "CKPTRESCUE_SCAN_PROCESSES": "1"})
    try:
        deadline = time.monotonic() + 60
        while len(_pids(log)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        children = _pids(log)
        assert len(children) == 2, "the children did not start"
        proc.kill()  # kill -9: no clean-up runs in the parent
        proc.wait(timeout=30)
        # about 19 segments of a slow scan (0.5 s per MiB) are left: two children running on
        # would need over 4 s; each stops before its next segment once its parent is gone
        deadline = time.monotonic() + 2.5
        while not all(_gone(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(pid) for pid in children)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _pids(log):
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.privileged
@pytest.mark.needs_tool("mkfs.btrfs", "mount", "umount")
def test_an_eio_met_by_a_child_is_read_again_and_recorded(btrfs_with_bad_block,
                                                          small_thresholds, tmp_path):
    from ckptrescue.checkpoints.formats.tolerant_read import collect_unreadable, open_evidence

    src, _image, mount = btrfs_with_bad_block
    (src / "tensors.bin").write_bytes(b"\x07" * OFFSET + _payload(11))
    bad = OFFSET + 12 * MiB + 2 * MiB + 8192  # in the integer tensor (bytes found once)
    mnt = mount(("tensors.bin", bad))
    got = {}
    parent = os.getpid()
    for mode in ("0", "1"):
        os.environ["CKPTRESCUE_SCAN_PROCESSES"] = mode
        # processes: the parent rests after its first part, so a child meets the bad block
        make = _logging_maker(tmp_path / "pids.log", parent, parent_delay=0.3) \
            if mode == "1" else None
        try:
            with collect_unreadable() as unreadable:
                fh = open_evidence(mnt / "tensors.bin")
                try:
                    ranges = _ranges(make)
                    streaming.read_ranges(fh, ranges, threads=2)
                finally:
                    fh.close()
            got[mode] = (_results(ranges), dict(unreadable))
        finally:
            del os.environ["CKPTRESCUE_SCAN_PROCESSES"]
    assert got["1"] == got["0"]
    [(where, spans)] = got["1"][1].items()
    block = bad - bad % 4096
    assert spans == [(block, block + 4096)]


def test_a_probe_reports_the_same_either_way(tmp_path, small_thresholds, monkeypatch):
    torch = pytest.importorskip("torch")
    from ckptrescue.checkpoints.base import ProbeOptions
    from ckptrescue.checkpoints.probes.checkpoints import discover, probe_one

    payload = np.frombuffer(_payload(5), dtype=np.uint8)
    state, pos = {}, 0
    for i, (dtype, size) in enumerate(LAYOUT):
        arr = payload[pos:pos + size].view(np.float32 if dtype == "float32" else np.float16)
        state[f"layers.{i}.weight"] = torch.from_numpy(arr.copy())
        pos += size
    path = tmp_path / "model.pt"
    torch.save({"model": state, "step": 3}, path)
    forks: list[int] = []
    real_fork = forked_reads._fork

    def counted_fork() -> int:
        pid = real_fork()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(forked_reads, "_fork", counted_fork)
    monkeypatch.setenv("CKPTRESCUE_THREADS", "2")  # two workers, even on one core
    reports = {}
    for mode in ("0", "1"):
        monkeypatch.setenv("CKPTRESCUE_SCAN_PROCESSES", mode)
        [(fmt, root)] = discover([path])
        reports[mode] = probe_one(fmt, root, ProbeOptions()).to_json(with_tensors=True)
    assert forks and all(_reaped(pid) for pid in forks)  # mode 1 read on processes
    assert reports["1"] == reports["0"]
    codes = {f["code"] for f in reports["1"]["findings"]}
    assert {"NM001", "NM002", "NM003"} <= codes


NEVER_RETURNS = r"""
import os, signal, sys
from ckptrescue.checkpoints.formats import forked_reads, numeric, streaming
forked_reads.PROCESS_MIN = 1 << 20
streaming.SEGMENT = 1 << 20
path, mode = sys.argv[1], sys.argv[2]
real_fork = os.fork

def fork_then_interrupt():
    pid = real_fork()
    if pid == 0:
        os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C at the very instant of the fork
    return pid

def broken_child(*args):
    raise RuntimeError("a child that fails before its work")

if mode == "interrupt":
    os.fork = fork_then_interrupt
else:
    forked_reads._child = broken_child

def ranges():
    size = os.path.getsize(path) // 4 * 4
    return [streaming.ByteRange(0, size, itemsize=4, make_scan=lambda s, n: numeric.StorageScan(
        "float32", start=s, length=n))]

try:
    got = ranges()
    with open(path, "rb") as fh:
        streaming.read_ranges(fh, got, threads=2)
    print("returned", os.getpid(), flush=True)
except BaseException as exc:
    print("raised", type(exc).__name__, os.getpid(), flush=True)
    raise
want = ranges()
with open(path, "rb") as fh:
    streaming.read_ranges(fh, want, threads=1)
print("same" if [(r.crc, r.got, r.scan.finish()) for r in got]
      == [(r.crc, r.got, r.scan.finish()) for r in want] else "different", flush=True)
"""


@pytest.mark.parametrize("mode", ["interrupt", "broken"])
def test_a_child_never_returns_into_its_callers_code(evidence, mode):
    proc = subprocess.run([sys.executable, "-c", NEVER_RETURNS, str(evidence), mode],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CKPTRESCUE_SCAN_PROCESSES": "1"})
    lines = proc.stdout.split("\n")
    assert proc.returncode == 0, proc.stderr
    # one process came back from the read: the parent, which read what its child did not
    assert lines[0].startswith("returned ") and lines[1:] == ["same", ""], proc.stdout


def test_on_threads_small_ranges_stay_on_the_calling_thread(evidence, small_thresholds,
                                                            monkeypatch):
    """Small ranges are mostly Python work: on several threads they only take turns with the
    GIL, so they are read on the calling thread; the large ones go to the pool. The results are
    one thread's either way."""
    import threading

    monkeypatch.setenv("CKPTRESCUE_SCAN_PROCESSES", "0")
    want = _reference(evidence)
    made: dict[int, set[int]] = {}

    def make(start: int, length: int) -> numeric.StorageScan:
        rng = next(r for r in ranges if r.offset <= start < r.offset + max(r.length, 1))
        made.setdefault(rng.length, set()).add(threading.get_ident())
        dtype = "float32" if rng.itemsize == 4 else "float16"
        return numeric.StorageScan(dtype, start=start, length=length,
                                   names=["layer.weight", "exp_avg_sq"])

    with evidence.open("rb") as fh:
        ranges = _ranges(make)
        streaming.read_ranges(fh, ranges, threads=2)
    assert _results(ranges) == want
    assert made[4096] == {threading.get_ident()}  # the small range
    assert threading.get_ident() not in made[3 * MiB]  # the large ones: pool threads
