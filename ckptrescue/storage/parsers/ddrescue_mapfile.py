"""GNU ddrescue mapfile parser (pure).

Format (ddrescue manual, *Mapfile structure*): ``#`` comments (at line start or after
whitespace), then one status line ``current_pos current_status [current_pass]`` (the pass field
exists since 1.21), then block lines ``pos size status``. Numbers may be decimal, hex (``0x``) or
octal (leading ``0``), as in C++. Blocks are contiguous and non-overlapping.

Block status: ``?`` non-tried, ``*`` non-trimmed, ``/`` non-scraped, ``-`` bad sector(s),
``+`` finished. ddrescue exits 0 with unreadable sectors: this map is the truth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ckptrescue.errors import EvidenceError
from ckptrescue.model import JsonObject

BLOCK_STATUSES = {"?": "non-tried", "*": "non-trimmed", "/": "non-scraped", "-": "bad-sector",
                  "+": "finished"}
CURRENT_STATUSES = {"?": "copying", "*": "trimming", "/": "scraping", "-": "retrying",
                    "F": "filling", "G": "generating", "+": "finished"}


class MapfileError(EvidenceError):
    """The text is not a valid ddrescue mapfile."""


@dataclass(frozen=True)
class Block:
    pos: int
    size: int
    status: str

    @property
    def end(self) -> int:
        return self.pos + self.size


@dataclass
class Mapfile:
    current_pos: int
    current_status: str
    current_pass: int | None
    blocks: list[Block] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)

    @property
    def domain_start(self) -> int:
        return self.blocks[0].pos if self.blocks else 0

    @property
    def domain_end(self) -> int:
        return self.blocks[-1].end if self.blocks else 0

    def total(self, *statuses: str) -> int:
        return sum(b.size for b in self.blocks if b.status in statuses)

    @property
    def rescued(self) -> int:
        return self.total("+")

    @property
    def bad(self) -> int:
        return self.total("-")

    @property
    def pending(self) -> int:
        return self.total("*", "/")

    @property
    def untried(self) -> int:
        return self.total("?")

    @property
    def finished(self) -> bool:
        """True when every byte of the domain is ``+`` (``ddrescuelog -D`` semantics)."""
        return all(b.status == "+" for b in self.blocks)

    def ranges(self, *statuses: str) -> list[tuple[int, int]]:
        """``[start, end)`` byte ranges with one of ``statuses``, adjacent ones merged."""
        out: list[tuple[int, int]] = []
        for b in self.blocks:
            if b.status not in statuses or b.size == 0:
                continue
            if out and out[-1][1] == b.pos:
                out[-1] = (out[-1][0], b.end)
            else:
                out.append((b.pos, b.end))
        return out

    def bad_ranges(self) -> list[tuple[int, int]]:
        """Ranges with bad sectors (``-``)."""
        return self.ranges("-")

    def unreadable_ranges(self) -> list[tuple[int, int]]:
        """Everything not rescued (``-``, ``*``, ``/``, ``?``): what the image does not hold."""
        return self.ranges("-", "*", "/", "?")

    def summary(self) -> JsonObject:
        return {
            "current_pos": self.current_pos,
            "current_status": self.current_status,
            "current_pass": self.current_pass,
            "domain": [self.domain_start, self.domain_end],
            "rescued": self.rescued, "bad": self.bad, "pending": self.pending,
            "untried": self.untried,
            "bad_areas": len(self.bad_ranges()), "finished": self.finished,
        }


def parse_number(text: str) -> int:
    """A C++ integer literal: decimal, ``0x`` hex or leading-``0`` octal."""
    t = text.strip()
    try:
        if t.lower().startswith(("0x", "-0x", "+0x")):
            return int(t, 16)
        digits = t.lstrip("+-")
        if len(digits) > 1 and digits.startswith("0"):
            return int(t, 8)
        return int(t, 10)
    except ValueError as exc:
        raise MapfileError(f"not a number: {text!r}") from exc


def _strip_comment(line: str) -> tuple[str, str | None]:
    if line.startswith("#"):
        return "", line
    for i, ch in enumerate(line):
        if ch == "#" and i > 0 and line[i - 1] in " \t":
            return line[:i], line[i:]
    return line, None


def parse(text: str, *, name: str = "mapfile") -> Mapfile:
    """Parse mapfile text; raises :class:`MapfileError` naming the line on bad input."""
    status_line: tuple[int, str, int | None] | None = None
    blocks: list[Block] = []
    comments: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        body, comment = _strip_comment(raw)
        if comment is not None:
            comments.append(comment)
        fields = body.split()
        if not fields:
            continue
        where = f"{name}:{lineno}"
        if status_line is None:
            if len(fields) not in (2, 3):
                raise MapfileError(f"{where}: expected 'current_pos current_status [pass]'")
            pos = parse_number(fields[0])
            if fields[1] not in CURRENT_STATUSES:
                raise MapfileError(f"{where}: unknown current_status {fields[1]!r}")
            cur_pass = parse_number(fields[2]) if len(fields) == 3 else None
            status_line = (pos, fields[1], cur_pass)
            continue
        if len(fields) != 3:
            raise MapfileError(f"{where}: expected 'pos size status'")
        pos, size, status = parse_number(fields[0]), parse_number(fields[1]), fields[2]
        if status not in BLOCK_STATUSES:
            raise MapfileError(f"{where}: unknown block status {status!r}")
        if pos < 0 or size < 0:
            raise MapfileError(f"{where}: negative position or size")
        if blocks and pos != blocks[-1].end:
            raise MapfileError(
                f"{where}: block at {pos:#x} is not contiguous with the previous block "
                f"(which ends at {blocks[-1].end:#x})"
            )
        blocks.append(Block(pos, size, status))
    if status_line is None:
        raise MapfileError(f"{name}: no status line (empty or not a ddrescue mapfile)")
    return Mapfile(status_line[0], status_line[1], status_line[2], blocks, comments)


def render(blocks: list[Block], *, current_pos: int = 0, current_status: str = "+",
           current_pass: int = 1) -> str:
    """Write blocks as mapfile text (used for test-mode maps and sidecars)."""
    lines = ["# Mapfile written by ckptrescue", "# current_pos  current_status  current_pass",
             f"{current_pos:#x}     {current_status}               {current_pass}",
             "#      pos        size  status"]
    lines += [f"{b.pos:#010x}  {b.size:#010x}  {b.status}" for b in blocks]
    return "\n".join(lines) + "\n"


def build_test_map(size: int, bad: list[tuple[int, int]]) -> str:
    """A full-domain test-mode map (``ddrescue -H``): ``bad`` ``[start, end)`` ranges are ``-``."""
    blocks: list[Block] = []
    pos = 0
    for start, end in sorted(bad):
        if start < pos or end > size or end <= start:
            raise ValueError(f"bad range [{start}, {end}) overlaps or is outside [0, {size})")
        if start > pos:
            blocks.append(Block(pos, start - pos, "+"))
        blocks.append(Block(start, end - start, "-"))
        pos = end
    if pos < size:
        blocks.append(Block(pos, size - pos, "+"))
    return render(blocks)
