"""The whole flow through the real CLI: image -> locate -> fs inspect -> mount/umount -> copy,
with the source's SHA-256 identical before and after, and the documented JSON shapes."""

from __future__ import annotations

import json
import subprocess

import pytest
from cli_helpers import invoke, run_cli

from ckptrescue.storage.parsers import ddrescue_mapfile
from fixtures import storage as fx
from fixtures.det import det_bytes

pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("ddrescue", "mkfs.xfs", "rsync")]
def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in this process; ``image`` in its own (it installs a SIGTERM handler for the
    rest of its process, which must not outlive the command in the test process)."""
    if args and args[0] == "image":
        return run_cli(*args, timeout=300)
    return invoke(*args)


def test_whole_flow_through_the_cli(tmp_path, shm_dir, no_leftovers):
    img = fx.make_fs(shm_dir / "src.img", "xfs")
    payload = det_bytes(4 << 20, 1)
    fx.put_files(img, "xfs", {"ckpt/shard-0.bin": payload})
    fx.make_dirty(img, "xfs")
    exts = fx.fiemap_physical(img, "xfs", "ckpt/shard-0.bin")
    log, phys, _length = exts[0]
    bad = (phys + 8192, phys + 8192 + 4096)
    test_map = tmp_path / "t.map"
    test_map.write_text(ddrescue_mapfile.build_test_map(img.stat().st_size, [bad]))
    before = fx.sha256(img)
    case = tmp_path / "case"
    assert run("case", "new", str(case)).returncode == 0

    with fx.loop(img) as dev:
        r = run("image", dev, "--case", str(case), "--dest", str(tmp_path / "ev"),
                "--simulate-bad-map", str(test_map), "--retries", "1", "--json")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert list(out) == ["image", "mapfile", "image_sha256", "size", "rescued_bytes",
                         "bad_ranges"]
    assert out["bad_ranges"] == [list(bad)]

    r = run("locate", "--case", str(case), out["mapfile"], out["image"], "--json")
    assert r.returncode == 1, r.stderr
    loc = json.loads(r.stdout)
    assert loc == {"ranges": [{"start": bad[0], "end": bad[1], "files": [
        {"path": "ckpt/shard-0.bin", "file_offset": bad[0] - phys + log, "length": 4096,
         "tensors": []}]}]}

    r = run("fs", "inspect", str(img), "--case", str(case), "--json")
    assert r.returncode == 1, r.stderr
    assert "XF001" in {f["code"] for f in json.loads(r.stdout)["findings"]}

    mp = tmp_path / "mnt"
    r = run("mount", str(img), str(mp), "--case", str(case))
    assert r.returncode == 0, r.stderr
    try:
        assert (mp / "ckpt" / "shard-0.bin").read_bytes() == payload
        r = run("copy", str(mp), "--case", str(case), "--dest", str(tmp_path / "copy"),
                "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["verified"] is True
    finally:
        r = run("umount", str(mp), "--case", str(case))
    assert r.returncode == 0, r.stderr
    assert fx.sha256(img) == before
    assert run("case", "verify", str(case)).returncode == 0


def test_bad_input_is_one_line_and_nonzero(tmp_path):
    case = tmp_path / "case"
    assert run("case", "new", str(case)).returncode == 0
    garbage = tmp_path / "x.map"
    garbage.write_text("this is not a mapfile\n")
    r = run("locate", "--case", str(case), str(garbage), str(garbage))
    assert r.returncode == 2
    assert r.stderr.startswith("ckptrescue: error: ") and "Traceback" not in r.stderr
    r = run("image", str(tmp_path / "missing"), "--case", str(case))
    assert r.returncode == 2 and "no such device or file" in r.stderr
    r = run("umount", str(tmp_path), "--case", str(case))
    assert r.returncode == 2 and "no mount recorded" in r.stderr
