"""GPFS / IBM Storage Scale (``gpfs``): a copy source the kit never mounts; identity (the file
system device) in ``ckptrescue/storage/netfs.py``.

Kernel/system log pattern (``triage``, TR004): GPFS logs to ``/var/adm/ras/mmfs.log.latest``
and to the system log under the tag ``mmfs`` (IBM Storage Scale Problem Determination Guide,
"GPFS logs"); its messages carry a severity tag ``[E]`` (error) or ``[X]`` (critical), and the
failures that matter here say ``Unmounting file system``, ``expelled`` or ``lost``. The
pattern requires the ``mmfs``/``mmfsd`` tag AND one of those, so informational GPFS lines are
not reported. This pattern is from the vendor documentation of the log format, not from a real
captured log: no published GPFS kernel log with provenance was found (docs/storage.md).

No ``mmlsattr``/``mmlsfs`` read forms are allowlisted: see docs/storage.md.
"""

from __future__ import annotations

import re
from typing import ClassVar

from ckptrescue.storage.filesystem import Filesystem

KERNEL_PATTERN = re.compile(r"\bmmfsd?\b.*(?:\[[EX]\]|Unmounting file system|expelled|"
                            r"lost (?:connection|quorum)|I/O error|panic)", re.IGNORECASE)


class Gpfs(Filesystem):
    """GPFS client mounts; evidence on GPFS is copied, never mounted by the kit."""

    name: ClassVar[str] = "gpfs"
    title: ClassVar[str] = "GPFS (IBM Storage Scale)"
    types: ClassVar[tuple[str, ...]] = ("gpfs",)
    order: ClassVar[int] = 70
    kernel_patterns: ClassVar[tuple[tuple[str, re.Pattern[str]], ...]] = (("gpfs", KERNEL_PATTERN),)


FILESYSTEMS = [Gpfs]
