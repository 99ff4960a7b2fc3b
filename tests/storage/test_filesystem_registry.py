"""The filesystem registry (``ckptrescue/storage/filesystem.py``, ``storage/filesystems/``):
every module provides the hooks, and the registry covers what the guard mounts and what blkid
reports."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator

import pytest

from ckptrescue.guard import GuardContext, check
from ckptrescue.guard.tools.mounting import REQUIRED_MOUNT_OPTIONS, RO_MOUNT_TYPES
from ckptrescue.storage import candidates, filesystem, filesystems
from ckptrescue.storage.filesystem import Filesystem
from fixtures import storage as fx

# TYPE names `blkid -p` reports for what the kit mounts, inspects or locates
BLKID_TYPES = {"xfs", "ext2", "ext3", "ext4", "btrfs", "vfat", "exfat", "iso9660", "squashfs",
               "udf", "ntfs", "zfs_member", "LVM2_member"}
HOOKS = ("mount_options", "clone_options", "mount", "unmount", "inspect", "mounted_findings",
         "locate_offline", "locate_unidentified", "locate_image", "mounted_locate_refusal",
         "copy_sources")


def _modules() -> list[str]:
    return [i.name for i in pkgutil.iter_modules(filesystems.__path__) if not i.name.startswith("_")]


@pytest.mark.parametrize("name", _modules())
def test_every_module_registers_filesystems_with_the_hooks(name: str) -> None:
    module = importlib.import_module(f"ckptrescue.storage.filesystems.{name}")
    classes = getattr(module, "FILESYSTEMS", None)
    assert classes, f"{name}.py defines no FILESYSTEMS"
    for fs in classes:
        assert issubclass(fs, Filesystem) and fs is not Filesystem
        assert fs.name and fs.name != "unknown" and fs.title != "unknown"
        assert fs.types and all(isinstance(t, str) and t for t in fs.types)
        for hook in HOOKS:
            assert inspect.ismethod(getattr(fs, hook)), f"{fs.__name__}.{hook}"
        for kind, pattern in fs.kernel_patterns:
            assert kind and isinstance(pattern, re.Pattern)
        assert bool(fs.sysfs_dir) == bool(fs.sysfs_attrs)
        for t in fs.types:
            opts = fs.mount_options(t).split(",")
            assert opts[0] == "ro" and all(o in opts for o in REQUIRED_MOUNT_OPTIONS)


def test_types_are_owned_once_and_found() -> None:
    owned = [t for fs in filesystem.registry() for t in fs.types]
    assert len(owned) == len(set(owned))
    assert filesystem.get("no-such-fs") is Filesystem
    assert filesystem.find("ext3") is filesystem.find("ext4") is not None
    assert not hasattr(importlib.import_module("ckptrescue.storage.filesystems._example"),
                       "FILESYSTEMS")  # the documented example is not registered


def test_registry_covers_the_guards_mount_types_and_blkid_types() -> None:
    owned = {t for fs in filesystem.registry() for t in fs.types}
    assert set(RO_MOUNT_TYPES) <= owned, set(RO_MOUNT_TYPES) - owned
    known = owned | set(candidates.VOLUME_MANAGERS)
    assert known >= BLKID_TYPES, BLKID_TYPES - known
    assert candidates.volume_manager("LVM2_member") is not None
    assert not set(candidates.VOLUME_MANAGERS) & owned  # a volume manager is not a filesystem


@pytest.fixture(scope="module")
def ro_loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A read-only loop device of this module's own (a shared node such as /dev/loop0 may be
    attached writable by another test at that moment, and the guard asks the kernel)."""
    image = tmp_path_factory.mktemp("registry") / "blank.img"
    with open(image, "wb") as fh:
        fh.truncate(1 << 20)
    with fx.loop(image, read_only=True) as dev:
        yield dev


@pytest.mark.privileged
@pytest.mark.parametrize("fstype", sorted(RO_MOUNT_TYPES - {"zfs"}))
@pytest.mark.parametrize("kernel", ["5.4.0-150-generic", "6.1.0-57-amd64"])
def test_the_guard_accepts_the_registrys_mount_form(fstype: str, kernel: str, tmp_path,
                                                    ro_loop: str) -> None:
    mp = tmp_path / "mnt"
    mp.mkdir()
    opts = filesystem.ro_options(fstype, kernel)
    decision = check(["mount", "-t", fstype, "-o", opts, ro_loop, str(mp)], GuardContext())
    assert decision.allowed, (fstype, opts, decision)
    if fstype in {"xfs", "ext3", "ext4", "btrfs"}:  # and the no-replay option is what it needs
        plain = "ro," + ",".join(REQUIRED_MOUNT_OPTIONS)
        refused = check(["mount", "-t", fstype, "-o", plain, ro_loop, str(mp)],
                        GuardContext())
        assert not refused.allowed


def test_zfs_mounts_by_pool_import() -> None:
    zfs = filesystem.get("zfs_member")
    assert zfs is filesystem.get("zfs") and zfs.mounted_locate_refusal()
    assert filesystem.get("xfs").mounted_locate_refusal() is None


@pytest.mark.parametrize("fstype", ["ext4", "xfs", "btrfs", "vfat"])
def test_blkid_names_what_mkfs_made_with_a_registered_type(fstype: str, shm_dir) -> None:
    import shutil

    if shutil.which(f"mkfs.{fstype}") is None:
        pytest.skip(f"mkfs.{fstype} not installed")
    img = shm_dir / f"{fstype}.img"
    with open(img, "wb") as fh:
        fh.truncate(320 << 20)
    args = {"vfat": [], "xfs": ["-q"], "btrfs": ["-q"], "ext4": ["-q", "-F"]}[fstype]
    fx.sh(f"mkfs.{fstype}", *args, str(img))
    got = fx.sh("blkid", "-p", "-o", "value", "-s", "TYPE", str(img)).stdout.strip()
    assert got in BLKID_TYPES and filesystem.find(got) is not None, got
