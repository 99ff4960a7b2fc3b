"""A loop number is reused: what the kernel said about ``loopN`` before it was attached to the
evidence is about another file, and neither triage nor the report's timeline lays it at the
evidence's door.

Found by a responder on a machine whose loop devices many jobs had used: ``triage --volume``
raised TR004 (error) "6 kernel message(s) about io errors on the volume's devices (loop1)" for an
ext4 volume, from XFS shutdown lines an earlier job's image had caused on loop1 half an hour
before; the report's timeline filled three pages with earlier jobs' loop1 mount lines, each
marked "evidence device loop1".

The setup is real: an XFS image on a loop device, mounted and shut down (``xfs_io -x -c
shutdown``: the kernel logs "XFS (loopN): Log I/O Error ... Shutting down filesystem"), released;
then an ext4 image attached to the very same number, as the evidence.
"""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
import time
from pathlib import Path

import pytest
from cli_helpers import invoke, run_cli

from fixtures import storage as fx

# on one worker (privileged: the "kernel" group, tests/conftest.py): two of these at once take
# the same free number in turns, and each sees the other's XFS lines after its own attach
pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("mkfs.xfs", "mkfs.ext4", "xfs_io")]


def _shut_down_xfs_on(dev: str) -> None:
    mnt = Path(tempfile.mkdtemp(prefix="ckr-reuse-"))
    try:
        fx.sh("mount", "-t", "xfs", dev, str(mnt))
        try:
            (mnt / "f").write_bytes(b"x" * 4096)
            fx.sh("xfs_io", "-x", "-c", "shutdown", str(mnt))
        finally:
            fx.sh("umount", str(mnt), check=False)
    finally:
        mnt.rmdir()


def _kernel_says_reattached(name: str) -> tuple[bool, str]:
    """Whether the kernel log's last line about ``name`` that is an XFS line comes before its
    last attach line (the precondition the tests are about), and the log's lines about it."""
    log = fx.sh("dmesg", check=False).stdout.splitlines()
    about = [ln for ln in log if re.search(rf"(?<![\w-]){name}(?![\w-])", ln)]
    attach = [i for i, ln in enumerate(about) if f"{name}: detected capacity change from 0 to"
              in ln]
    xfs = [i for i, ln in enumerate(about) if f"XFS ({name})" in ln]
    ok = bool(attach and xfs) and attach[-1] > xfs[-1]
    return ok, "\n".join(about[-30:])


@contextlib.contextmanager
def reused_loop(old: Path, new: Path):
    """A loop device that held ``old`` (its XFS shut down) and now holds ``new``, the kernel's
    log showing the XFS lines before the new attach (else another number is tried: on a busy
    machine the numbers are shared with other jobs)."""
    seen = ""
    for _ in range(8):
        dev = fx.sh("losetup", "--find", "--show", str(old)).stdout.strip()
        try:
            _shut_down_xfs_on(dev)
        finally:
            fx.detach_own(dev, old)
        if not fx.attach_on(dev, new, after=old):
            continue
        ok, seen = _kernel_says_reattached(Path(dev).name)
        if not ok:
            fx.detach_own(dev, new)
            # the attach line is rate-limited (10 in 5 s, then "set_capacity_and_notify: N
            # callbacks suppressed"): after a burst of attaches, as the privileged tests run one
            # after another, wait the window out before trying again
            time.sleep(5.5)
            continue
        try:
            yield dev
        finally:
            fx.detach_own(dev, new)
        return
    pytest.fail("no loop number could be attached twice in a row with the kernel's log in that "
                f"order (others took each one); the last one's lines:\n{seen}")


@pytest.fixture
def evidence_on_a_reused_loop(shm_dir):
    old = fx.make_fs(shm_dir / "earlier-job.img", "xfs")
    new = fx.make_fs(shm_dir / "evidence.img", "ext4")
    with reused_loop(old, new) as dev:
        yield dev, Path(dev).name


def test_triage_does_not_blame_the_volume_for_an_earlier_use_of_its_loop(
        evidence_on_a_reused_loop, tmp_path):
    dev, name = evidence_on_a_reused_loop
    case = tmp_path / "case"
    assert invoke("case", "new", str(case)).returncode == 0
    mnt = tmp_path / "vol"
    mnt.mkdir()
    fx.sh("mount", "-t", "ext4", dev, str(mnt))  # the live volume triage looks at
    try:
        r = invoke("triage", "--case", str(case), "--volume", str(mnt), "--seconds", "0.1",
                   "--json")
    finally:
        fx.sh("umount", str(mnt), check=False)
    out = json.loads(r.stdout)
    earlier = [m for m in out["kernel_messages"] if f"XFS ({name})" in m["line"]]
    assert earlier, "the earlier XFS shutdown is in the kernel log"
    assert {m["scope"] for m in earlier} == {"other"}, \
        [m["line"] for m in earlier] + ["-- the kernel log:", _kernel_says_reattached(name)[1]]
    assert {m.get("earlier_use_of") for m in earlier} == {name}
    blamed = [f for f in out["findings"] if f["code"] == "TR004" and f["severity"] == "error"]
    assert blamed == [], blamed


def test_report_timeline_shows_the_evidence_loop_only_since_its_attach(
        evidence_on_a_reused_loop, tmp_path):
    dev, name = evidence_on_a_reused_loop
    case = tmp_path / "case"
    assert invoke("case", "new", str(case)).returncode == 0
    assert invoke("triage", "--case", str(case), "--seconds", "0.1").returncode in (0, 1)
    r = run_cli("image", dev, "--case", str(case), "--dest", str(tmp_path / "ev"))
    assert r.returncode == 0, r.stderr
    r = invoke("report", str(case), "-f", "json", "-o", "-")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["timeline"]["rows"]
    # "evidence device loopN", or with ", or an earlier use of loopN" where the kernel's
    # rate limit may have hidden a later attach: either way, only since the attach
    ours = [row for row in rows if row["why"].startswith(f"evidence device {name}")]
    assert any("detected capacity change from 0 to" in row["text"] for row in ours)
    assert not [row for row in ours if f"XFS ({name})" in row["text"]], \
        [row["text"] for row in ours] + ["-- the kernel log:", _kernel_says_reattached(name)[1]]


def _spend_the_attach_line_limit(filler: Path) -> None:
    """Five attaches and five detaches of ``filler`` on other numbers: ten capacity-change lines,
    the kernel's whole allowance for 5 s (``set_capacity_and_notify`` is rate-limited to 10)."""
    devs = [fx.sh("losetup", "--find", "--show", "--read-only", str(filler)).stdout.strip()
            for _ in range(5)]
    for dev in devs:
        fx.detach_own(dev, filler)


def test_triage_does_not_blame_the_volume_when_the_kernel_hid_its_attach(shm_dir, tmp_path):
    """The kernel logged the earlier job's XFS shutdown on loopN, then dropped the line of the
    evidence's own attach on loopN (rate limit spent): nothing in the log says the device was
    attached again, and triage must not lay the earlier lines at the evidence's door."""
    old = fx.make_fs(shm_dir / "earlier-job.img", "xfs")
    new = fx.make_fs(shm_dir / "evidence.img", "ext4")
    filler = shm_dir / "filler.img"
    with open(filler, "wb") as fh:
        fh.truncate(1 << 20)
    case = tmp_path / "case"
    assert invoke("case", "new", str(case)).returncode == 0
    evidence = fx.sha256(new)
    for _ in range(6):
        dev = fx.sh("losetup", "--find", "--show", str(old)).stdout.strip()
        try:
            _shut_down_xfs_on(dev)
            _spend_the_attach_line_limit(filler)
        finally:
            fx.detach_own(dev, old)
        if not fx.attach_on(dev, new, after=old):
            continue
        name = Path(dev).name
        try:
            if _kernel_says_reattached(name)[0]:  # the window turned: the attach was logged
                continue
            mnt = tmp_path / "vol"
            mnt.mkdir(exist_ok=True)
            fx.sh("mount", "-t", "ext4", "-o", "ro", dev, str(mnt))
            try:
                r = invoke("triage", "--case", str(case), "--volume", str(mnt), "--seconds",
                           "0.1", "--json")
            finally:
                fx.sh("umount", str(mnt), check=False)
        finally:
            fx.detach_own(dev, new)
        time.sleep(5.5)  # the next test's attach lines are logged again
        break
    else:
        pytest.skip("the kernel logged every attach (its rate limit was never spent in 6 tries)")
    out = json.loads(r.stdout)
    earlier = [m for m in out["kernel_messages"] if f"XFS ({name})" in m["line"]]
    assert earlier, "the earlier XFS shutdown is in the kernel log"
    # this try's shutdown is uncertain; older ones, followed by an attach line, are "other"
    assert (earlier[-1]["scope"], earlier[-1].get("uncertain_use_of")) == ("uncertain", name)
    assert "volume" not in {m["scope"] for m in earlier}
    tr004 = {f["severity"] for f in out["findings"] if f["code"] == "TR004"
             and any(f"XFS ({name})" in m["line"] for m in f["details"]["messages"])}
    assert "warning" in tr004 and "error" not in tr004, out["findings"]
    assert fx.sha256(new) == evidence
