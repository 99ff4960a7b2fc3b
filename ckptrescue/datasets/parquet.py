"""Parquet: magic and footer, file metadata, and every column chunk of every row group decodes.

Uses pyarrow (the ``[data]`` extra), reading from the already-open tracked file so an I/O error
still names its offset. Page CRCs are verified where the writer stored them; a flipped byte in an
uncompressed page without a CRC can decode to a wrong value and is only caught by a manifest.
A bad record's ``index`` is the row group, ``key`` the column, ``offset`` the column chunk's
first page (read from the footer by ``parquet_footer.py``: pyarrow's column-chunk metadata
accessor aborts the process on some damaged footers).

The reader whose behaviour defines ``ok`` is ``pyarrow.parquet.read_table``: every column of
every row group decodes, each holds its row group's ``num_rows`` values, and the row groups add
up to the footer's ``num_rows`` (the table ``read_table`` assembles fails otherwise).
"""

from __future__ import annotations

from typing import IO

from ckptrescue.datasets import parquet_footer
from ckptrescue.datasets.shardcheck import BadRecord, CheckOutcome, UnreadableAt, one_line, read_exact
from ckptrescue.errors import optional_module


def check(fh: IO[bytes], size: int | None) -> CheckOutcome:
    with optional_module("checking Parquet needs pyarrow", hint="pip install 'ckptrescue[data]'"):
        import pyarrow.parquet as pq
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
                                 f"footer/metadata does not parse: {one_line(exc)}"))
        return out
    footer_len = int.from_bytes(tail[:4], "little")
    try:
        fh.seek(max(size - 8 - footer_len, 0))
        groups = parquet_footer.row_groups(read_exact(fh, footer_len))
    except parquet_footer.FooterError as exc:
        out.bad.append(BadRecord(None, max(size - 8 - footer_len, 0), None,
                                 f"footer/metadata does not decode: {exc}"))
        return out
    if len(groups) != meta.num_row_groups:
        groups = [parquet_footer.RowGroupInfo() for _ in range(meta.num_row_groups)]
    fields = list(pf.schema_arrow.names)
    total = 0
    for rg in range(meta.num_row_groups):
        offsets = groups[rg].offsets
        rows = groups[rg].num_rows
        total += rows or 0
        for name in fields:
            try:
                table = pf.read_row_group(rg, columns=[name])
                table.validate(full=True)
                if rows is not None and table.num_rows != rows:
                    # pq.read_table assembles the columns: "Column 1 named label expected
                    # length 1000 but got length 0"
                    raise ValueError(f"{table.num_rows} values, the row group records {rows} "
                                     "rows")
            except UnreadableAt:
                raise
            except Exception as exc:
                out.bad.append(BadRecord(rg, offsets.get(name), name,
                                         f"column chunk does not decode: {one_line(exc)}"))
            else:
                out.records += 1
    if all(g.num_rows is not None for g in groups) and total != meta.num_rows:
        out.bad.append(BadRecord(None, max(size - 8 - footer_len, 0), None,
                                 f"the footer records {meta.num_rows} rows, its row groups "
                                 f"{total}: pq.read_table refuses the file"))
    return out
