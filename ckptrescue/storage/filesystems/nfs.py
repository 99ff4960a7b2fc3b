"""NFS (``nfs``, ``nfs4``): a copy source the kit never mounts; no inspection, no offline map.

Identity (server, ``addr=``, export) comes from ``/proc/self/mountinfo``
(``ckptrescue/storage/netfs.py``), which decides whether a copy destination could be the same
storage. Kernel log patterns (``triage``, TR004):

* ``nfs: server HOST not responding, still trying`` / ``..., timed out`` —
  ``net/sunrpc/clnt.c`` (``rpc_check_timeout``: ``"%s: server %s not responding, %s\\n"`` with
  the RPC program name ``nfs`` and ``"still trying"``/``"timed out"``), seen in real logs as
  ``nfs: server 10.100.0.60 not responding, still trying``.
* ``NFS: server HOST error: fileid changed`` — ``fs/nfs/inode.c`` (``nfs_update_inode``).
* ``Stale file handle`` — ``strerror(ESTALE)`` (glibc), the text daemons and the NFS client's
  users log when the server no longer knows a file handle (nfs(5), "ESTALE").
"""

from __future__ import annotations

import re
from typing import ClassVar

from ckptrescue.storage.filesystem import Filesystem

KERNEL_PATTERN = re.compile(r"\bnfs: server \S+ not responding|NFS: server \S+ error: fileid "
                            r"changed|stale (?:nfs )?file ?handle", re.IGNORECASE)


class Nfs(Filesystem):
    """NFS client mounts; evidence on NFS is copied (``copy``), never mounted by the kit."""

    name: ClassVar[str] = "nfs"
    title: ClassVar[str] = "NFS"
    types: ClassVar[tuple[str, ...]] = ("nfs", "nfs4")
    order: ClassVar[int] = 70
    kernel_patterns: ClassVar[tuple[tuple[str, re.Pattern[str]], ...]] = (("nfs", KERNEL_PATTERN),)


FILESYSTEMS = [Nfs]
