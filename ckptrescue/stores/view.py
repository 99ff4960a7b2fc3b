"""Probe in place: a read-only FUSE view of an object or prefix, served by ranged GETs.

``with open_view("s3://bucket/run/step-100/") as view: probe_paths([view.path])`` — the kit's
format readers (``open()``, ``os.pread()``, ``fstat()``, directory walks) run unchanged on
``view.path``, a local path under a fresh mount point whose files are the store's objects,
pinned to the version listed when the view opened. Bytes arrive through
:class:`~ckptrescue.stores.reader.RangeReader` (per-store concurrency, read-ahead, first/last
blocks cached) and are counted in ``view.accounting``. The kernel's page cache keeps what was
read (``kernel_cache``: a pinned version never changes), so a second pass over a file costs no
request.

Read-only three times over: the mount is ``ro``; the filesystem implements no write operation
(``open`` for writing is ``EROFS``); and the store's client refuses every non-read request.

The FUSE loop runs in a thread of this process (fusepy + libfuse2; needs ``/dev/fuse`` and root,
or ``fusermount``); leaving the ``with`` block — normally, by an exception or by Ctrl-C —
unmounts (``umount2``), stops the loop and removes the mount point. An ``atexit`` hook unmounts
views still open when the interpreter exits. A read that fails (network, 412 because the object
changed) is ``EIO`` to the reader, which the probe already reports per tensor.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import os
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.errors import RemoteError, ToolMissingError, UsageError, optional_module
from ckptrescue.stores.base import ObjectInfo, Store, StoreOptions, open_store
from ckptrescue.stores.reader import Accounting, ObjectAccount, RangeReader
from ckptrescue.stores.urls import parse_store_url

FSNAME = "ckptrescue-store"
MNT_DETACH = 2
# Blocks kept per object. The torch-zip probe walks two tensors at once; measured on a 256 MiB
# checkpoint (docs/stores.md): 24 blocks of 8 MiB re-read 19 %, 40 blocks read each byte once.
CACHE_BYTES = 320 << 20
_OPEN: set[str] = set()  # mount points of views still open in this process
_OPEN_LOCK = threading.Lock()


def _mtime(text: str | None) -> int:
    if not text:
        return 0
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1e9)
    except ValueError:
        return 0


def _operations_class() -> type:
    from fuse import FuseOSError, Operations

    class StoreFS(Operations):  # type: ignore[misc]
        """Files = the objects listed when the view opened; directories = their key prefixes."""

        use_ns = True

        def __init__(self, files: dict[str, tuple[ObjectInfo, RangeReader]],
                     dirs: dict[str, set[str]]) -> None:
            self.files, self.dirs = files, dirs
            self.uid, self.gid = os.getuid(), os.getgid()
            self.now = time.time_ns()

        def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
            base = {"st_uid": self.uid, "st_gid": self.gid, "st_ctime": self.now,
                    "st_atime": self.now}
            if path in self.dirs:
                return {**base, "st_mode": stat.S_IFDIR | 0o555, "st_nlink": 2,
                        "st_size": 0, "st_mtime": self.now}
            found = self.files.get(path)
            if found is None:
                raise FuseOSError(errno.ENOENT)
            obj = found[0]
            return {**base, "st_mode": stat.S_IFREG | 0o444, "st_nlink": 1,
                    "st_size": obj.size, "st_mtime": _mtime(obj.last_modified) or self.now,
                    "st_blocks": (obj.size + 511) // 512}

        def readdir(self, path: str, fh: Any) -> list[str]:
            if path not in self.dirs:
                raise FuseOSError(errno.ENOTDIR)
            return [".", "..", *sorted(self.dirs[path])]

        def open(self, path: str, flags: int) -> int:
            if path not in self.files:
                raise FuseOSError(errno.ENOENT)
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
                raise FuseOSError(errno.EROFS)
            return 0

        def read(self, path: str, size: int, offset: int, fh: Any) -> bytes:
            found = self.files.get(path)
            if found is None:
                raise FuseOSError(errno.ENOENT)
            try:
                return found[1].read(offset, size)
            except Exception as exc:
                raise FuseOSError(errno.EIO) from exc

        def statfs(self, path: str) -> dict[str, Any]:
            return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 0, "f_bfree": 0,
                    "f_bavail": 0, "f_files": len(self.files), "f_ffree": 0,
                    "f_namemax": 1024}

    return StoreFS


@dataclass
class StoreView:
    """An open view. ``path`` is what to hand probe/rank/salvage: the file for an object URL,
    the folder for a prefix URL. ``accounting.to_json()`` says what was read."""

    url: str
    path: Path
    mountpoint: Path
    store: Store
    accounting: Accounting
    objects: list[ObjectInfo] = field(default_factory=list)
    prefix: str = ""
    readers: dict[str, RangeReader] = field(default_factory=dict, repr=False)

    def url_of(self, path: str | os.PathLike[str]) -> str:
        """The store URL (with the pinned version) of a path inside the view."""
        rel = Path(path).resolve().relative_to(self.mountpoint.resolve()).as_posix()
        key = self.prefix + rel
        for obj in self.objects:
            if obj.key == key:
                return self.store.url_of(key, obj.version)
        return self.store.url.child(key)

    def settle(self) -> dict[str, Any]:
        """Wait for read-ahead in flight; the final accounting record."""
        for reader in self.readers.values():
            reader.drain()
        self.accounting.operations = dict(self.store.stats.operations)
        return self.accounting.to_json()


def _umount(mountpoint: str) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    for flags in (0, MNT_DETACH):
        if libc.umount2(mountpoint.encode(), flags) == 0:
            return True
        if ctypes.get_errno() in (errno.EINVAL, errno.ENOENT):  # not (or no longer) mounted
            return False
    return False


def mounted(mountpoint: str | os.PathLike[str]) -> bool:
    """Whether ``mountpoint`` is in this process's mount table (tests; cleanup)."""
    target = os.fspath(mountpoint)
    with open("/proc/self/mounts", encoding="utf-8") as fh:
        return any(line.split()[1].replace("\\040", " ") == target for line in fh)


def open_mounts() -> list[str]:
    """Mount points of this kit's store views in the mount table (any process)."""
    with open("/proc/self/mounts", encoding="utf-8") as fh:
        return [line.split()[1] for line in fh if line.split()[0] == FSNAME]


@atexit.register
def _unmount_leftovers() -> None:
    with _OPEN_LOCK:
        for mountpoint in list(_OPEN):
            _umount(mountpoint)
            _OPEN.discard(mountpoint)


def _tree(objects: list[ObjectInfo], prefix: str) -> tuple[dict[str, ObjectInfo],
                                                           dict[str, set[str]]]:
    files: dict[str, ObjectInfo] = {}
    dirs: dict[str, set[str]] = {"/": set()}
    for obj in objects:
        rel = obj.key[len(prefix):]
        parts = [p for p in rel.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            continue  # keys that are no path (``a//b`` collapses; ``..`` is never served)
        path = "/" + "/".join(parts)
        if path in dirs or path in files:
            continue
        parent = "/"
        for part in parts[:-1]:
            child = (parent.rstrip("/") + "/" + part)
            if child in files:
                break
            dirs.setdefault(parent, set()).add(part)
            dirs.setdefault(child, set())
            parent = child
        else:
            dirs[parent].add(parts[-1])
            files[path] = obj
    return files, dirs


@contextmanager
def open_view(url: str, *, options: StoreOptions | None = None, store: Store | None = None,
              mount_root: str | os.PathLike[str] | None = None) -> Iterator[StoreView]:
    """Mount a read-only view of ``url`` (an object, or every object under a prefix) and yield
    a :class:`StoreView`; unmount on leaving, whatever happens inside."""
    options = options or StoreOptions()
    target = parse_store_url(url)
    store = store or open_store(target, options)
    if not os.path.exists("/dev/fuse"):
        raise ToolMissingError("probing in place needs FUSE (/dev/fuse is missing)")
    with optional_module("probing in place needs fusepy and libfuse2",
                         hint="apt-get install libfuse2; pip install fusepy", also=(OSError,)):
        from fuse import FUSE
    prefix, objects, exact = store.resolve()
    if not objects:
        raise UsageError(f"{url}: no object at or under this URL")
    # The view shows the prefix's (or the object's) own name under the mount point, so that
    # names the kit reads meaning from (``checkpoint-100``, ``global_step5``) stay as they are.
    folder = prefix.rstrip("/")
    base = prefix if exact else (folder.rsplit("/", 1)[0] + "/" if "/" in folder else "")
    files_by_path, dirs = _tree(objects, base)
    tune = store.tuning
    accounting = Accounting(url=str(target), store=target.scheme)
    pool = ThreadPoolExecutor(max_workers=tune.concurrency, thread_name_prefix="ckr-range")
    cache_blocks = options.cache_blocks or max(3 * tune.readahead + 4,
                                               CACHE_BYTES // tune.block_size)
    files: dict[str, tuple[ObjectInfo, RangeReader]] = {}
    readers: dict[str, RangeReader] = {}
    for path, obj in files_by_path.items():
        accounting.objects[obj.key] = ObjectAccount(url=store.url_of(obj.key, obj.version),
                                                    key=obj.key, size=obj.size,
                                                    version=obj.version)
        reader = RangeReader(store, obj, pool, accounting, block_size=tune.block_size,
                             readahead=tune.readahead, cache_blocks=cache_blocks)
        files[path] = (obj, reader)
        readers[obj.key] = reader
    mountpoint = Path(tempfile.mkdtemp(prefix="ckr-view-", dir=mount_root))
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            FUSE(_operations_class()(files, dirs), str(mountpoint), foreground=True, ro=True,
                 nothreads=False, fsname=FSNAME, subtype=target.scheme, kernel_cache=True,
                 default_permissions=True, **({"allow_other": True} if os.geteuid() == 0
                                              else {}))
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=serve, name=f"ckr-fuse-{target.scheme}", daemon=True)
    try:
        thread.start()
        deadline = time.monotonic() + 15
        while not mounted(mountpoint):
            if not thread.is_alive() or time.monotonic() > deadline:
                detail = f": {failure[0]}" if failure else ""
                raise ToolMissingError(f"cannot mount the FUSE view of {url}{detail}",
                                       hint="needs root (or fusermount) and /dev/fuse")
            time.sleep(0.01)
        with _OPEN_LOCK:
            _OPEN.add(str(mountpoint))
        path = mountpoint / (objects[0].key if exact else folder)[len(base):]
        view = StoreView(url=str(target), path=path, mountpoint=mountpoint, store=store,
                         accounting=accounting, objects=objects, prefix=base,
                         readers=readers)
        yield view
        view.settle()
    finally:
        if mounted(mountpoint):
            _umount(str(mountpoint))
        thread.join(timeout=15)
        with _OPEN_LOCK:
            _OPEN.discard(str(mountpoint))
        pool.shutdown(wait=True, cancel_futures=True)
        accounting.operations = dict(store.stats.operations)
        try:
            mountpoint.rmdir()
        except OSError as exc:
            if mounted(mountpoint) or thread.is_alive():
                raise RemoteError(f"{mountpoint}: the FUSE view could not be unmounted "
                                  f"({exc})") from exc
