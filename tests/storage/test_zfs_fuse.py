"""ZFS for real on this machine: Debian's zfs-fuse (a userspace ZFS, pool version 23).

The tests make their own pools from file vdevs, then run the kit's ZFS paths against the real
``zpool``/``zfs``/``zdb`` of zfs-fuse: the label read, the import scan, live ``zpool status`` and
``zfs get`` of an imported pool, and the read-only import — which zfs-fuse cannot do (no
``-o readonly=on``, no ``-N``): the kit refuses it with a clear error, and zfs-fuse itself rejects
the kit's import command. Every vdev file hashes the same before and after. What zfs-fuse lacks
(read-only import, ``status -P``/``-j``, ``zpool events``, ``encryption``) stays covered by the lab
recordings in ``fixtures/transcripts/zfs`` (docs/storage.md).

The daemon is started here when none runs (and stopped at the end); pools are created with
``cachefile=none`` and destroyed by the test that made them, even when it fails.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptrescue.record.case import Case
from ckptrescue.storage import zfs_pool

SOCKET = zfs_pool.ZFS_FUSE_SOCKET
VDEV_BYTES = 96 << 20  # zfs-fuse refuses vdevs under 64 MiB
# one worker runs them all (privileged: the "kernel" group, tests/conftest.py): the daemon one
# worker starts is stopped when its module ends, and a test of the module on another worker
# would then lose it mid-command (zpool killed by SIGPIPE)
pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("zfs-fuse", "zpool", "zfs", "zdb")]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def zcmd(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The test's own pool set-up (create, export, destroy): not the kit's commands."""
    res = subprocess.run(list(argv), capture_output=True, text=True, timeout=120)
    if check and res.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: rc {res.returncode}: {res.stderr}")
    return res


@pytest.fixture(scope="module")
def zfs_fuse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A running zfs-fuse daemon: the one already running, or one started (and stopped) here."""
    if os.path.exists(SOCKET) and zcmd("zpool", "list", check=False).returncode == 0:
        yield
        return
    if not os.path.exists("/dev/fuse"):
        pytest.fail("zfs-fuse needs /dev/fuse, which this machine does not have")
    log = tmp_path_factory.mktemp("zfs-fuse") / "daemon.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(["zfs-fuse", "--no-daemon", "--no-kstat-mount"],
                                stdout=fh, stderr=fh, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (os.path.exists(SOCKET) and zcmd("zpool", "list", check=False).returncode == 0):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"zfs-fuse did not start (exit {proc.poll()}): "
                            f"{log.read_text(errors='replace')[-500:]}")
            time.sleep(0.2)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def pool(zfs_fuse: None, tmp_path: Path) -> Iterator[dict[str, object]]:
    """A two-way mirror of two file vdevs with a dataset (compression and sha256 checksums
    set), made by the test and destroyed after it; left imported (the live case)."""

    name = f"ckrt{os.getpid()}{tmp_path.name[-6:].replace('-', '')}"[:24]
    vdevs = [tmp_path / "vdevs" / f"v{i}.img" for i in (1, 2)]
    vdevs[0].parent.mkdir()
    for v in vdevs:
        with open(v, "wb") as fh:
            fh.truncate(VDEV_BYTES)
    zcmd("zpool", "create", "-o", "cachefile=none", "-m", "none", name, "mirror",
         *map(str, vdevs))
    try:
        zcmd("zfs", "create", "-o", "compression=on", "-o", "checksum=sha256",
             "-o", "mountpoint=none", f"{name}/run")
        time.sleep(1)  # let the creating transactions reach the disk before hashing
        yield {"name": name, "vdevs": vdevs, "dir": vdevs[0].parent}
    finally:
        if zcmd("zpool", "list", name, check=False).returncode != 0:  # exported by the test
            zcmd("zpool", "import", "-o", "cachefile=none", "-d", str(vdevs[0].parent), name,
                 check=False)
        zcmd("zpool", "destroy", "-f", name, check=False)


def test_inspect_reads_a_live_zfs_fuse_pool(pool: dict, tmp_path: Path) -> None:
    """fs inspect of a member of a pool imported here: labels, zpool status (without -P, which
    zfs-fuse lacks), zfs get (asked again without `encryption`, which it does not know)."""
    from ckptrescue.storage.fsinspect import fs_inspect

    vdevs: list[Path] = pool["vdevs"]  # type: ignore[assignment]
    before = [sha256(v) for v in vdevs]
    case = Case.create(tmp_path / "case", title="zfs-fuse live pool")
    res = fs_inspect(vdevs[0], case=case, health=False)
    facts = res.facts
    assert res.fstype == "zfs_member"
    assert facts["zfs_implementation"] == "zfs-fuse"
    assert facts["label"]["pool"] == pool["name"] and facts["label"].get("version") == 23
    assert facts["pool"] == pool["name"], facts.get("live_pool_skipped")
    assert facts["zpool_status_form"].startswith("-v") and facts["zpool_status_rc"] == 0
    assert facts["zfs_properties_unknown_here"] == ["encryption"]
    run = facts["datasets"][f"{pool['name']}/run"]
    assert (run["compression"], run["checksum"]) == ("on", "sha256")
    assert facts["datasets"][pool["name"]]["checksum"] == "on"
    assert "this ZFS keeps no event log" in facts["zpool_events"]
    assert not [f for f in res.findings if f.code in {"ZF001", "ZF002", "ZF003"}]
    assert [sha256(v) for v in vdevs] == before


def test_an_exported_pool_is_found_by_a_scan_that_imports_nothing(pool: dict,
                                                                 tmp_path: Path) -> None:
    from ckptrescue.storage.fsinspect import fs_inspect

    vdevs: list[Path] = pool["vdevs"]  # type: ignore[assignment]
    zcmd("zpool", "export", str(pool["name"]))
    before = [sha256(v) for v in vdevs]
    case = Case.create(tmp_path / "case", title="zfs-fuse exported pool")
    res = fs_inspect(vdevs[1], case=case, health=False)
    assert res.facts["import_scan_rc"] == 0
    assert res.facts["import_scan"]["state"] == "ONLINE"
    assert zcmd("zpool", "list", str(pool["name"]), check=False).returncode != 0, "imported!"
    assert [sha256(v) for v in vdevs] == before


def test_the_read_only_import_is_refused_on_zfs_fuse_and_nothing_is_written(
        pool: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """zfs-fuse cannot import read-only: the kit says so before running anything, and the
    kit's own import command, given to zfs-fuse anyway, is rejected by it (not run read-write).
    """
    from ckptrescue.effects.runner import SubprocessRunner
    from ckptrescue.errors import ToolFailedError
    from ckptrescue.storage.mounting import mount

    vdevs: list[Path] = pool["vdevs"]  # type: ignore[assignment]
    guid = zcmd("zpool", "get", "-H", "-o", "value", "guid", str(pool["name"]),
                check=False).stdout.strip() or zcmd(
        "zpool", "list", "-H", "-o", "guid", str(pool["name"])).stdout.strip()
    zcmd("zpool", "export", str(pool["name"]))
    before = [sha256(v) for v in vdevs]
    case = Case.create(tmp_path / "case", title="zfs-fuse import")
    with pytest.raises(ToolFailedError, match=r"zfs-fuse .*no read-only import"):
        mount(vdevs[0], tmp_path / "mnt", case=case, members=[str(vdevs[1])])
    # were the detection wrong, the kit's own import command would reach zfs-fuse: it rejects
    # readonly=on (and exits 0 all the same); the kit checks what was imported, not the exit code
    monkeypatch.setattr(zfs_pool, "implementation", lambda: ("openzfs", "detection fooled"))
    runner = SubprocessRunner(case)
    with pytest.raises(ToolFailedError, match="reported success but no pool"):
        zfs_pool.import_readonly(runner, members=[str(pool["dir"])],
                                 fsinfo={"LABEL": str(pool["name"]), "UUID": guid},
                                 altroot=str(tmp_path / "alt"), images_only=True,
                                 evidence=str(vdevs[0]))
    runs = [r["details"] for r in case.records() if r["action"] == "tool.run"
            and r["details"]["argv"][:2] == ["zpool", "import"]]
    assert runs and all("readonly=on" in d["argv"] and "-N" in d["argv"] for d in runs)
    stderr = case.artifact_path(runs[-1]["stderr_sha256"]).read_text()
    assert "'readonly' is not a valid pool property" in stderr, stderr
    listed = zcmd("zpool", "list", "-H", "-o", "name").stdout.split()
    assert str(pool["name"]) not in listed and not [n for n in listed if n.startswith("ckr_")]
    assert [sha256(v) for v in vdevs] == before
    assert not any(str(tmp_path) in line for line in subprocess.run(
        ["losetup", "-a"], capture_output=True, text=True).stdout.splitlines())


def test_zdb_reads_the_labels_of_a_zfs_fuse_member(pool: dict) -> None:
    """The label parser agrees with zfs-fuse's own zdb on a real member."""
    from ckptrescue.storage.parsers import zfs_label

    vdevs: list[Path] = pool["vdevs"]  # type: ignore[assignment]
    zcmd("zpool", "export", str(pool["name"]))
    before = sha256(vdevs[0])
    zdb = zcmd("zdb", "-l", str(vdevs[0])).stdout
    size = vdevs[0].stat().st_size
    with open(vdevs[0], "rb") as fh:
        rep = zfs_label.read_member(lambda off, n: os.pread(fh.fileno(), n, off), size)
    summary = rep.summary()
    assert f"name: '{summary['pool']}'" in zdb and f"pool_guid: {summary['pool_guid']}" in zdb
    assert "version: 23" in zdb and shutil.which("zdb")
    assert sha256(vdevs[0]) == before
