"""miniz's name order, as torch's zip reader uses it to find a record: the kit's comparisons
(lowered bytes, compared by Python) equal miniz's C loops (``mz_zip_reader_filename_less`` and
``mz_zip_reader_filename_compare``, transliterated below byte for byte) on names with mixed case,
shared prefixes, duplicates and bytes outside ASCII. The heap sort runs on them; with duplicate
names, the record found is the one its exact steps leave where the search lands."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ckptrescue.checkpoints.formats import miniz_rules

ALPHABET = b"aAbBzZ/._-09[`{@\x00\x7f\x80\xc3\xa9\xff"


def _tolower(c: int) -> int:  # MZ_TOLOWER: only A-Z
    return c + 32 if 65 <= c <= 90 else c


def _c_less(left: bytes, right: bytes) -> bool:
    """mz_zip_reader_filename_less, as written in miniz.c."""
    n = min(len(left), len(right))
    i = 0
    while i < n:
        lo, ro = _tolower(left[i]), _tolower(right[i])
        if lo != ro:
            return lo < ro
        i += 1
    return len(left) < len(right)


def _c_compare(entry: bytes, want: bytes) -> int:
    """mz_zip_reader_filename_compare, as written in miniz.c."""
    n = min(len(entry), len(want))
    for i in range(n):
        diff = _tolower(entry[i]) - _tolower(want[i])
        if diff:
            return diff
    return len(entry) - len(want)


def _names(rng: random.Random) -> list[bytes]:
    names: list[bytes] = []
    for _ in range(rng.randint(0, 30)):
        if names and rng.random() < 0.35:  # a duplicate, maybe in another case
            name = bytearray(rng.choice(names))
            if name and rng.random() < 0.7:
                i = rng.randrange(len(name))
                name[i] = ord(chr(name[i]).swapcase()) if name[i] < 128 else name[i]
            names.append(bytes(name))
        else:
            names.append(bytes(rng.choice(ALPHABET) for _ in range(rng.randint(0, 6))))
    return names


def test_name_order_and_lookup_equal_minizs_loops() -> None:
    rng = random.Random(29)
    for _ in range(2000):
        names = _names(rng)
        for a in names[:6]:
            for b in names[:6]:
                assert miniz_rules._less(a, b) == _c_less(a, b), (a, b)
                c = _c_compare(a, b)  # the search compares lowered names by byte order
                la, lb = miniz_rules.lower_name(a), miniz_rules.lower_name(b)
                assert (la > lb) - (la < lb) == (c > 0) - (c < 0), (a, b)
        order = miniz_rules._heap_sort(names)
        assert sorted(order) == list(range(len(names)))
        for i in range(len(order) - 1):  # sorted by miniz's order
            assert not _c_less(names[order[i + 1]], names[order[i]])
        keys = [miniz_rules.lower_name(names[i]) for i in order]  # as torch_view keeps them
        for want in names + [bytes(rng.choice(ALPHABET) for _ in range(3)) for _ in range(4)]:
            at = miniz_rules._binary_search(keys, want)
            equal = [i for i, n in enumerate(names) if _c_compare(n, want) == 0]
            assert (at is None) == (not equal) and (at is None or order[at] in equal), want


def test_the_record_found_among_same_named_ones_is_the_one_torch_reads(tmp_path: Path) -> None:
    """Exact steps, against the real reader: archives whose records share a name up to case, in
    varied orders and numbers; for each name, the record the kit's lookup returns holds the
    bytes torch's own reader (``PyTorchFileReader``: miniz) returns."""
    import warnings
    import zipfile

    torch = pytest.importorskip("torch")
    from ckptrescue.checkpoints.formats import zipwalk

    rng = random.Random(11)
    stems = ["data/0", "data/1", "data.pkl", "byteorder"]
    for trial in range(60):
        names = [f"archive/{rng.choice(stems)}" for _ in range(rng.randint(3, 14))]
        names = [n if rng.random() < 0.5 else n.swapcase().replace("ARCHIVE", "archive")
                 for n in names]
        path = tmp_path / f"a{trial}.zip"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("archive/version", b"3\n")  # the reader needs it to open
            for i, name in enumerate(names):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # duplicate names
                    zf.writestr(name, f"{i}:{name}".encode())
        with open(path, "rb") as fh:
            layout = zipwalk.read_central(fh)
        assert layout is not None
        view = miniz_rules.torch_view(layout)
        reader = torch._C.PyTorchFileReader(str(path))
        with open(path, "rb") as fh:
            data = fh.read()
        for name in {n.split("/", 1)[1] for n in names}:
            rec = view.locate(name)
            assert rec is not None and rec.data_offset is not None
            ours = data[rec.data_offset:rec.data_offset + rec.compressed_size]
            assert bytes(reader.get_record(name)) == ours, (trial, name, names)
