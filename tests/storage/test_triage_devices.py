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
