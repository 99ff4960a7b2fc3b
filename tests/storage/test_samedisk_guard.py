"""One same-disk rule for every imaging and copying tool: ``exec -- ddrescue``, ``dd`` and
``rsync`` of a device or of evidence onto the source's own physical disk are refused, as
``image`` and ``copy`` refuse it (the same ``samedisk`` comparison); onto other media they run.
Real loop devices made by the test; the image hashed before and after."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.record.case import Case
from fixtures.storage import detach_own

pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("ddrescue", "losetup", "rsync")]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_imaging_or_copying_onto_the_source_disk_is_refused_for_every_tool(tmp_path: Path
                                                                           ) -> None:
    img = tmp_path / "disk.img"  # on the local disk, like the destinations below
    img.write_bytes(bytes(range(256)) * 4096)
    case = Case.create(tmp_path / "case")
    dev = subprocess.run(["losetup", "--read-only", "--find", "--show", str(img)], check=True,
                         capture_output=True, text=True).stdout.strip()
    shm = Path(tempfile.mkdtemp(prefix="ckr-test-", dir="/dev/shm"))
    before = _sha(img)
    runner = SubprocessRunner(case)
    try:
        out = tmp_path / "out"
        for argv in (("ddrescue", "-d", "-r0", dev, f"{out}/a.img", f"{out}/a.map"),
                     ("dd", f"if={dev}", f"of={out}/b.img", "bs=4096"),
                     ("rsync", "-a", f"{img}", f"{out}/c/")):
            if argv[0] == "rsync":
                case.ensure_evidence(img, how="test evidence")
            res = runner.run(ToolCall(argv=argv, timeout_s=120))
            assert res.refused and "same physical disk" in res.refused, (argv, res)
        res = runner.run(ToolCall.of("ddrescue", "-r0", dev, f"{shm}/new/a.img",
                                     f"{shm}/new/a.map", timeout_s=120))
        assert res.refused is None and res.returncode == 0, (res.refused, res.stderr)
        assert _sha(shm / "new" / "a.img") == before
    finally:
        detach_own(dev, img)
        shutil.rmtree(shm, ignore_errors=True)
    assert _sha(img) == before
