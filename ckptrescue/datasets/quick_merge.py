"""The quick audit (``manifest audit --quick``) as a streaming sorted merge: no state database.

``manifest build`` writes the manifest and its JSON-lines sidecar sorted by the name bytes, and
:func:`~ckptrescue.datasets.walk.sorted_scan` walks DIR in that same order without collecting
the tree. Both are read as streams and merged: a name in both is ``ok`` or ``changed`` (size and
mtime compared), only in the manifest ``missing``, only in DIR ``new``. Memory is bounded by the
depth and the widest directory of DIR plus the rows that are not ok (a result lists those
anyway); ok rows are spooled (to a temporary file past a few MiB) only while the audit may still
end up with at most :data:`~ckptrescue.datasets.audit.LIST_ALL_MAX` files, which lists every row.

The rows are exactly those of the state-database path (``audit_state.py``'s quick SQL): the
manifest's entries with sizes and mtimes from the sidecar where it agrees on the SHA-256, names
that lead outside DIR reported missing and never opened.

Cost per file, besides the walk: the sidecar is read a block of lines at a time; a block of
printable ASCII is matched by one pattern of the kit's own line shape (any other line goes
through ``json.loads`` as ``read_jsonl_entries`` reads it), and while the manifest's next bytes
are exactly the ``sha256sum`` lines of the sidecar block's names and hashes they are compared,
not parsed (from the first difference on, the manifest is parsed and joined by name).

A manifest or sidecar that is not strictly sorted by name (a foreign or hand-edited one, a
repeated name) raises :class:`NotSorted` as soon as it is seen; the caller then audits through
a temporary state database instead (``audit._quick_audit``).
"""

from __future__ import annotations

import itertools
import json
import operator
import os
import re
import struct
import tempfile
import threading
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ckptrescue.datasets import sha256sum_format
from ckptrescue.datasets.manifest_files import ManifestEntry, sidecar_path
from ckptrescue.datasets.walk import Skipped, safe_relative, sorted_files
from ckptrescue.errors import UsageError

SPOOL_MEMORY = 4 << 20  # ok rows kept in memory up to this many bytes, then in a temporary file
_CHUNK_HEAD = struct.Struct("<QQ")  # rows, bytes of the names
_CANCEL_MASK = 4095  # every 4,096 files: the cancel flag, and the ok rows spooled

# the kit's own sidecar lines (json.dumps of ManifestEntry.to_json: printable ASCII, no escape)
# are parsed by this pattern; any other line goes through json.loads as read_jsonl_entries does
_CHARS = rb"[\x20\x21\x23-\x5b\x5d-\x7e]*"
_STR = rb'"' + _CHARS + rb'"'
_INT = rb"-?(?:0|[1-9][0-9]*)"
_NUM = _INT + rb"(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_SIDE_LINE = re.compile(
    rb'\{"path": "(' + _CHARS + rb')", "size": (' + _INT + rb'), "mtime": ' + _NUM
    + rb', "mtime_ns": (' + _INT + rb'), "sha256": "(' + _CHARS + rb')", "format": ' + _STR
    + rb'(?:, "inode": ' + _INT + rb")?(?:, \"etag\": " + _STR + rb")?(?:, \"version_id\": "
    + _STR + rb")?\}\n")

# the same lines, found all at once in a block of whole lines that holds printable ASCII and
# newlines only, no backslash (so a ``[^"]`` run is a JSON string without escapes); at most one
# match per line, so a block whose match count equals its line count is all kit lines, each
# matched whole (a match spanning a newline would leave a line without one)
_SIDE_BLOCK = re.compile(
    rb'(?m)^\{"path": "([^"]*)", "size": (' + _INT + rb'), "mtime": ' + _NUM
    + rb', "mtime_ns": (' + _INT + rb'), "sha256": "([^"]{64})", "format": "[^"]*"'
    + rb'(?:, "inode": ' + _INT + rb')?(?:, "etag": "[^"]*")?(?:, "version_id": "[^"]*")?'
    + rb"\}\n")
_PRINTABLE = bytes(range(0x20, 0x7F)) + b"\n"
_LOWER_HEX = b"0123456789abcdef"
# plain sha256sum lines (lowercase hash, two spaces, a name without CR that needs no "./"
# normalising); any other line goes through audit_state's per-line parse
_TEXT_BLOCK = re.compile(rb"(?m)^([0-9a-f]{64})  ([^\r\n]+)\n")
_TEXT_LINE = re.compile(rb"([0-9a-fA-F]{64})  ([^\r\n]+)\n?")
BLOCK = 1 << 18

# (rel, sha256 as bytes, size, mtime_ns)
Expected = tuple[bytes, bytes, int | None, int | None]


class NotSorted(Exception):  # noqa: N818 - a condition, not an error the user sees
    """The manifest, its sidecar (or, defensively, the walk) is not strictly sorted by name."""


@dataclass
class MergeOutcome:
    """What the merge found: counts per status, the rows to list, the skips."""

    counts: dict[str, int]
    rows: list[tuple[bytes, str, str | None, str | None, str]] = field(default_factory=list)
    listed_all: bool = True
    skipped: list[Skipped] = field(default_factory=list)


def _blocks(fh: IO[bytes]) -> Iterator[tuple[bytes, bool]]:
    """Blocks of whole lines (each ending in a newline) from ``fh``'s position, then the
    unterminated tail if any (second value True)."""
    tail = b""
    while chunk := fh.read(BLOCK):
        chunk = tail + chunk
        cut = chunk.rfind(b"\n") + 1
        tail = chunk[cut:]
        if cut:
            yield chunk[:cut], False
    if tail:
        yield tail, True


def _lines(block: bytes) -> list[bytes]:
    """The lines of a block, each with its newline (split on newlines only, as a file is read
    line by line: a carriage return is part of a line)."""
    parts = block.split(b"\n")
    out = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def _side_line(raw: bytes) -> Expected | None:
    """One sidecar line (with its newline) as ``read_jsonl_entries`` reads it; None if bad."""
    m = _SIDE_LINE.fullmatch(raw)
    if m is not None:
        rel, size, mtime_ns, sha = m.group(1, 2, 3, 4)
        return rel, sha.lower(), int(size), int(mtime_ns)
    try:
        e = ManifestEntry.from_json(json.loads(raw))
    except (ValueError, KeyError, TypeError):
        return None
    return e.rel, e.sha256.encode("utf-8", "surrogatepass"), e.size, e.mtime_ns


def _side_blocks(path: Path) -> Iterator[tuple[list[Expected], bool]]:
    """The sidecar's rows a block at a time, as ``read_jsonl_entries`` reads them (a torn last
    line ends it, a bad line is passed over), strictly increasing by name or
    :class:`NotSorted`. Second value: every line of the block is the kit's own, with a
    64-digit lowercase hash and a name that is not empty and does not start with ``./``."""
    last: bytes | None = None
    with path.open("rb") as fh:
        for block, torn in _blocks(fh):
            if torn:
                return
            found = []
            if b"\\" not in block and not block.translate(None, _PRINTABLE):
                found = _SIDE_BLOCK.findall(block)
            plain = len(found) == block.count(b"\n") and not b"".join(
                [f[3] for f in found]).translate(None, _LOWER_HEX)
            if plain:
                rows: list[Expected] = [(rel, sha, int(size), int(mtime_ns))
                                        for rel, size, mtime_ns, sha in found]
            else:
                rows = [r for r in map(_side_line, _lines(block)) if r is not None]
            if not rows:
                continue
            last = _last_in_order([r[0] for r in rows], last, path.name)
            yield rows, (plain and b'{"path": "./' not in block
                         and b'{"path": ""' not in block)


def sidecar_rows(path: Path) -> Iterator[Expected]:
    """(rel, sha256, size, mtime_ns) of each line of a JSON-lines sidecar (see
    :func:`_side_blocks`)."""
    for rows, _plain in _side_blocks(path):
        yield from rows


def _last_in_order(names: list[bytes], last: bytes | None, source: str) -> bytes:
    """The last of a block's ``names`` when they strictly increase after ``last`` (the previous
    block's); :class:`NotSorted` naming ``source`` otherwise."""
    if (last is not None and names[0] <= last) or not all(
            map(operator.lt, names, itertools.islice(names, 1, None))):
        raise NotSorted(f"{source}: a name out of order or repeated")
    return names[-1]


def text_rows(fh: IO[bytes], manifest: Path, *, lineno: int = 0, last: bytes | None = None
              ) -> Iterator[tuple[bytes, bytes]]:
    """(normalised name, sha256) of every line of a sha256sum manifest from ``fh``'s position
    (``lineno`` lines before it, the last named ``last``), exactly as
    ``audit_state._text_entries`` reads them, strictly increasing by name or
    :class:`NotSorted`."""
    for block, _torn in _blocks(fh):
        found = _TEXT_BLOCK.findall(block)
        lines = block.count(b"\n")
        if found and len(found) == lines and b"  ./" not in block and b"\r" not in block:
            rows = [(name, sha) for sha, name in found]
        else:
            rows = list(_text_lines(block, lineno, manifest))
        lineno += lines
        if not rows:
            continue
        last = _last_in_order([r[0] for r in rows], last, manifest.name)
        yield from rows


def _text_lines(block: bytes, lineno: int, manifest: Path) -> Iterator[tuple[bytes, bytes]]:
    try:
        for lineno, raw in enumerate(_lines(block), start=lineno + 1):  # noqa: B020, PLR1704
            fast = _TEXT_LINE.fullmatch(raw)
            if fast is not None and not raw.startswith(b"\\"):
                name = fast.group(2)
                yield sha256sum_format.plain_name(name), fast.group(1).lower()
                continue
            line = sha256sum_format.parse_line(raw[:-1] if raw.endswith(b"\n") else raw,
                                               lineno)
            if line is not None:
                yield sha256sum_format.plain_name(line.name), line.sha256.encode("ascii")
    except sha256sum_format.ManifestSyntaxError as exc:
        raise UsageError(f"{manifest}: not a sha256sum manifest: {exc}") from exc



def expected_rows(manifest: Path) -> Iterator[Expected]:
    """The manifest's entries in name order with sizes and mtimes (the sidecar's, where it
    agrees on the SHA-256; else None), or :class:`NotSorted`."""
    for rows in expected_blocks(manifest):
        yield from rows


def expected_blocks(manifest: Path) -> Iterator[list[Expected]]:
    """:func:`expected_rows` in lists (a block of the sidecar each, or :data:`_JOIN_ROWS`).

    While the sidecar's blocks are the kit's own lines and the manifest's next bytes are exactly
    the ``sha256sum`` lines of the same names and hashes, the manifest is compared, not parsed;
    from the first difference on, both are parsed and joined by name."""
    if manifest.name.endswith(".jsonl"):
        for rows, _plain in _side_blocks(manifest):
            yield rows
        return
    blocks = _side_blocks(sidecar_path(manifest))
    lineno = 0
    last: bytes | None = None
    with manifest.open("rb") as text:
        side: Iterator[Expected] = iter(())
        for rows, plain in blocks:
            if plain:
                want = b"".join([r[1] + b"  " + r[0] + b"\n" for r in rows])
                pos = text.tell()
                if text.read(len(want)) == want:
                    yield rows
                    lineno += len(rows)
                    last = rows[-1][0]
                    continue
                text.seek(pos)
            side = itertools.chain(rows, itertools.chain.from_iterable(r for r, _ in blocks))
            break
        joined = _join(text_rows(text, manifest, lineno=lineno, last=last), side)
        while chunk := list(itertools.islice(joined, _JOIN_ROWS)):
            yield chunk


_JOIN_ROWS = 4096
def _join(text: Iterator[tuple[bytes, bytes]], side: Iterator[Expected]) -> Iterator[Expected]:
    """Each manifest entry with the sidecar's size and mtime of the same name and hash."""
    s = next(side, None)
    for rel, sha in text:
        while s is not None and s[0] < rel:
            s = next(side, None)
        if s is not None and s[0] == rel and s[1] == sha:
            yield rel, sha, s[2], s[3]
        else:
            yield rel, sha, None, None


class _OkSpool:
    """The ok rows, in order, while every row may still be listed: gathered in lists of
    :data:`_SPOOL_ROWS` and written packed (sizes and mtimes as int64 arrays, names joined by
    NUL, which no file name holds) to a file kept in memory up to :data:`SPOOL_MEMORY`."""

    def __init__(self) -> None:
        self.fh: IO[bytes] | None = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)  # noqa: SIM115
        self.rows: list[tuple[bytes, int, int]] = []

    def flush(self) -> None:
        rows, self.rows = self.rows, []
        if not rows or self.fh is None:
            return
        names = b"\0".join([r[0] for r in rows])
        numbers = array("q", [r[1] for r in rows] + [r[2] for r in rows]).tobytes()
        self.fh.write(_CHUNK_HEAD.pack(len(rows), len(names)) + numbers + names)

    def drop(self) -> None:
        self.rows = []
        if self.fh is not None:
            self.fh.close()
            self.fh = None

    def read(self) -> Iterator[tuple[bytes, int, int]]:
        self.flush()
        assert self.fh is not None
        fh = self.fh
        fh.seek(0)
        while head := fh.read(_CHUNK_HEAD.size):
            count, nbytes = _CHUNK_HEAD.unpack(head)
            numbers = array("q")
            numbers.frombytes(fh.read(16 * count))
            names = fh.read(nbytes).split(b"\0")
            yield from zip(names, numbers[:count], numbers[count:], strict=True)


def quick_merge(root: Path, manifest: Path, exclude: list[Path], *, list_max: int,
                cancel: threading.Event | None = None,
                follow_into: Sequence[str | os.PathLike[str]] = ()) -> MergeOutcome:
    """Merge the walk of ``root`` with the manifest's entries (both in name order);
    ``follow_into`` as :func:`~ckptrescue.datasets.walk.walk` takes it."""
    bad: list[tuple[bytes, str, str | None, str | None, str]] = []
    skipped: list[Skipped] = []
    spool: _OkSpool | None = _OkSpool()
    ok_rows: list[tuple[bytes, int, int]] | None = spool.rows if spool is not None else None
    ok = changed = missing = new = walked = 0
    try:
        expected = itertools.chain.from_iterable(expected_blocks(manifest))
        exp = next(expected, None)
        last = b""
        for _key, rel, size, mtime_ns, _ino in sorted_files(root, exclude=exclude,
                                                             follow_into=follow_into,
                                                             skips=skipped):
            if rel <= last:
                raise NotSorted("the walk is not in name order")
            last = rel
            while exp is not None and exp[0] < rel:
                bad.append(_missing(exp))
                missing += 1
                exp = next(expected, None)
            if exp is not None and exp[0] == rel:
                if exp[2] == size and exp[3] == mtime_ns:
                    ok += 1
                    if ok_rows is not None:
                        ok_rows.append((rel, size, mtime_ns))
                else:
                    bad.append((rel, "changed", f"size={exp[2]} mtime_ns={exp[3]}",
                                f"size={size} mtime_ns={mtime_ns}",
                                "size differs" if exp[2] != size
                                else "same size, mtime differs"))
                    changed += 1
                exp = next(expected, None)
            else:
                bad.append((rel, "new", None, None, ""))
                new += 1
            walked += 1
            if not walked & _CANCEL_MASK:
                if cancel is not None and cancel.is_set():
                    raise KeyboardInterrupt("cancelled")
                if spool is not None:
                    if ok + changed + missing + new > list_max:
                        spool.drop()
                        spool = ok_rows = None
                    else:
                        spool.flush()
                        ok_rows = spool.rows
        while exp is not None:
            bad.append(_missing(exp))
            missing += 1
            exp = next(expected, None)
        if spool is not None and ok + changed + missing + new > list_max:
            spool.drop()
            spool = None
        counts = {"ok": ok, "changed": changed, "missing": missing, "new": new}
        outcome = MergeOutcome(counts, skipped=skipped, listed_all=spool is not None)
        outcome.rows = _interleave(spool, bad) if spool is not None else bad
        return outcome
    finally:
        if spool is not None:
            spool.drop()


def _missing(exp: Expected) -> tuple[bytes, str, str | None, str | None, str]:
    rel = exp[0]
    reason = "" if safe_relative(rel) else "the name leads outside DIR; never opened"
    return rel, "missing", exp[1].decode("utf-8", "surrogatepass"), None, reason


def _interleave(spool: _OkSpool, bad: list[tuple[bytes, str, str | None, str | None, str]]
                ) -> list[tuple[bytes, str, str | None, str | None, str]]:
    """The ok rows from the spool and the other rows, both in name order, in name order."""
    out: list[tuple[bytes, str, str | None, str | None, str]] = []
    i = 0
    for rel, size, mtime_ns in spool.read():
        while i < len(bad) and bad[i][0] < rel:
            out.append(bad[i])
            i += 1
        text = f"size={size} mtime_ns={mtime_ns}"
        out.append((rel, "ok", text, text, ""))
    out += bad[i:]
    return out


__all__ = ["MergeOutcome", "NotSorted", "expected_rows", "quick_merge", "sidecar_rows"]
