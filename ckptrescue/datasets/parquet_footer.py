"""Where each column chunk of a Parquet file starts, read from the footer without pyarrow.

pyarrow 26 aborts the whole process (``terminate called after throwing an instance of
'parquet::ParquetException'``) when ``RowGroupMetaData.column(i)`` meets a damaged size
statistic in the footer, where reading the same row group raises a clean error. So the checker
never asks pyarrow for column-chunk metadata: this module reads the Thrift compact encoding of
``FileMetaData`` (``parquet.thrift``: field 4 ``row_groups``; ``RowGroup`` 1 ``columns``, 3
``num_rows``; ``ColumnChunk`` 3 ``meta_data``; ``ColumnMetaData`` 3 ``path_in_schema``, 9
``data_page_offset``, 11 ``dictionary_page_offset``), bounded in depth and size. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_DEPTH = 32
MAX_ITEMS = 1_000_000


class FooterError(ValueError):
    """The footer does not decode as Thrift compact ``FileMetaData``."""


@dataclass
class RowGroupInfo:
    num_rows: int | None = None
    offsets: dict[str, int] = field(default_factory=dict)  # top-level column -> first page


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.items = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise FooterError("footer ends inside a value")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise FooterError("varint too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def binary(self) -> bytes:
        n = self.varint()
        if self.pos + n > len(self.data):
            raise FooterError("string runs past the footer")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def count(self, n: int) -> None:
        self.items += n
        if self.items > MAX_ITEMS:
            raise FooterError("footer holds too many values")

    def skip(self, kind: int, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise FooterError("footer nested too deep")
        if kind in (1, 2):
            return
        if kind == 3:
            self.byte()
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.pos += 8
        elif kind == 8:
            self.binary()
        elif kind in (9, 10):
            size, elem = self.list_header()
            for _ in range(size):
                self.skip(elem, depth + 1) if elem not in (1, 2) else self.byte()
        elif kind == 11:
            size = self.varint()
            self.count(size)
            if size:
                kv = self.byte()
                for _ in range(size):
                    self.skip(kv >> 4, depth + 1)
                    self.skip(kv & 15, depth + 1)
        elif kind == 12:
            for _fid, ftype in self.fields():
                self.skip(ftype, depth + 1)
        else:
            raise FooterError(f"unknown Thrift type {kind}")

    def list_header(self) -> tuple[int, int]:
        head = self.byte()
        size = head >> 4
        if size == 15:
            size = self.varint()
        self.count(size)
        return size, head & 15

    def fields(self):  # noqa: ANN201 - yields (field id, type) until STOP
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return
            kind = head & 15
            delta = head >> 4
            fid = last + delta if delta else self.zigzag()
            last = fid
            yield fid, kind


def row_groups(footer: bytes) -> list[RowGroupInfo]:
    """Each row group's ``num_rows`` and its columns' first-page offsets (``FooterError`` when
    the footer does not decode)."""
    r = _Reader(footer)
    out: list[RowGroupInfo] = []
    for fid, kind in r.fields():
        if fid == 4 and kind == 9:
            size, elem = r.list_header()
            for _ in range(size):
                if elem != 12:
                    raise FooterError("row_groups is not a list of structs")
                out.append(_row_group(r))
        else:
            r.skip(kind, 1)
    return out


def _row_group(r: _Reader) -> RowGroupInfo:
    info = RowGroupInfo()
    for fid, kind in r.fields():
        if fid == 1 and kind == 9:
            size, elem = r.list_header()
            for _ in range(size):
                if elem != 12:
                    raise FooterError("columns is not a list of structs")
                name, start = _column_chunk(r)
                if name is not None and start is not None and (
                        name not in info.offsets or start < info.offsets[name]):
                    info.offsets[name] = start
        elif fid == 3 and kind == 6:
            info.num_rows = r.zigzag()
        else:
            r.skip(kind, 2)
    return info


def _column_chunk(r: _Reader) -> tuple[str | None, int | None]:
    name = start = None
    for fid, kind in r.fields():
        if fid == 3 and kind == 12:
            data_page = dictionary_page = None
            for mfid, mkind in r.fields():
                if mfid == 3 and mkind == 9:
                    size, _elem = r.list_header()
                    parts = [r.binary() for _ in range(size)]
                    name = parts[0].decode("utf-8", "replace") if parts else None
                elif mfid == 9 and mkind == 6:
                    data_page = r.zigzag()
                elif mfid == 11 and mkind == 6:
                    dictionary_page = r.zigzag()
                else:
                    r.skip(mkind, 4)
            start = dictionary_page if dictionary_page else data_page  # 0: none (pyarrow's rule)
        else:
            r.skip(kind, 3)
    return name, start
