"""One grammar per allowlisted tool, grouped by area. ``GRAMMARS`` maps a tool name to its
:class:`~ckptrescue.guard.grammar.Grammar`, :class:`Subcommands` or custom checker;
``REFUSED`` maps tools that are never run to the reason."""

from __future__ import annotations

from ckptrescue.guard.tools import (
    cluster,
    devices,
    filesystems,
    imaging,
    logs,
    mounting,
    readonly,
    refused,
    zfs,
)
from ckptrescue.guard.tools._base import Entry
from ckptrescue.guard.tools._base import Subcommands as Subcommands  # for guard.check

GRAMMARS: dict[str, Entry] = {}
for _module in (readonly, filesystems, mounting, devices, imaging, logs, zfs, cluster):
    for _name, _entry in _module.TOOLS.items():
        if _name in GRAMMARS:
            raise RuntimeError(f"two grammars for {_name}")
        GRAMMARS[_name] = _entry

REFUSED: dict[str, str] = dict(refused.REFUSED)
