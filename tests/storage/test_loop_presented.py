"""A loop device is used only once the kernel shows it presenting the image as asked: backed by
that very file, and as many bytes as the file holds (whole 512-byte sectors). What ``losetup``
printed is not taken on trust: a stale or raced device is named and released before a
filesystem is read from it.

The wrong states are real kernel states: a loop device over the image with a ``--sizelimit``
(fewer bytes than the file holds) and one over another file.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ckptrescue.effects.runner import SubprocessRunner, ToolCall, ToolResult
from ckptrescue.errors import ToolFailedError
from ckptrescue.record.case import Case
from ckptrescue.storage import loops
from fixtures import storage as fx

pytestmark = pytest.mark.privileged

ODD = (4 << 20) + 100  # not a whole number of sectors: the device shows 4 MiB


def _image(directory: Path, name: str, size: int = ODD) -> Path:
    path = directory / name
    with open(path, "wb") as fh:
        for i in range(size // 4096 + 1):  # bytes from the block number, not zeros
            fh.write(i.to_bytes(4, "little") * 1024)
        fh.truncate(size)
    return path


def test_a_loop_is_checked_against_what_the_kernel_presents(shm_dir: Path) -> None:
    img = _image(shm_dir, "evidence.img")
    other = _image(shm_dir, "other.img", 1 << 20)
    with fx.loop(img) as dev:
        assert loops.presented_mismatch(dev, img) is None
        assert loops.presented_mismatch(dev, img, offset=1 << 20, limit=1 << 20) is not None
    dev = fx.sh("losetup", "--find", "--show", "--read-only", "--sizelimit", str(1 << 20),
                str(img)).stdout.strip()
    try:
        why = loops.presented_mismatch(dev, img)
        assert why == (f"the kernel presents {1 << 20} bytes of {img}, which holds {4 << 20} "
                       "there (whole 512-byte sectors)")
        assert loops.presented_mismatch(dev, img, limit=1 << 20) is None
    finally:
        fx.detach_own(dev, img)
    with fx.loop(other) as dev:
        assert loops.presented_mismatch(dev, img) == \
            f"the kernel shows it backed by {other}, not {img}"


class ShortViewRunner(SubprocessRunner):
    """Runs every tool as the kit does, but its loop device over the image presents 1 MiB
    (``--sizelimit`` added to the kit's own ``losetup``): the device is not the image."""

    def run(self, call: ToolCall, *, cancel: threading.Event | None = None) -> ToolResult:
        if call.purpose == "attach image read-only":
            argv = list(call.argv)
            call = ToolCall(argv=(*argv[:-1], "--sizelimit", str(1 << 20), argv[-1]),
                            timeout_s=call.timeout_s, purpose=call.purpose)
        return super().run(call, cancel=cancel)


def test_attach_releases_a_loop_that_does_not_present_the_image(shm_dir: Path, tmp_path: Path,
                                                                no_leftovers: None) -> None:
    img = _image(shm_dir, "evidence.img")
    before = fx.sha256(img)
    case = Case.create(tmp_path / "case")
    with pytest.raises(ToolFailedError) as err:
        loops.attach(img, case=case, runner=ShortViewRunner(case))
    assert "the kernel presents 1048576 bytes of" in err.value.message
    assert "not used (detached)" in err.value.message and "\n" not in err.value.message
    assert not [ln for ln in fx.sh("losetup", "-a").stdout.splitlines() if str(img) in ln]
    assert "storage.attached" not in [r["action"] for r in case.records()]
    assert fx.sha256(img) == before


def test_attach_records_the_bytes_the_kernel_presents(shm_dir: Path, tmp_path: Path,
                                                      no_leftovers: None) -> None:
    img = _image(shm_dir, "evidence.img")
    case = Case.create(tmp_path / "case")
    info = loops.attach(img, case=case, partscan=False)
    try:
        assert info["presented_bytes"] == 4 << 20
    finally:
        assert loops.release(info, case=case) == []
    (attached,) = [r for r in case.records() if r["action"] == "storage.attached"]
    assert attached["details"]["presented_bytes"] == 4 << 20
