"""A name in a destination that is not a file: a FIFO planted where the kit reads or appends
(an earlier preserve's journal, a content-addressed blob) would block it for ever; a device node
there would take the kit's bytes to the device. ``effects/beneath.py`` opens only regular files:
the kind is checked before the open and again on the descriptor (opened ``O_NONBLOCK``, so that
a FIFO swapped in between never blocks). Real FIFOs, and a real block node of a loop device
over an image hashed before and after."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from ckptrescue.effects import beneath
from ckptrescue.errors import RefusedError


def _opened_within(fn, seconds: float = 10.0) -> BaseException | None:  # noqa: ANN001
    """Run ``fn`` in a thread; the exception it raised (None if none), or fail on a hang."""
    box: list[BaseException | None] = []

    def target() -> None:
        try:
            fn()
            box.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        # unblock the open so that the thread ends, then fail
        raise AssertionError("the kit blocked on a FIFO in its destination")
    return box[0]


@pytest.mark.parametrize("mode", ["rb", "ab", "wb", "r+b"])
def test_a_fifo_at_the_name_is_refused_not_waited_on(tmp_path: Path, mode: str) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    fifo = dest / "preserve.jsonl"
    os.mkfifo(fifo)
    try:
        exc = _opened_within(lambda: beneath.open_file(dest, fifo, mode).close())
    finally:
        # a blocked opener (without the fix) is released by opening the other end
        fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        os.close(fd)
    assert isinstance(exc, RefusedError) and "FIFO" in str(exc), exc


@pytest.mark.privileged
@pytest.mark.parametrize("mode", ["ab", "wb", "r+b"])
def test_a_device_node_at_the_name_is_never_written(tmp_path: Path, mode: str) -> None:
    image = tmp_path / "disk.img"
    image.write_bytes(bytes(range(256)) * 4096)
    before = hashlib.sha256(image.read_bytes()).hexdigest()
    dev = subprocess.run(["losetup", "--find", "--show", str(image)], check=True,
                         capture_output=True, text=True).stdout.strip()
    try:
        dest = tmp_path / "dest"
        dest.mkdir()
        node = dest / "journal.jsonl"
        os.mknod(node, 0o600 | stat.S_IFBLK, os.stat(dev).st_rdev)
        with pytest.raises(RefusedError, match="device node"), \
                beneath.open_file(dest, node, mode) as fh:
            fh.write(b"the kit's bytes\n")
            fh.flush()
            os.fsync(fh.fileno())
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)
    assert hashlib.sha256(image.read_bytes()).hexdigest() == before


def test_a_regular_file_still_opens_in_blocking_mode(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    with beneath.open_file(dest, dest / "a.txt", "xb") as fh:
        fh.write(b"x")
        assert os.get_blocking(fh.fileno())  # O_NONBLOCK cleared again
    with beneath.open_file(dest, dest / "a.txt", "ab") as fh:
        fh.write(b"y")
    assert (dest / "a.txt").read_bytes() == b"xy"
