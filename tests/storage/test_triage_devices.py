"""`triage` sees a real writer under a volume (and never stops it); `devices` lists loops."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ckptrescue.storage.devices import devices
from ckptrescue.storage.triage import classify, scan_kernel_log, triage
from fixtures import storage as fx

WRITER = """
import os, sys, time
with open(sys.argv[1], "wb") as fh:
    while True:
        fh.write(b"w" * 65536); fh.flush(); os.fsync(fh.fileno()); time.sleep(0.02)
"""


def test_triage_reports_the_writer_and_does_not_stop_it(case, tmp_path):
    vol = tmp_path / "vol"
    vol.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(vol / "ckpt.partial")])
    try:
        time.sleep(0.5)
        res = triage(case=case, volume=vol, seconds=1.0)
        me = next(p for p in res.processes if p.pid == proc.pid)
        assert me.open_for_write == [str(vol / "ckpt.partial")]
        assert me.write_rate_bps and me.write_rate_bps > 10_000
        assert "TR001" in {f.code for f in res.findings}
        assert len(res.checklist) >= 5
        assert proc.poll() is None  # still running: triage never kills
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(("cmd", "kind"), [
    (["torchrun", "--nproc_per_node=8", "train.py"], "training"),
    (["/usr/bin/python3", "-m", "torch.distributed.run", "train.py"], "training"),
    (["deepspeed", "train.py"], "training"),
    (["rclone", "sync", "/ckpt", "s3:bucket"], "sync"),
    (["/usr/local/bin/aws", "s3", "sync", "/ckpt", "s3://b/"], "sync"),
    (["aws", "s3", "ls"], "other"),
    (["/usr/bin/kubelet", "--config=x"], "orchestration"),
    (["vim", "notes.txt"], "other"),
])
def test_classify(cmd, kind):
    assert classify(cmd[0].rsplit("/", 1)[-1], cmd) == kind


def test_python_with_libtorch_mapped_is_training():
    maps = "7f00-7f10 r-xp 00000000 fd:00 1 /venv/lib/torch/lib/libtorch_cpu.so\n"
    assert classify("python3", ["python3", "my_job.py"], maps) == "training"


def test_kernel_log_scan_picks_storage_errors_only():
    text = "\n".join([
        "kern  :err   : 2026-11-30T09:00:00 blk_update_request: critical medium error, dev "
        "nvme0n1, sector 279163624 op 0x0:(READ)",
        "kern  :alert : 2026-11-30T09:00:01 XFS (vdb1): Metadata corruption detected at "
        "xfs_da3_node_read_verify+0x10",
        "kern  :crit  : 2026-11-30T09:00:02 EXT4-fs error (device sdb1): ext4_find_entry:1455",
        "kern  :warn  : 2026-11-30T09:00:03 nvme nvme0: I/O 12 QID 3 timeout, aborting",
        "kern  :info  : 2026-11-30T09:00:04 e1000: eth0 NIC Link is Up",
    ])
    assert [m["kind"] for m in scan_kernel_log(text)] == ["io", "xfs", "ext4", "nvme"]


@pytest.mark.privileged
def test_devices_lists_a_loop_device_with_its_backing_file(shm_dir):
    img = shm_dir / "d.img"
    with open(img, "wb") as fh:
        fh.truncate(8 << 20)
    with fx.loop(img) as dev:
        (entry,) = [d for d in devices() if d.path == dev]
        assert entry.loop_backing_file == str(img)
        assert entry.readonly and entry.size == 8 << 20
        assert entry.physical_leaves == ["ram"]


def test_kernel_messages_are_attributed_to_the_volume_devices():
    from ckptrescue.storage.triage import attribute

    text = "\n".join([
        "kern  :err   : 2026-11-30T09:00:00 blk_update_request: I/O error, dev nvme0n1, "
        "sector 279163624 op 0x0:(READ)",
        "kern  :warn  : 2026-11-30T09:00:03 nvme nvme0: I/O 12 QID 3 timeout, aborting",
        "kern  :crit  : 2026-11-30T09:00:02 EXT4-fs error (device sdb1): ext4_find_entry:1455",
        "kern  :err   : 2026-11-30T09:00:05 Buffer I/O error on device, logical block 7",
        "kern  :alert : 2026-11-30T09:00:01 XFS (nvme0n11): Metadata corruption detected",
    ])
    msgs = scan_kernel_log(text)
    attribute(msgs, {"nvme0n1p2", "nvme0n1", "nvme0"})
    assert [(m["scope"], m["devices"]) for m in msgs] == [
        ("volume", "nvme0n1"), ("volume", "nvme0"), ("other", ""), ("unknown", ""),
        ("other", "")]


@pytest.mark.privileged
def test_triage_of_a_mounted_image_names_its_loop_device(case, shm_dir, tmp_path, no_leftovers):
    from ckptrescue.storage import mounting
    from ckptrescue.storage.triage import volume_device_names

    img = fx.make_fs(shm_dir / "e.img", "ext4")
    res = mounting.mount(img, tmp_path / "mnt", case=case)
    try:
        loopdev = res.loop_device.removeprefix("/dev/")
        assert loopdev in volume_device_names(str(tmp_path / "mnt"))
        assert "loop" not in " ".join(volume_device_names(str(shm_dir)))
    finally:
        mounting.umount(tmp_path / "mnt", case=case)


def test_without_a_volume_the_writers_are_one_summary(case):
    res = triage(case=case, volume=None, seconds=0.2)
    tr001 = [f for f in res.findings if f.code == "TR001"]
    assert len(tr001) <= 1  # never one finding per process on the host
    if tr001:
        assert str(tr001[0].severity) == "info" and "--volume" in tr001[0].title
        assert tr001[0].details["count"] == len(tr001[0].details["processes"]) or \
            tr001[0].details["count"] > 200


@pytest.mark.privileged
def test_a_device_volume_names_the_writer_on_its_mounted_filesystem(case, shm_dir, tmp_path):
    """triage --volume /dev/loopN: a process writing anywhere on that device's filesystem is
    named; one writing elsewhere on the host is not."""
    img = fx.make_fs(shm_dir / "w.img", "ext4")
    loop = subprocess.run(["losetup", "--find", "--show", str(img)], capture_output=True,
                          text=True, check=True).stdout.strip()
    mnt = tmp_path / "scratch-mnt"
    mnt.mkdir()
    writers: list[subprocess.Popen[bytes]] = []
    try:
        subprocess.run(["mount", loop, str(mnt)], check=True)
        writers.append(subprocess.Popen([sys.executable, "-c", WRITER, str(mnt / "x.part")]))
        writers.append(subprocess.Popen([sys.executable, "-c", WRITER,
                                         str(tmp_path / "elsewhere.part")]))
        time.sleep(0.5)
        res = triage(case=case, volume=loop, seconds=0.3)
        named = {f.details.get("pid") for f in res.findings if f.code == "TR001"}
        assert writers[0].pid in named and writers[1].pid not in named
    finally:
        for w in writers:
            w.kill()
            w.wait()
        subprocess.run(["umount", str(mnt)], check=False)
        fx.detach_own(loop, img)


# ---- a loop device's attach line the kernel's rate limit may have hidden ------------------------
# Lines in the form `dmesg -x --time-format iso` prints them on Debian 12's kernel (the
# "callbacks suppressed" and capacity-change lines as this machine's kernel logged them).
def _kline(level: str, second: float, text: str) -> str:
    whole, frac = divmod(second, 1)
    return (f"kern  :{level:<6}: 2026-12-05T01:{int(whole) // 60:02d}:{int(whole) % 60:02d},"
            f"{round(frac * 1e6):06d}+00:00 {text}")


_XFS_LINE = "XFS (loop0): User initiated shutdown received."
_XFS_SHUTDOWN = ("XFS (loop0): Log I/O Error (0x6) detected at xfs_fs_goingdown+0x63/0xb0 "
                 "(fs/xfs/xfs_fsops.c:475).  Shutting down filesystem.")


def _triage_of(lines: list[str], volume_devices: set[str]) -> tuple[list[dict[str, str]], list]:
    from ckptrescue.storage.triage import TriageResult, attribute, findings_of

    msgs = scan_kernel_log("\n".join(lines))
    attribute(msgs, volume_devices)
    result = TriageResult(volume="/mnt/evidence", seconds=0.0, processes=[],
                          kernel_messages=msgs, checklist=[])
    return msgs, [(f.code, str(f.severity)) for f in findings_of(result)]


def _earlier_job(at: float) -> list[str]:
    """An earlier job's XFS image on loop0: attached, its log failing, shut down, detached."""
    return [_kline("info", at, "loop0: detected capacity change from 0 to 655360"),
            _kline("alert", at + 1, _XFS_LINE), _kline("alert", at + 1.1, _XFS_SHUTDOWN),
            _kline("info", at + 2, "loop0: detected capacity change from 655360 to 0")]


def _burst(at: float, n: int, spacing: float) -> list[str]:
    """Other jobs attaching loop1..loopN, ``spacing`` seconds apart."""
    return [_kline("info", at + k * spacing, f"loop{k + 1}: detected capacity change from 0 to "
                   "16384") for k in range(n)]


def test_a_spent_rate_limit_leaves_an_earlier_loop_error_uncertain_not_the_volumes():
    # ten attaches in 0.9 s spend the limit: the evidence's own attach of loop0 that came next
    # was not logged, and no later line has announced the drop yet
    lines = _earlier_job(0) + _burst(10, 10, 0.1)
    msgs, findings = _triage_of(lines, {"loop0"})
    xfs = [m for m in msgs if "XFS (loop0)" in m["line"]]
    assert xfs and {m["scope"] for m in xfs} == {"uncertain"}
    assert {m["uncertain_use_of"] for m in xfs} == {"loop0"}
    assert ("TR004", "error") not in findings and ("TR004", "warning") in findings


def test_an_announced_drop_leaves_an_earlier_loop_error_uncertain():
    lines = [*_earlier_job(0),
             _kline("warn", 30, "set_capacity_and_notify: 7 callbacks suppressed"),
             _kline("info", 30.0001, "loop3: detected capacity change from 0 to 65536")]
    msgs, findings = _triage_of(lines, {"loop0"})
    assert {m["scope"] for m in msgs if "XFS (loop0)" in m["line"]} == {"uncertain"}
    assert ("TR004", "error") not in findings


@pytest.mark.parametrize("after", [
    pytest.param(lambda: _burst(10, 9, 0.1), id="nine attaches: the limit was not spent"),
    pytest.param(lambda: _burst(10, 10, 0.7), id="ten attaches over 6.3 s: two windows"),
    pytest.param(lambda: [], id="nothing after"),
])
def test_without_a_possible_drop_an_error_on_the_volumes_loop_is_the_volumes(after):
    msgs, findings = _triage_of(_earlier_job(0)[:3] + after(), {"loop0"})
    assert {m["scope"] for m in msgs if "XFS (loop0)" in m["line"]} == {"volume"}
    assert ("TR004", "error") in findings


def test_an_error_logged_after_the_spent_window_is_the_volumes():
    # the burst's window closed at 10 + 5 s (+1 s of slack); the XFS error came at 20 s
    lines = [*_burst(10, 10, 0.1), _kline("alert", 20, _XFS_SHUTDOWN)]
    msgs, findings = _triage_of(lines, {"loop0"})
    assert [m["scope"] for m in msgs] == ["volume"]
    assert ("TR004", "error") in findings


def test_a_visible_reattach_still_says_earlier_use_whatever_was_dropped():
    lines = [*_earlier_job(0), *_burst(10, 10, 0.1),
             _kline("warn", 40, "set_capacity_and_notify: 3 callbacks suppressed"),
             _kline("info", 40.0001, "loop0: detected capacity change from 0 to 16384")]
    msgs, findings = _triage_of(lines, {"loop0"})
    xfs = [m for m in msgs if "XFS (loop0)" in m["line"]]
    assert {(m["scope"], m["earlier_use_of"]) for m in xfs} == {("other", "loop0")}
    assert "uncertain_use_of" not in xfs[0]
    assert ("TR004", "error") not in findings and ("TR004", "warning") not in findings


def test_a_non_loop_device_is_never_made_uncertain():
    lines = [_kline("err", 5, "blk_update_request: I/O error, dev sdb, sector 8 op 0x0:(READ)"),
             *_burst(10, 12, 0.05)]
    msgs, findings = _triage_of(lines, {"sdb"})
    assert [m["scope"] for m in msgs] == ["volume"] and ("TR004", "error") in findings


@pytest.mark.parametrize("announced", [False, True])
def test_a_spent_window_dropped_nothing_when_the_next_line_came_unannounced(announced):
    # the kernel prints "callbacks suppressed" with the first capacity change after a window
    # that dropped some: without it, the window dropped nothing, and loop0 was not re-attached
    notice = [_kline("warn", 30, "set_capacity_and_notify: 4 callbacks suppressed")]
    lines = [*_earlier_job(0)[:3], *_burst(10, 10, 0.1), *(notice if announced else []),
             _kline("info", 30.0001, "loop11: detected capacity change from 0 to 16384")]
    msgs, findings = _triage_of(lines, {"loop0"})
    scope = {m["scope"] for m in msgs if "XFS (loop0)" in m["line"]}
    assert scope == ({"uncertain"} if announced else {"volume"})
    assert (("TR004", "error") in findings) is not announced


def test_triage_of_a_volume_that_is_not_there_says_so(case, tmp_path):
    """A mistyped --volume was answered "0 writers found": a false all-clear. It is a one-line
    usage error now, before anything is scanned."""
    from ckptrescue.errors import EvidenceError

    with pytest.raises(EvidenceError, match="no such file or directory"):
        triage(case=case, volume=tmp_path / "mnt" / "checkpionts", seconds=0)
