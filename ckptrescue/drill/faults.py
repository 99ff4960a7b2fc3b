"""Fault injection on the drill's own copies (pure byte manipulation of files we just wrote)."""

from __future__ import annotations

import os
from pathlib import Path


def flip_bit(path: Path, offset: int, bit: int) -> None:
    """Flip one bit of the byte at ``offset``."""
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([byte ^ (1 << bit)]))


def truncate(path: Path, fraction: float) -> int:
    """Cut the file to ``fraction`` of its length; returns the new length."""
    size = path.stat().st_size
    new = max(1, int(size * fraction))
    os.truncate(path, new)
    return new


def badsector_mapfile(size: int, bad: list[tuple[int, int]]) -> str:
    """A ddrescue test-mode map (``-H``): listed ``+`` blocks read fine, ``-`` blocks fail."""
    lines = ["# Mapfile. Created by ckptrescue drill (ddrescue test-mode map)",
             "# current_pos  current_status  current_pass",
             "0x00000000     +               1",
             "#      pos        size  status"]
    pos = 0
    for start, end in sorted(bad):
        if start > pos:
            lines.append(f"0x{pos:08X}  0x{start - pos:08X}  +")
        lines.append(f"0x{start:08X}  0x{end - start:08X}  -")
        pos = end
    if pos < size:
        lines.append(f"0x{pos:08X}  0x{size - pos:08X}  +")
    return "\n".join(lines) + "\n"
