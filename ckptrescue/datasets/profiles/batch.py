"""Per-field statistics over blocks of records: the vectorised form of ``FieldStats.add``.

A block is a batch of flattened records (JSON lines, TFRecord Examples, WebDataset samples) or
an Arrow record batch (Parquet, Arrow IPC). Every statistic is the one ``FieldStats.add`` takes
value by value — presence, nulls, empties, type counts, byte/item lengths, numeric values,
top-k keys — computed per column with numpy (or ``pyarrow.compute`` on Arrow arrays, which are
never converted to Python objects except for the text the near-duplicate sketch reads). Counts
and histogram bins are identical to the value-by-value ones; moments are merged per block from
correctly rounded sums (:meth:`~ckptrescue.datasets.profiles.sketches.Moments.of`); top-k counts are
added per block (exact while at most ``k`` distinct values were seen, as before).

Each block also yields its records' 64-bit hashes (:mod:`.vhash`: the same for the same
record whatever its format) and, on demand, the records' text for the near-duplicate sketch.
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ckptrescue.datasets.profiles import vhash
from ckptrescue.datasets.profiles.arrays import bin_keys
from ckptrescue.datasets.profiles.fieldstats import FieldStats
from ckptrescue.datasets.profiles.sketches import Moments, TopK
from ckptrescue.datasets.profiles.values import CATEGORY_MAX_CHARS, FLATTEN_DEPTH, flatten, number, quote

BATCH_RECORDS = 1024
TokenCounter = Callable[[str], int]


@dataclass(frozen=True)
class JsonBlock:
    """The records of a block of JSON lines, as parsed (not flattened yet)."""

    values: list[Any]


@dataclass(frozen=True)
class ArrowBatch:
    """An Arrow record batch of a Parquet/Arrow shard (the builder profiles it column-wise)."""

    batch: Any


def add_dist(stats: FieldStats, measure: str, values: Any) -> None:
    """Add a block of finite values to the distribution ``measure`` of ``stats``."""
    import numpy as np

    x = np.asarray(values, dtype=np.float64).ravel()
    if not x.size:
        return
    keys, counts = bin_keys(x)
    d = stats.dist(measure)
    d.hist.add_keys(keys.tolist(), counts.tolist())
    d.moments.merge(Moments.of(x))


def unquote(key: str) -> str:
    """The text a ``values.quote`` key was made from."""
    return re.sub(r"\\(.)", r"\1", key[1:-1], flags=re.S)


def add_top(top: TopK, keys: list[Any], counts: list[int], text: bool) -> None:
    """``top.add_counts`` of the block's distinct ``keys`` (str values, quoted, when ``text``;
    else ints) with ``counts``, making the key of only those values the merge may keep."""
    keyfn = quote if text else str
    if len(keys) + len(top.counts) <= top.k:
        top.add_counts({keyfn(k): c for k, c in zip(keys, counts, strict=True)})
        return
    ordered = sorted(counts, reverse=True)
    cut = ordered[top.k] if len(ordered) > top.k else 0
    if cut <= 0:
        top.add_counts({keyfn(k): c for k, c in zip(keys, counts, strict=True)})
        return
    if text:
        known: set[Any] = {unquote(q) for q in top.counts if q.startswith('"')}
    else:
        known = {int(q) for q in top.counts if q.lstrip("-").isdigit()}
    kept: dict[str, int] = {}
    dropped: list[int] = []
    for k, c in zip(keys, counts, strict=True):
        if c > cut or k in known:
            kept[keyfn(k)] = c
        else:
            dropped.append(c)
    top.add_counts(kept, dropped)


def add_top_arrow(top: TopK, value_counts: Any, text: bool) -> None:
    """:func:`add_top` of the result of ``pyarrow.compute.value_counts`` (string or int64
    values), converting to Python only the values the merge may keep."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    values = value_counts.field("values")
    counts = value_counts.field("counts").to_numpy(zero_copy_only=False)
    if len(values) + len(top.counts) <= top.k or len(counts) <= top.k:
        add_top(top, values.to_pylist(), counts.tolist(), text)
        return
    cut = int(np.sort(counts)[::-1][top.k])
    if cut <= 0:
        add_top(top, values.to_pylist(), counts.tolist(), text)
        return
    if text:
        known: list[Any] = [unquote(q) for q in top.counts if q.startswith('"')]
    else:
        known = [int(q) for q in top.counts if q.lstrip("-").isdigit()]
    keep = counts > cut
    if known:
        keep |= pc.is_in(values, value_set=pa.array(known, type=values.type)).to_numpy(
            zero_copy_only=False)
    keyfn = quote if text else str
    top.add_counts({keyfn(k): int(c) for k, c in zip(values.filter(pa.array(keep)).to_pylist(),
                                                     counts[keep].tolist(), strict=True)},
                   counts[~keep].tolist())


def _add_numbers(stats: FieldStats, x: Any) -> None:
    import numpy as np

    finite = np.isfinite(x)
    bad = int(x.size - int(finite.sum()))
    stats.nonfinite += bad
    add_dist(stats, "values", x[finite] if bad else x)


def _blank(s: str) -> bool:
    return not s or s.isspace()  # == not s.strip()


def _add_str(stats: FieldStats, vals: list[str], tokens: TokenCounter | None) -> None:
    import numpy as np

    n = len(vals)
    stats.present += n
    stats.add_type("str", n)
    if "" in vals or any(map(str.isspace, vals)):
        vals = [s for s in vals if not _blank(s)]
        stats.empties += n - len(vals)
    if not vals:
        return
    short = [s for s in vals if len(s) <= CATEGORY_MAX_CHARS]
    if short:
        counted = Counter(short)
        add_top(stats.top, list(counted), list(counted.values()), True)
    joined = "".join(vals)
    if joined.isascii():
        lengths = np.fromiter(map(len, vals), dtype=np.int64, count=len(vals))
    else:
        lengths = np.fromiter((len(s.encode("utf-8", "surrogatepass")) for s in vals),
                              dtype=np.int64, count=len(vals))
    add_dist(stats, "bytes", lengths)
    if tokens is not None:
        add_dist(stats, "tokens", np.array([tokens(s) for s in vals], dtype=np.float64))


def _add_int(stats: FieldStats, vals: list[int]) -> None:
    import numpy as np

    n = len(vals)
    stats.present += n
    stats.add_type("int", n)
    counted = Counter(vals)
    add_top(stats.top, list(counted), list(counted.values()), False)
    try:
        x = np.fromiter(map(float, vals), dtype=np.float64, count=n)
    except OverflowError:
        x = np.array([number(v) for v in vals], dtype=np.float64)
    _add_numbers(stats, x)


def _add_sized(stats: FieldStats, type_name: str, measure: str | None, vals: list[Any]) -> None:
    import numpy as np

    n = len(vals)
    stats.present += n
    stats.add_type(type_name, n)
    lengths = np.fromiter(map(len, vals), dtype=np.int64, count=n)
    nonzero = lengths[lengths > 0]
    stats.empties += n - int(nonzero.size)
    if measure is not None:
        add_dist(stats, measure, nonzero)


def add_values(stats: FieldStats, values: Sequence[Any], tokens: TokenCounter | None) -> None:
    """``stats.add(v, tokens)`` for every value of ``values``, by blocks of one type."""
    import numpy as np

    kinds = set(map(type, values))
    if len(kinds) == 1:
        groups: dict[type, list[Any]] = {next(iter(kinds)): list(values)}
    else:
        groups = {}
        for v in values:
            groups.setdefault(type(v), []).append(v)
    for kind, vals in groups.items():
        n = len(vals)
        if kind is type(None):
            stats.present += n
            stats.nulls += n
            stats.add_type("null", n)
        elif kind is str:
            _add_str(stats, vals, tokens)
        elif kind is int:
            _add_int(stats, vals)
        elif kind is float:
            stats.present += n
            stats.add_type("float", n)
            _add_numbers(stats, np.fromiter(vals, dtype=np.float64, count=n))
        elif kind is bool:
            stats.present += n
            stats.add_type("bool", n)
            stats.top.add_counts({"true" if k else "false": c for k, c in Counter(vals).items()})
        elif kind is bytes or kind is bytearray:
            _add_sized(stats, "bytes", "bytes", vals)
        elif kind is list or kind is tuple:
            _add_sized(stats, "list", "items", vals)
        elif kind is dict:
            _add_sized(stats, "dict", None, vals)
        else:  # anything else (Opaque, arrays, subclasses): value by value, as before
            for v in vals:
                stats.add(v, tokens)


# -- blocks of Python records -------------------------------------------------------------


Column = tuple[str, Any, list[Any]]  # name, row indices (None: every row), values


def columns_of(records: list[dict[str, Any]]) -> list[Column]:
    """The (flattened) records' fields as columns, in the order fields are first seen."""
    first = records[0].keys()
    if set(map(type, records)) == {dict} and all(map(first.__eq__, map(dict.keys, records))):
        return [(k, None, list(map(operator.itemgetter(k), records))) for k in first]
    cols: dict[str, tuple[list[int], list[Any]]] = {}
    for i, r in enumerate(records):
        for k, v in r.items():
            c = cols.get(k)
            if c is None:
                c = cols[k] = ([], [])
            c[0].append(i)
            c[1].append(v)
    return [(k, rows, vals) for k, (rows, vals) in cols.items()]


def _expand(name: str, vals: list[Any], depth: int, out: list[Column]) -> bool:
    """Flatten a column as ``values.flatten`` flattens each record's mapping; False when its
    values are not all of one shape (then the records are flattened one by one)."""
    kinds = set(map(type, vals))
    if kinds <= _LEAF_TYPES:
        out.append((name, None, vals))
        return True
    if kinds != {dict} or depth + 1 >= FLATTEN_DEPTH:
        return False
    keys = vals[0].keys()
    if not keys or not all(map(keys.__eq__, map(dict.keys, vals))) \
            or not all(type(k) is str for k in keys):
        return False
    return all(_expand(f"{name}.{k}", list(map(operator.itemgetter(k), vals)), depth + 1, out)
               for k in keys)


_LEAF_TYPES = frozenset({str, int, float, bool, type(None), list})


def raw_columns(values: list[Any]) -> list[Column]:
    """:func:`columns_of` the flattened records of parsed JSON values, flattening whole
    columns at once when every record has the same fields (else record by record)."""
    if set(map(type, values)) == {dict}:
        first = values[0].keys()
        if all(map(first.__eq__, map(dict.keys, values))) \
                and all(type(k) is str for k in first):
            out: list[Column] = []
            if all(_expand(k, list(map(operator.itemgetter(k), values)), 0, out)
                   for k in first):
                return out
    return columns_of([flatten(v) for v in values])


class RecordHashes:
    """Accumulates the fields' contributions to a block's record hashes."""

    def __init__(self, n: int) -> None:
        import numpy as np

        self.sums = np.zeros(n, dtype=np.uint64)
        self.nfields = np.zeros(n, dtype=np.int64)

    def add(self, name: str, rows: Any, hashes: Any) -> None:
        contrib = vhash.field_contribution(name, hashes)
        if rows is None:
            self.sums += contrib
            self.nfields += 1
        else:  # a field's rows are distinct
            self.sums[rows] += contrib
            self.nfields[rows] += 1

    def finish(self) -> Any:
        return vhash.finish_record_hashes(self.sums, self.nfields)


def texts_of(columns: list[Column], n: int) -> Iterator[str]:
    """Every record's text (its str values joined in field-name order: ``values.text_of``)."""
    cols = sorted((c for c in columns if any(issubclass(k, str) for k in set(map(type, c[2])))),
                  key=lambda c: c[0])
    if all(c[1] is None and set(map(type, c[2])) == {str} for c in cols):
        if not cols:
            yield from ("" for _ in range(n))
            return
        yield from map("\n".join, zip(*(c[2] for c in cols), strict=True))
        return
    per_row: list[list[str]] = [[] for _ in range(n)]
    for _name, rows, vals in cols:
        for i, v in zip(range(n) if rows is None else rows, vals, strict=True):
            if isinstance(v, str):
                per_row[i].append(v)
    yield from ("\n".join(parts) for parts in per_row)


def profile_records(prof: Any, records: list[Any], tokens: TokenCounter | None,
                    raw: bool = False, fields: set[str] | None = None
                    ) -> tuple[Any, list[Column]]:
    """Add a block of flattened records (``raw``: parsed JSON values, flattened here) to
    ``prof`` (a ShardProfile), only ``fields`` when given; returns the records' hashes and
    their columns (for :func:`texts_of`)."""
    import numpy as np

    n = len(records)
    columns = raw_columns(records) if raw else columns_of(records)
    if fields is not None:
        columns = [c for c in columns if c[0] in fields]
    rh = RecordHashes(n)
    for name, rows, vals in columns:
        rh.add(name, None if rows is None else np.array(rows, dtype=np.int64),
               vhash.value_hashes(vals))
        if prof.accepts(name):
            add_values(prof.field_stats(name), vals, tokens)
        else:
            prof.overflow_fields += len(vals)
    return rh.finish(), columns


# -- Arrow record batches -----------------------------------------------------------------

# every character str.isspace() is true of, i.e. what str.strip() strips (Unicode 14/15:
# tests/profiles/test_block_profiles.py checks it against this Python's str.isspace)
WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003"
              "\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_MAYBE_SPACE_BYTES = {c.encode()[0] for c in WHITESPACE}  # a space character's first byte


class _Table:
    """A 256-entry bool table of :data:`_MAYBE_SPACE_BYTES`, made on first use (numpy)."""

    value: Any = None

    def __getitem__(self, index: Any) -> Any:
        if _Table.value is None:
            import numpy as np

            _Table.value = np.array([b in _MAYBE_SPACE_BYTES for b in range(256)], dtype=bool)
        return _Table.value[index]


_MAYBE_SPACE = _Table()


def _flat_arrow(prefix: str, name: str, arr: Any, depth: int, out: list[tuple[str, Any]],
                pa: Any) -> bool:
    """Struct columns flattened as ``values.flatten`` flattens mappings; False when a struct
    holds nulls (a null mapping is one null field, not null children: the row path says so)."""
    t = arr.type
    if pa.types.is_struct(t) and t.num_fields > 0 and depth + 1 < FLATTEN_DEPTH:
        if arr.null_count:
            return False
        for j, child in enumerate(arr.flatten()):
            if not _flat_arrow(f"{prefix}{name}.", t.field(j).name, child, depth + 1, out, pa):
                return False
        return True
    out.append((f"{prefix}{name}", arr))
    return True


def arrow_columns(batch: Any) -> list[tuple[str, Any]] | None:
    """The batch's columns flattened to field names, or None when only the row path can
    say what the records are (a struct with nulls, a name that repeats)."""
    import pyarrow as pa

    out: list[tuple[str, Any]] = []
    for i, f in enumerate(batch.schema):
        if not _flat_arrow("", f.name, batch.column(i), 0, out, pa):
            return None
    if len({name for name, _ in out}) != len(out):
        return None
    return out


def _valid(arr: Any) -> Any:
    import numpy as np

    if not arr.null_count:
        return np.ones(len(arr), dtype=bool)
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _binary_parts(arr: Any) -> tuple[Any, Any]:
    """(data bytes, offsets) of a string/binary array (its own slice of the buffers)."""
    import numpy as np
    import pyarrow as pa

    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    bufs = arr.buffers()
    off = np.frombuffer(bufs[1], dtype=np.int64 if large else np.int32)
    off = off[arr.offset: arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size \
        else np.zeros(0, dtype=np.uint8)
    return data, off


def _arrow_binary(stats: FieldStats | None, arr: Any, text: bool,
                  tokens: TokenCounter | None) -> Any:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(arr)
    valid = _valid(arr)
    data, off = _binary_parts(arr)
    h = vhash.segment_hashes(data, off, vhash.TAG_STR if text else vhash.TAG_BYTES)
    if arr.null_count:
        h = np.where(valid, h, np.uint64(vhash.NULL_HASH))
    if stats is None:
        return h
    nulls = arr.null_count
    stats.present += n
    if nulls:
        stats.nulls += nulls
        stats.add_type("null", nulls)
    if n - nulls:
        stats.add_type("str" if text else "bytes", n - nulls)
    lengths = np.diff(off)
    if text:
        blank = np.zeros(n, dtype=bool)
        # a blank string is empty or starts with a space character: only those are trimmed
        first = np.zeros(n, dtype=np.uint8)
        some = lengths > 0
        first[some] = data[off[:-1][some]]
        maybe = valid & (~some | _MAYBE_SPACE[first])
        if maybe.any():
            idx = np.flatnonzero(maybe)
            trimmed = pc.binary_length(pc.utf8_trim(arr.take(pa.array(idx)),
                                                    characters=WHITESPACE))
            blank[idx] = trimmed.to_numpy(zero_copy_only=False) == 0
    else:
        blank = lengths == 0
    keep = valid & ~blank
    stats.empties += int((valid & blank).sum())
    if not keep.any():
        return h
    add_dist(stats, "bytes", lengths[keep])
    if text:
        # at most 64 characters: at most 64 bytes surely, more than 256 bytes surely not
        short = keep & (lengths <= CATEGORY_MAX_CHARS)
        unsure = keep & (lengths > CATEGORY_MAX_CHARS) & (lengths <= 4 * CATEGORY_MAX_CHARS)
        if unsure.any():
            idx = np.flatnonzero(unsure)
            chars = pc.utf8_length(arr.take(pa.array(idx))).to_numpy(zero_copy_only=False)
            short[idx] = chars <= CATEGORY_MAX_CHARS
        if short.any():
            vc = pc.value_counts(arr.filter(pa.array(short)))
            add_top_arrow(stats.top, vc, True)
        if tokens is not None:
            vals = arr.filter(pa.array(keep)).to_pylist()
            add_dist(stats, "tokens", np.array([tokens(s) for s in vals], dtype=np.float64))
    return h


def _arrow_numeric(stats: FieldStats | None, arr: Any, kind: str) -> Any:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(arr)
    valid = _valid(arr)
    nulls = arr.null_count
    if kind == "bool":
        x = arr.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
        h = vhash.bool_hashes(x)
    elif kind == "int":
        x = arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        h = vhash.int64_hashes(x)
    else:
        x = arr.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
        h = vhash.float_hashes(x)
    if nulls:
        h = np.where(valid, h, np.uint64(vhash.NULL_HASH))
    if stats is None:
        return h
    stats.present += n
    if nulls:
        stats.nulls += nulls
        stats.add_type("null", nulls)
        x = x[valid]
    if n - nulls:
        stats.add_type(kind, n - nulls)
    if kind == "bool":
        vc = pc.value_counts(arr.drop_null())
        keys, counts = vc.field("values").to_pylist(), vc.field("counts").to_pylist()
        stats.top.add_counts({"true" if k else "false": c
                              for k, c in zip(keys, counts, strict=True)})
        return h
    if kind == "int":
        add_top_arrow(stats.top, pc.value_counts(arr.cast(pa.int64()).drop_null()), False)
        x = x.astype(np.float64)
    _add_numbers(stats, x)
    return h


def _arrow_kind(t: Any, pa: Any) -> str | None:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t) and t != pa.uint64():
        return "int"
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return "float"
    return None


def profile_arrow(prof: Any, batch: Any, fields: set[str] | None,
                  tokens: TokenCounter | None) -> tuple[Any, list[Column]] | None:
    """Add an Arrow record batch to ``prof`` column by column; returns the records' hashes and
    their text columns, or None when the batch must take the row path (nothing was added)."""
    import pyarrow as pa

    cols = arrow_columns(batch)
    if cols is None:
        return None
    if fields is not None:
        cols = [(name, arr) for name, arr in cols if name in fields]
    n = batch.num_rows
    rh = RecordHashes(n)
    texts: list[Column] = []
    for name, arr in cols:
        stats = prof.field_stats(name) if prof.accepts(name) else None
        if stats is None:
            prof.overflow_fields += n
        kind = _arrow_kind(arr.type, pa)
        if kind == "str" or kind == "bytes":
            h = _arrow_binary(stats, arr, kind == "str", tokens)
            if kind == "str":
                texts.append((name, None, arr))  # type: ignore[arg-type]
        elif kind is not None:
            h = _arrow_numeric(stats, arr, kind)
        elif pa.types.is_null(arr.type):
            import numpy as np

            h = np.full(n, vhash.NULL_HASH, dtype=np.uint64)
            if stats is not None:
                stats.present += n
                stats.nulls += n
                stats.add_type("null", n)
        else:  # other types: their Python values, as the row path sees them
            vals = arr.to_pylist()
            h = vhash.value_hashes(vals)
            if stats is not None:
                add_values(stats, vals, tokens)
            if any(isinstance(v, str) for v in vals):
                texts.append((name, None, vals))
        rh.add(name, None, h)
    return rh.finish(), texts


def arrow_texts(columns: list[Column], n: int) -> Iterator[str]:
    """:func:`texts_of` for :func:`profile_arrow`'s text columns (Arrow arrays or lists)."""
    cols: list[Column] = []
    for name, rows, vals in columns:
        cols.append((name, rows, vals if isinstance(vals, list) else vals.to_pylist()))
    return texts_of(cols, n)


def arrow_normalised_texts(columns: list[Column]) -> tuple[Any, Any] | None:
    """``minhash.normalise(text_of(record))`` of every record: (bytes, lengths), the texts
    joined by Arrow and normalised by :func:`~.minhash.normalise_ascii`; None unless every
    text column is a plain string array of ASCII text."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from ckptrescue.datasets.profiles.minhash import normalise_ascii

    if not columns:
        return None
    arrays = []
    for _name, _rows, arr in sorted(columns, key=lambda c: c[0]):
        if not isinstance(arr, pa.Array) or not (pa.types.is_string(arr.type)
                                                 or pa.types.is_large_string(arr.type)):
            return None
        data, off = _binary_parts(arr)
        if off[-1] > off[0] and int(data[off[0]: off[-1]].max()) >= 0x80:
            return None  # not ASCII (null slots hold no bytes)
        arrays.append(arr.cast(pa.large_string()))
    if len(arrays) == 1:
        joined = arrays[0]
    else:
        joined = pc.binary_join_element_wise(*arrays, pa.scalar("\n", pa.large_string()),
                                             null_handling="skip")
    data, off = _binary_parts(joined.fill_null(""))
    return normalise_ascii(data, off)


def rows_of(batch: Any) -> list[dict[str, Any]]:
    """The row path: the batch's records as flattened dicts."""
    return [flatten(row) for row in batch.to_pylist()]
