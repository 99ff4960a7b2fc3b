"""CRC-32 (the zip / gzip polynomial) at the speed of the machine.

``crc32(data, value=0)`` has ``zlib.crc32``'s signature and result. It is ISA-L's
implementation (the ``isal`` package, a core dependency: folded PCLMULQDQ, ~3x zlib's table
CRC on x86-64) when it imports, else ``zlib.crc32``; the probe's CRC pass streams every record
of a checkpoint through it, so this is where verification time goes.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

crc32: Callable[..., int]
IMPLEMENTATION: str

try:
    from isal.isal_zlib import crc32 as _isal_crc32
except ImportError:  # pragma: no cover - isal is a core dependency; zlib is the fallback
    crc32, IMPLEMENTATION = zlib.crc32, "zlib"
else:
    crc32, IMPLEMENTATION = _isal_crc32, "isal"
