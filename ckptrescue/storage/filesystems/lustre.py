"""Lustre (``lustre``): a copy source the kit never mounts; identity (MGS NIDs and fsname from
the mount source ``mgsnid[:mgsnid]:/fsname``) in ``ckptrescue/storage/netfs.py``.

Kernel log patterns (``triage``, TR004), from the Lustre source (lustre-release):

* ``LustreError:`` — the console prefix of every ``D_ERROR``/``CERROR`` message
  (``libcfs``), e.g. ``LustreError: 11-0: ...``.
* ``This client was evicted by FSNAME-OST0000; in progress operations using this service will
  fail.`` — ``lustre/ptlrpc/import.c`` (``ptlrpc_import_recovery_state_machine`` /
  ``LCONSOLE_ERROR_MSG(0x167, ...)``).
* ``Connection to FSNAME-OST0000 (at NID) was lost; in progress operations using this service
  will wait for recovery to complete`` — ``lustre/ptlrpc/import.c``.
* ``@@@ Request sent has timed out for slow reply`` / ``for sent delay`` —
  ``lustre/ptlrpc/client.c`` (``ptlrpc_expire_one_request``), printed with the ``Lustre:``
  prefix, e.g. ``Lustre: 3389:0:(client.c:2295:ptlrpc_expire_one_request()) @@@ Request sent
  has timed out for slow reply: ... o400->DIAS-OST0002-osc-...``.

No ``lfs`` read forms are allowlisted: see docs/storage.md, "Network and parallel filesystems".
"""

from __future__ import annotations

import re
from typing import ClassVar

from ckptrescue.storage.filesystem import Filesystem

KERNEL_PATTERN = re.compile(r"LustreError:|Lustre: .*(?:evicted by|Request sent has timed out|"
                            r"was lost; in progress operations)|\bptlrpc_expire_one_request\b")


class Lustre(Filesystem):
    """Lustre client mounts; evidence on Lustre is copied, never mounted by the kit."""

    name: ClassVar[str] = "lustre"
    title: ClassVar[str] = "Lustre"
    types: ClassVar[tuple[str, ...]] = ("lustre",)
    order: ClassVar[int] = 70
    kernel_patterns: ClassVar[tuple[tuple[str, re.Pattern[str]], ...]] = (
        ("lustre", KERNEL_PATTERN),)


FILESYSTEMS = [Lustre]
