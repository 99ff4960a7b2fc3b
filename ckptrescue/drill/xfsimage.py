"""Build the drill's XFS image with ``mkfs.xfs -p PROTOFILE`` (no mount, no root needed) and
find where a file's bytes landed with ``xfs_db -r``.

This is a builder of synthetic disks, not an evidence handler: it runs ``mkfs.xfs`` (which the
guard rightly refuses for the kit's incident work) through the runner's ``run_internal``, on a
file it creates itself.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from ckptrescue.effects.runner import SubprocessRunner
from ckptrescue.errors import ToolFailedError, ToolMissingError

IMAGE_SIZE = 320 * 1024 * 1024  # mkfs.xfs 6.x refuses filesystems under 300 MB


def _tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if path is None:
        raise ToolMissingError(f"{name}: not installed", hint="run `make setup` as root")
    return path


def _protofile(root: Path) -> str:
    lines = ["/dev/null", "0 0", "d--755 0 0"]

    def walk(directory: Path, depth: int) -> None:
        for entry in sorted(directory.iterdir()):
            pad = " " * depth
            if entry.is_dir():
                lines.append(f"{pad}{entry.name} d--755 0 0")
                walk(entry, depth + 1)
                lines.append(f"{pad}$")
            elif entry.is_file():
                if any(c.isspace() for c in entry.name):
                    raise ToolFailedError(f"{entry}: drill file names must not contain spaces")
                lines.append(f"{pad}{entry.name} ---644 0 0 {entry.resolve()}")

    walk(root, 1)
    lines.append("$")
    return "\n".join(lines) + "\n"


def build(root: Path, image: Path) -> None:
    """Create ``image`` (sparse, 320 MiB) holding the tree under ``root``."""
    proto = image.with_suffix(".proto")
    proto.write_text(_protofile(root))
    with open(image, "wb") as fh:
        fh.truncate(IMAGE_SIZE)
    res = SubprocessRunner(None).run_internal(
        [_tool("mkfs.xfs"), "-q", "-f", "-p", str(proto), str(image)],
        purpose="drill: build the synthetic XFS image", timeout_s=300)
    proto.unlink()
    if res.returncode != 0:
        raise ToolFailedError(f"mkfs.xfs failed: {res.stderr.strip().splitlines()[-1:]}")


def _xfs_db(image: Path, *commands: str) -> str:
    argv = [_tool("xfs_db"), "-r"]
    for c in commands:
        argv += ["-c", c]
    res = SubprocessRunner(None).run_internal([*argv, str(image)], purpose="drill: xfs_db -r",
                                              timeout_s=120)
    if res.returncode != 0:
        raise ToolFailedError(f"xfs_db failed: {res.stderr.strip()}")
    return res.stdout


def extents(image: Path, fs_path: str) -> list[tuple[int, int, int]]:
    """``(file_offset, disk_offset, length)`` in bytes for every extent of ``fs_path``."""
    sb = _xfs_db(image, "sb 0", "print blocksize")
    blocksize = int(sb.split("=")[1])
    out = _xfs_db(image, f"path /{fs_path.lstrip('/')}", "bmap")
    result = []
    for m in re.finditer(r"data offset (\d+) startblock (\d+) \((\d+)/(\d+)\) count (\d+)", out):
        file_block, fsblock, count = int(m.group(1)), int(m.group(2)), int(m.group(5))
        daddr = _xfs_db(image, f"convert fsblock {fsblock} daddr")
        sector = int(re.search(r"\((\d+)\)", daddr).group(1))  # type: ignore[union-attr]
        result.append((file_block * blocksize, sector * 512, count * blocksize))
    if not result:
        raise ToolFailedError(f"xfs_db found no extents for /{fs_path}")
    return result


def disk_range(image: Path, fs_path: str, file_offset: int, length: int) -> list[tuple[int, int]]:
    """Map a byte range of a file to device byte ranges."""
    ranges = []
    for f_off, d_off, ext_len in extents(image, fs_path):
        lo = max(file_offset, f_off)
        hi = min(file_offset + length, f_off + ext_len)
        if lo < hi:
            ranges.append((d_off + (lo - f_off), d_off + (hi - f_off)))
    return ranges
