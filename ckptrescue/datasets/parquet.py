"""Parquet: magic and footer, file metadata, and every column chunk of every row group decodes.

Uses pyarrow (the ``[data]`` extra), reading from the already-open tracked file so an I/O error
still names its offset. Page CRCs are verified where the writer stored them; a flipped byte in an
uncompressed page without a CRC can decode to a wrong value and is only caught by a manifest.
A bad record's ``index`` is the row group, ``key`` the column, ``offset`` the column chunk's
first page.
"""

from __future__ import annotations

from typing import IO, Any

from ckptrescue.datasets.shardcheck import BadRecord, CheckOutcome, UnreadableAt, read_exact
from ckptrescue.errors import ToolMissingError


def check(fh: IO[bytes], size: int | None) -> CheckOutcome:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ToolMissingError("checking Parquet needs pyarrow",
                               hint="pip install 'ckptrescue[data]'") from exc
    out = CheckOutcome()
    size = size or 0
    head = read_exact(fh, 4)
    fh.seek(max(size - 8, 0))
    tail = read_exact(fh, 8)
    fh.seek(0)
    if size < 12 or head != b"PAR1" or tail[4:] != b"PAR1":
        where = "start" if head != b"PAR1" else "end"
        out.bad.append(BadRecord(None, 0 if where == "start" else max(size - 4, 0), None,
                                 f"Parquet magic 'PAR1' missing at the {where} of the file "
                                 "(truncated or not Parquet)"))
        return out
    try:
        pf = pq.ParquetFile(fh, page_checksum_verification=True)
        meta = pf.metadata
    except UnreadableAt:
        raise
    except Exception as exc:  # pyarrow raises ArrowInvalid/OSError subclasses
        footer_len = int.from_bytes(tail[:4], "little")
        out.bad.append(BadRecord(None, max(size - 8 - footer_len, 0), None,
                                 f"footer/metadata does not parse: {_one_line(exc)}"))
        return out
    fields = list(pf.schema_arrow.names)
    for rg in range(meta.num_row_groups):
        offsets = _column_offsets(meta.row_group(rg))
        for name in fields:
            try:
                table = pf.read_row_group(rg, columns=[name])
                table.validate(full=True)
            except UnreadableAt:
                raise
            except Exception as exc:
                out.bad.append(BadRecord(rg, offsets.get(name), name,
                                         f"column chunk does not decode: {_one_line(exc)}"))
            else:
                out.records += 1
    return out


def _column_offsets(rg: Any) -> dict[str, int]:
    offsets: dict[str, int] = {}
    for i in range(rg.num_columns):
        col = rg.column(i)
        top = col.path_in_schema.split(".", 1)[0]
        start = col.dictionary_page_offset or col.data_page_offset
        if top not in offsets or (start is not None and start < offsets[top]):
            offsets[top] = start
    return offsets


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
