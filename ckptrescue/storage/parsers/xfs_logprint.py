"""Parser for ``xfs_logprint -t`` (xfsprogs 6.1): the log head/tail and CLEAN/DIRTY state. Pure.

Real sample (fixtures/transcripts/xfs/)::

        log device: 0xffffffffffffffff daddr: 327728 length: 131072

        log tail: 14 head: 14 state: <CLEAN>
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_STATE = re.compile(r"log tail:\s*(\d+)\s+head:\s*(\d+)\s+state:\s*<(\w+)>")
_DEV = re.compile(r"daddr:\s*(\d+)\s+length:\s*(\d+)")


@dataclass(frozen=True)
class LogState:
    tail: int
    head: int
    state: str  # CLEAN or DIRTY
    daddr: int | None
    length: int | None

    @property
    def dirty(self) -> bool:
        return self.state.upper() != "CLEAN"


def parse(text: str) -> LogState | None:
    m = _STATE.search(text)
    if not m:
        return None
    d = _DEV.search(text)
    return LogState(int(m.group(1)), int(m.group(2)), m.group(3),
                    int(d.group(1)) if d else None, int(d.group(2)) if d else None)
