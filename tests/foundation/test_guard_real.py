"""The dangerous forms run for real against a scratch loop device, an evidence image (and a hard
link to it) and scratch folders this test creates: each is refused (exit 3 from ``ckptrescue
exec``, a ``tool.refused`` audit record) and nothing changes. And beneath the guard: with the
guard switched off, the tool namespace alone keeps an evidence image unchanged.

The loop device is writable on purpose (a device the kit has not write-blocked) so that only the
guard stands between these forms and the device.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ckptrescue import guard
from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.record.case import Case
from fixtures.storage import detach_own

pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("bwrap", "losetup", "mkfs.ext4")]
CLI = str(Path(sys.executable).with_name("ckptrescue"))


def _sha(path: Path | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): (_sha(p) if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}


@pytest.fixture
def scene(tmp_path):
    """A case; an evidence image (+ a hard link to it elsewhere); a writable scratch loop device
    over a small ext4 image, registered as evidence; a scratch folder with a mapfile in it."""
    dev_img = tmp_path / "scratch-dev.img"
    with open(dev_img, "wb") as fh:
        fh.truncate(8 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(dev_img)], check=True)
    dev = subprocess.run(["losetup", "--find", "--show", str(dev_img)], check=True,
                         capture_output=True, text=True).stdout.strip()
    try:
        evidence = tmp_path / "evidence" / "disk.img"
        evidence.parent.mkdir()
        evidence.write_bytes(bytes(range(256)) * 64)
        link = tmp_path / "elsewhere" / "copy-of-disk.img"
        link.parent.mkdir()
        os.link(evidence, link)
        folder = tmp_path / "scratch"
        folder.mkdir()
        (folder / "rescue.map").write_text("# Mapfile\n0x00000000 +\n0x00000000 0x00004000 +\n")
        (folder / "keep.txt").write_text("untouched\n")
        case = Case.create(tmp_path / "case", title="guard table")
        case.ensure_evidence(evidence, how="test evidence image")
        case.ensure_evidence(dev, how="test evidence device")
        yield {"DEV": dev, "IMG": str(evidence), "LINK": str(link), "DIR": str(folder),
               "MAP": str(folder / "rescue.map"), "case": case, "root": tmp_path}
    finally:
        detach_own(dev, dev_img)


DANGEROUS = [
    "rsync -a -e \"sh -c 'dd if=/dev/zero of=DEV bs=4096 count=1'\" DIR/ localhost:DIR/x/",
    "rsync -a --rsync-path=\"sh -c 'touch DIR/pwned'\" DIR/ DIR/x/",
    "mount -r -t ext4 -o ro,noload --read-w DEV DIR",
    "xfs_io -rc \"pwrite -S 0x42 0 4096\" DEV",
    "debugfs -cR \"dump <2> DEV\" DEV",
    "debugfs -wR \"stat <2>\" DEV",
    "ddrescue --fo -X 1 IMG -L DEV MAP",
    "ddrescue -X 1 IMG -L DEV MAP",
    "blkid --cache=DIR/blkid.tab DEV",
    "ddrescuelog -d MAP",
    "journalctl -D DIR --vacuum-size=1",
    "umount -R DIR",
    "losetup -d DEV",
    "dd if=/dev/zero of=LINK bs=512 count=1 conv=notrunc",
    "dd if=/dev/zero of=IMG bs=512 count=1 conv=notrunc",
    "dd if=/dev/zero of=DEV bs=512 count=1 conv=notrunc",
    "find DIR -exec dd if=/dev/zero of=DEV count=1 ;",
    "find DIR -delete",
    "e2fsck -fy DEV",
    "e2fsck -fnF DEV",
    "tune2fs -L pwned DEV",
    "xxd -r DIR/keep.txt DEV",
    "dmesg --cle",
    "smartctl --te=short DEV",
]


def _fill(form: str, scene: dict) -> list[str]:
    for key in ("DEV", "IMG", "LINK", "DIR", "MAP"):
        form = form.replace(key, scene[key])
    return shlex.split(form)


def test_every_dangerous_form_is_refused_for_real_and_nothing_changes(scene) -> None:
    case: Case = scene["case"]
    before = (_sha(scene["DEV"]), _sha(scene["IMG"]), _tree(Path(scene["DIR"])))
    refused_before = sum(1 for _ in case.records("tool.refused"))
    runner = SubprocessRunner(case)
    for form in DANGEROUS:
        argv = _fill(form, scene)
        result = runner.run(ToolCall(argv=tuple(argv), timeout_s=60, purpose="guard table"))
        assert result.refused, f"{form!r} was allowed (exit {result.returncode})"
    refused = list(case.records("tool.refused"))
    assert len(refused) - refused_before == len(DANGEROUS)
    assert all(r["details"]["reason"] for r in refused)
    after = (_sha(scene["DEV"]), _sha(scene["IMG"]), _tree(Path(scene["DIR"])))
    assert after == before
    assert not (Path(scene["DIR"]) / "pwned").exists()


def test_refusal_through_the_cli_exits_3_with_one_line_and_an_audit_record(scene) -> None:
    case: Case = scene["case"]
    before = _sha(scene["IMG"])
    argv = _fill("dd if=/dev/zero of=LINK bs=512 count=1 conv=notrunc", scene)
    r = subprocess.run([CLI, "exec", "--case", str(case.root), "--", *argv],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2 and "evidence" in r.stderr
    assert "Traceback" not in r.stderr
    last = list(case.records("tool.refused"))[-1]
    assert last["details"]["argv"] == argv
    assert _sha(scene["IMG"]) == before


def test_allowed_reads_run_and_change_nothing(scene, request) -> None:
    case: Case = scene["case"]
    before = (_sha(scene["DEV"]), _sha(scene["IMG"]))
    runner = SubprocessRunner(case)
    # a new directory (the kit makes it), on other media than the evidence device (RAM)
    shm = Path(tempfile.mkdtemp(prefix="ckr-test-", dir="/dev/shm"))
    request.addfinalizer(lambda: shutil.rmtree(shm, ignore_errors=True))
    out = shm / "new" / "head.bin"
    forms = ("dumpe2fs -h DEV", "blkid -p DEV", "sha256sum LINK", "ddrescuelog -t MAP",
             f"dd if=DEV of={out} bs=4096 count=1")
    # the evidence device is writable: no tool touches it until the kernel keeps it read-only
    for form in forms:
        res = runner.run(ToolCall(argv=tuple(_fill(form, scene)), timeout_s=60))
        assert bool(res.refused) == ("DEV" in form), (form, res.refused)
    from ckptrescue.storage.writeblock import set_readonly

    set_readonly(scene["DEV"], True)
    try:
        for form in forms:
            res = runner.run(ToolCall(argv=tuple(_fill(form, scene)), timeout_s=60))
            assert res.refused is None and res.returncode == 0, (form, res.refused, res.stderr)
    finally:
        set_readonly(scene["DEV"], False)
    assert out.stat().st_size == 4096
    assert (_sha(scene["DEV"]), _sha(scene["IMG"])) == before
    runs = list(case.records("tool.run"))
    assert all(r["details"]["namespace"]["enforced"] for r in runs)
    kernel = [r["details"] for r in case.records("safety.kernel")]
    assert any(k["guarantee"] == "tool-namespace" and k["enforced"] for k in kernel)


def test_with_the_guard_off_the_namespace_alone_keeps_evidence_unchanged(scene, monkeypatch):
    """A guard mistake (here: the guard allows everything and names no output) cannot change an
    evidence image, the case's audit log or any file outside the tool's declared outputs."""
    case: Case = scene["case"]
    monkeypatch.setattr(guard, "check", lambda argv, ctx=None, **kw: guard.Decision.allow())
    evidence, audit = scene["IMG"], str(case.root / "audit.jsonl")
    before = _sha(evidence)
    runner = SubprocessRunner(case)
    outside = Path(scene["root"]) / "outside.bin"
    for target in (evidence, scene["LINK"], str(outside)):
        res = runner.run(ToolCall.of("dd", "if=/dev/zero", f"of={target}", "bs=512", "count=1",
                                     "conv=notrunc", timeout_s=60))
        assert res.refused is None
        assert res.returncode != 0 and "Read-only file system" in res.stderr, res.stderr
    audit_before = Path(audit).read_bytes()
    res = runner.run(ToolCall.of("dd", "if=/dev/zero", f"of={audit}", "bs=1", "count=1",
                                 "conv=notrunc", timeout_s=60))
    assert res.returncode != 0
    assert _sha(evidence) == before and not outside.exists()
    # the audit log only grew by the runner's own records: its old bytes are intact
    assert Path(audit).read_bytes().startswith(audit_before)
    assert case.verify().ok


def test_attached_by_this_case_can_be_detached_and_nothing_else(scene, tmp_path) -> None:
    """losetup -d is allowed for the loop device this case attached (recorded by the runner),
    refused for the scratch device the test attached itself."""
    case: Case = scene["case"]
    runner = SubprocessRunner(case)
    img = tmp_path / "small.img"
    img.write_bytes(b"\0" * (1 << 20))
    res = runner.run(ToolCall.of("losetup", "--read-only", "--find", "--show", str(img),
                                 timeout_s=60))
    assert res.returncode == 0, res.stderr
    ours = res.stdout.strip()
    try:
        assert [a["name"] for a in case.attachments() if a["kind"] == "loop"] == [ours]
        other = runner.run(ToolCall.of("losetup", "-d", scene["DEV"], timeout_s=60))
        assert other.refused and "not a loop device this case attached" in other.refused
        mine = runner.run(ToolCall.of("losetup", "-d", ours, timeout_s=60))
        assert mine.refused is None and mine.returncode == 0, mine.stderr
        assert [a for a in case.attachments() if a["kind"] == "loop"] == []
        again = runner.run(ToolCall.of("losetup", "-d", ours, timeout_s=60))
        assert again.refused, "detached once: no longer this case's"
    finally:
        detach_own(ours, img)
    records = [json.dumps(r["details"]) for r in case.records("safety.detached")]
    assert any(ours in r for r in records)


def test_tools_keep_no_cap_sys_admin_and_see_only_the_devices_they_name(scene, monkeypatch):
    """Under the guard: a tool cannot undo a write block (no CAP_SYS_ADMIN in its namespace),
    and a device node it does not name does not exist for it."""
    from ckptrescue.storage.writeblock import set_readonly

    dev = scene["DEV"]

    def setro(value: int) -> None:
        set_readonly(dev, bool(value))

    name = Path(dev).name
    setro(1)
    try:
        monkeypatch.setattr(guard, "check", lambda argv, ctx=None, **kw: guard.Decision.allow())
        runner = SubprocessRunner(scene["case"])
        res = runner.run(ToolCall.of("blockdev", "--setrw", dev, timeout_s=60))
        assert res.returncode != 0, "a tool undid the write block"
        assert Path(f"/sys/class/block/{name}/ro").read_text().strip() == "1"
        listing = runner.run(ToolCall.of("ls", "/dev", timeout_s=60))
        assert listing.returncode == 0 and name not in listing.stdout.split()
        named = runner.run(ToolCall.of("ls", "/dev", dev, timeout_s=60))
        assert named.returncode == 0 and dev in named.stdout
    finally:
        setro(0)
