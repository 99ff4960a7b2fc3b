"""Walking a tar archive's member headers in place (POSIX ustar, GNU long names, pax), never
extracting: each member's name, type, size and the absolute offset of its data, so a format
inside the archive can be verified over its byte window (``.nemo`` archives).

Only headers are read (512 bytes each; data is skipped by seeking), so the walk costs one read
per member whatever the archive's size. Problems end the walk with a reason: a header whose
checksum does not match (damaged), member data running past the end of the file (truncated),
no end-of-archive marker (the archive was cut at a member boundary), a zero block followed by
more members (readers that stop at the first zero block, ``tarfile`` among them, lose them). A
gzip- or zstd-compressed archive (``tar.gz``/``.tgz``, ``tar.zst``) is walked over the
decompressed stream, read once (offsets are then stream offsets, not file offsets:
``compressed=True``; ``visit`` sees each regular member's bytes as they pass), and a bad
gzip CRC-32, a failed zstd checksum or a cut stream is a problem too.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ckptrescue.checkpoints.formats.chunked import skip
from ckptrescue.checkpoints.formats.regular_file import open_regular

BLOCK = 512
MAX_MEMBERS = 1_000_000
MAX_META = 1 << 20  # GNU long-name / pax records larger than this are not read


@dataclass
class TarMember:
    """One archive member: ``name`` without a leading ``./``; ``data_offset`` absolute."""

    name: str
    type: str  # "file", "dir", "link", "other"
    size: int
    header_offset: int
    data_offset: int


@dataclass
class TarWalk:
    """The members whose headers were read, and why the walk stopped early (if it did)."""

    members: list[TarMember] = field(default_factory=list)
    problems: list[tuple[str, str, int]] = field(default_factory=list)  # (kind, message, offset)
    end: int = 0  # where the walk stopped (after the end-of-archive blocks when complete)
    size: int = 0  # the file's size
    compressed: bool = False
    complete: bool = False  # end-of-archive marker reached

    def by_name(self) -> dict[str, TarMember]:
        return {m.name: m for m in self.members}


def octal(field_bytes: bytes) -> int | None:
    """A tar header's number field as ``tarfile`` reads it: GNU base-256 when the high bit is
    set, else octal digits up to the first NUL (blank: 0); None when they are not octal."""
    if field_bytes[:1] and field_bytes[0] & 0x80:  # GNU base-256 (sizes >= 8 GiB)
        return int.from_bytes(field_bytes[1:], "big")
    text = field_bytes.split(b"\x00", 1)[0].strip()
    if not text:
        return 0
    try:
        return int(text, 8)
    except ValueError:
        return None


def checksum_ok(header: bytes) -> bool:
    """The header's stored checksum equals the sum of its bytes, the checksum field counted as
    spaces (unsigned, or signed as old tar wrote it)."""
    stored = octal(header[148:156])
    if stored is None:
        return False
    blanked = header[:148] + b" " * 8 + header[156:]
    unsigned = sum(blanked)
    signed = sum(b - 256 if b > 127 else b for b in blanked)
    return stored in (unsigned, signed)


def _text(raw: bytes) -> str:
    return raw.split(b"\x00", 1)[0].decode("utf-8", "replace")


def normalize(name: str) -> str:
    """``./model_weights.ckpt`` -> ``model_weights.ckpt``; ``./`` -> ``""``."""
    while name.startswith("./"):
        name = name[2:]
    return "" if name == "." else name.rstrip("/") if name.endswith("/") else name


def _pax(data: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        sp = data.find(b" ", pos)
        if sp < 0:
            break
        try:
            length = int(data[pos:sp])
        except ValueError:
            break
        if length <= 0:
            break
        record = data[sp + 1:pos + length - 1]
        key, _, value = record.partition(b"=")
        out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
        pos += length
    return out


GZIP_MAGIC, ZSTD_MAGIC = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"


class MemberReader:
    """The bytes of one member of a compressed archive, as they pass (never more than its
    size): ``read(n)``; what ``visit`` leaves unread is skipped."""

    def __init__(self, fh: BinaryIO, size: int) -> None:
        self._fh, self.left = fh, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self._fh.read(n) if n else b""
        self.left -= len(data)
        return data


Visit = Callable[[TarMember, MemberReader], None]


def is_tar_header(block: bytes) -> bool:
    """A ustar/GNU header with a valid checksum (detection: never raises)."""
    return len(block) >= BLOCK and block[257:262] == b"ustar" and checksum_ok(block[:BLOCK])


def walk(path: Path, visit: Visit | None = None) -> TarWalk:
    """Every member header of ``path`` (plain, gzip- or zstd-compressed tar); for a compressed
    one, ``visit(member, reader)`` is called with each regular member's bytes as they pass."""
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        magic = fh.read(4)
        fh.seek(0)
        if magic[:2] == GZIP_MAGIC:
            out = TarWalk(size=size, compressed=True)
            try:
                with gzip.GzipFile(fileobj=fh) as gz:
                    _walk_stream(gz, out, None, visit)
                    while gz.read(1 << 20):  # to the end: gzip checks its CRC-32 and length
                        pass
            except (OSError, EOFError, zlib.error) as exc:
                kind = "truncated" if isinstance(exc, EOFError) else "gzip"
                out.problems.append((kind, f"gzip stream damaged or cut: {exc}", out.end))
            return out
        if magic == ZSTD_MAGIC:
            return _walk_zstd(fh, size, visit)
        out = TarWalk(size=size)
        _walk_stream(fh, out, size, None)
        return out


def _walk_zstd(fh: BinaryIO, size: int, visit: Visit | None) -> TarWalk:
    out = TarWalk(size=size, compressed=True)
    try:
        import zstandard
    except ImportError:
        out.problems.append(("zstd", "zstd-compressed archive: the zstandard module is not "
                             "installed", 0))
        return out
    try:
        with zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True,
                                                        closefd=False) as zs:
            _walk_stream(zs, out, None, visit)  # type: ignore[arg-type]
            while zs.read(1 << 20):  # to the end: every frame's checksum is checked
                pass
    except zstandard.ZstdError as exc:
        kind = "truncated" if "incomplete" in str(exc) or "truncated" in str(exc) else "zstd"
        out.problems.append((kind, f"zstd stream damaged or cut: {exc}", out.end))
    if out.complete is False and not out.problems:
        out.problems.append(("truncated", "zstd stream ends before the end-of-archive blocks",
                             out.end))
    return out


def _walk_stream(fh: BinaryIO, out: TarWalk, size: int | None,  # noqa: C901
                 visit: Visit | None = None) -> None:
    pos = 0
    long_name: str | None = None
    pax: dict[str, str] = {}
    for _ in range(MAX_MEMBERS):
        header = fh.read(BLOCK)
        out.end = pos
        if len(header) < BLOCK:
            out.problems.append(("truncated", "archive ends without the end-of-archive blocks"
                                 + (" (inside a header)" if header else ""), pos))
            return
        if header == b"\x00" * BLOCK:
            out.complete = True
            out.end = pos + BLOCK
            after = fh.read(BLOCK)  # a member header after a zero block: hidden from readers
            if len(after) == BLOCK and is_tar_header(after):  # that stop at the first one
                out.complete = False
                out.problems.append(("header", f"a zero block at offset {pos} is followed by "
                                     "a member header: readers that stop at the first zero "
                                     "block (tarfile) lose every member after it", pos))
            return
        if not checksum_ok(header):
            out.problems.append(("header", f"member header at offset {pos}: checksum mismatch "
                                 "(damaged header; members after it cannot be located)", pos))
            return
        kind = header[156:157]
        member_size = octal(header[124:136])
        if member_size is None:
            out.problems.append(("header", f"member header at offset {pos}: size field "
                                 "unreadable", pos))
            return
        if "size" in pax:
            if not pax["size"].isdigit():  # tarfile fails on it (EOFError): no reader agrees
                out.problems.append(("header", f"member header at offset {pos}: pax size "
                                     f"{pax['size'][:40]!r} is not a byte count", pos))
                return
            member_size = int(pax["size"])
        data_offset = pos + BLOCK
        padded = member_size + (-member_size % BLOCK)
        if kind in (b"L", b"x", b"g"):
            data = fh.read(min(member_size, MAX_META))
            if len(data) < min(member_size, MAX_META):
                out.problems.append(("truncated", f"archive cut inside a {kind.decode()} "
                                     f"record at offset {data_offset}", data_offset))
                return
            _skip(fh, padded - len(data), stream=size is None)
            if kind == b"L":
                long_name = _text(data)
            elif kind == b"x":
                pax = _pax(data)
            pos = data_offset + padded
            continue
        name = pax.get("path") or long_name
        if name is None:
            name = _text(header[0:100])
            prefix = _text(header[345:500]) if header[257:262] == b"ustar" else ""
            if prefix:
                name = f"{prefix}/{name}"
        long_name, pax = None, {}
        typ = {b"0": "file", b"\x00": "file", b"7": "file", b"5": "dir", b"1": "link",
               b"2": "link"}.get(kind, "other")
        if typ == "dir":
            member_size = padded = 0
        out.members.append(TarMember(normalize(name), typ, member_size, pos, data_offset))
        if size is not None and data_offset + member_size > size:
            out.problems.append(("truncated", f"{normalize(name)}: {member_size} bytes declared, "
                                 f"the file ends {size - data_offset} bytes into it",
                                 data_offset))
            out.end = size
            return
        left = padded
        if visit is not None and typ == "file" and size is None:
            reader = MemberReader(fh, member_size)
            visit(out.members[-1], reader)
            left = padded - (member_size - reader.left)
        if not _skip(fh, left, stream=size is None):
            out.problems.append(("truncated", f"{normalize(name)}: archive cut inside the "
                                 "member's data", data_offset))
            return
        pos = data_offset + padded
    out.problems.append(("header", f"more than {MAX_MEMBERS} members: walk stopped", pos))


def _skip(fh: BinaryIO, n: int, *, stream: bool = False) -> bool:
    """Skip ``n`` bytes (seek on a file; read through on a decompressed stream)."""
    if n <= 0:
        return True
    if stream or isinstance(fh, gzip.GzipFile):
        return skip(fh, n) == n
    fh.seek(n, os.SEEK_CUR)
    return True


def iter_files(tw: TarWalk) -> Iterator[TarMember]:
    """The regular-file members."""
    return (m for m in tw.members if m.type == "file")
