"""Hostile torch zips built from bytes, and torch's own loader as the oracle (in a subprocess).

Every archive starts as a real ``torch.save`` of ``torch.arange`` tensors. :func:`parse` splits
it into local records and central-directory entries (plain byte parsing, nothing is unpickled),
:func:`build` writes an archive back the way torch lays it out (central directory, zip64 end
record and locator, EOCD), so a test can rename, duplicate, deflate, flag or move entries.
:class:`Oracle` runs ``torch.load(weights_only=True)`` on files in one child process (one torch
import for many files; a child that dies is restarted after the file that killed it).
"""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

EOCD, Z64, LOC, CEN = b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07", b"PK\x01\x02"

ORACLE = r"""
import gc, hashlib, json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
gc.disable()  # what the imports make lives to the end: no collection walks it
import torch
gc.freeze()
gc.enable()

def flat(obj, pre=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from flat(v, f"{pre}{k}.")
    elif isinstance(obj, torch.Tensor):
        yield pre.rstrip("."), obj

for line in sys.stdin:
    path = line.strip()
    try:
        obj = torch.load(path, weights_only=True)
        out = {n: hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
               .hexdigest()[:16] for n, t in flat(obj)}
        res = {"ok": True, "tensors": out}
    except BaseException as exc:  # noqa: BLE001
        res = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    print(json.dumps(res), flush=True)
"""


def state() -> dict:
    import torch

    return {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4),
            "b": torch.arange(5, dtype=torch.int64)}


def torch_bytes(obj: object | None = None) -> bytes:
    import io

    import torch

    buf = io.BytesIO()
    torch.save(state() if obj is None else obj, buf)
    return buf.getvalue()


def tensor_hashes(obj: dict) -> dict[str, str]:
    return {n: hashlib.sha256(t.contiguous().reshape(-1).view(__import__("torch").uint8)
                              .numpy().tobytes()).hexdigest()[:16] for n, t in obj.items()}


@dataclass
class Entry:
    """One member: its central header fields (46 bytes), name, extras and stored data."""

    head: bytearray  # the 46-byte central header
    name: bytes
    extra: bytes = b""
    comment: bytes = b""
    data: bytes = b""  # the bytes after the local header (compressed if deflated)
    local_extra: bytes = b""
    local_name: bytes | None = None
    lho: int | None = None  # set by build (or forced by a test)
    fields: dict[str, int] = field(default_factory=dict)

    def set(self, fmt: str, off: int, value: int) -> None:
        struct.pack_into(fmt, self.head, off, value)

    def get(self, fmt: str, off: int) -> int:
        return struct.unpack_from(fmt, self.head, off)[0]


def parse(data: bytes) -> list[Entry]:
    """Central entries of a torch zip (zip64 end record), with each member's stored bytes."""
    eocd = data.rfind(EOCD)
    loc = eocd - 20
    (z64_off,) = struct.unpack_from("<Q", data, loc + 8)
    n, _, cd_size, cd_off = struct.unpack_from("<QQQQ", data, z64_off + 24)
    entries, i = [], cd_off
    for _ in range(n):
        head = bytearray(data[i:i + 46])
        nlen, xlen, clen = struct.unpack_from("<HHH", head, 28)
        name = data[i + 46:i + 46 + nlen]
        extra = data[i + 46 + nlen:i + 46 + nlen + xlen]
        comment = data[i + 46 + nlen + xlen:i + 46 + nlen + xlen + clen]
        lho = struct.unpack_from("<I", head, 42)[0]
        lnlen, lxlen = struct.unpack_from("<HH", data, lho + 26)
        start = lho + 30 + lnlen + lxlen
        csize = struct.unpack_from("<I", head, 20)[0]
        entries.append(Entry(head, name, extra, comment, data[start:start + csize],
                             data[lho + 30 + lnlen:start]))
        i += 46 + nlen + xlen + clen
    return entries


def entry(entries: list[Entry], suffix: str) -> Entry:
    return next(e for e in entries if e.name.endswith(b"/" + suffix.encode()))


def deflate(e: Entry) -> None:
    """Store the member deflated (method 8), CRC and sizes kept consistent."""
    raw = e.data
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    e.data = c.compress(raw) + c.flush()
    e.set("<H", 10, 8)
    e.set("<I", 20, len(e.data))
    e.set("<I", 24, len(raw))


def build(entries: list[Entry]) -> bytes:
    """Local records (descriptor flag off, sizes in the header) + central directory + zip64.

    ``entry.fields["lho"]`` forces the central directory's local-header offset (``-1``: the
    next entry's header); otherwise it is where the record was written.
    """
    out = bytearray()
    for e in entries:
        e.lho = len(out)
        e.set("<I", 42, e.lho)
        name = e.name if e.local_name is None else e.local_name
        flags, method = e.get("<H", 8) & ~0x08, e.get("<H", 10)
        local = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, flags, method, 0, 0,
                            e.get("<I", 16), e.get("<I", 20), e.get("<I", 24), len(name),
                            len(e.local_extra))
        out += local + name + e.local_extra + e.data
    cd_off = len(out)
    for i, e in enumerate(entries):
        if "lho" in e.fields:
            forced = e.fields["lho"]
            e.set("<I", 42, entries[i + 1].lho if forced == -1 else forced)
        e.set("<H", 28, len(e.name))
        e.set("<H", 30, len(e.extra))
        e.set("<H", 32, len(e.comment))
        out += e.head + e.name + e.extra + e.comment
    cd_size = len(out) - cd_off
    z64_at = len(out)
    out += struct.pack("<4sQHHIIQQQQ", Z64, 44, 45, 45, 0, 0, len(entries), len(entries),
                       cd_size, cd_off)
    out += struct.pack("<4sIQI", LOC, 0, z64_at, 1)
    out += struct.pack("<4sHHHHIIH", EOCD, 0, 0, min(len(entries), 0xFFFF),
                       min(len(entries), 0xFFFF), min(cd_size, 0xFFFFFFFF), 0xFFFFFFFF, 0)
    return bytes(out)


class Oracle:
    """``torch.load(weights_only=True)`` on files in a child process (never in this one)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", ORACLE], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def load(self, path: Path) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(f"{path}\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            self.proc.wait()
            self.proc = None
            return {"ok": False, "error": "loader process died"}
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        self.proc = None
