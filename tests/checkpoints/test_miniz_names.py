"""miniz's name order, as torch's zip reader uses it to find a record: the kit's comparisons
(lowered bytes, compared by Python) equal miniz's C loops (``mz_zip_reader_filename_less`` and
``mz_zip_reader_filename_compare``, transliterated below byte for byte) on names with mixed case,
shared prefixes, duplicates and bytes outside ASCII. The heap sort runs on them; with duplicate
names, the record found is the one its exact steps leave where the search lands."""

from __future__ import annotations

import random

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


class _Rec:
    def __init__(self, name_raw: bytes) -> None:
        self.name_raw = name_raw


def test_name_order_and_lookup_equal_minizs_loops() -> None:
    rng = random.Random(29)
    for _ in range(2000):
        names = _names(rng)
        for a in names[:6]:
            for b in names[:6]:
                assert miniz_rules._less(a, b) == _c_less(a, b), (a, b)
                c = _c_compare(a, b)
                assert miniz_rules._compare(a, b) == (c > 0) - (c < 0), (a, b)
        order = miniz_rules._heap_sort(names)
        assert sorted(order) == list(range(len(names)))
        for i in range(len(order) - 1):  # sorted by miniz's order
            assert not _c_less(names[order[i + 1]], names[order[i]])
        entries = [_Rec(n) for n in names]
        for want in names + [bytes(rng.choice(ALPHABET) for _ in range(3)) for _ in range(4)]:
            found = miniz_rules._binary_search(entries, order, want)  # type: ignore[arg-type]
            equal = [e for e in entries if _c_compare(e.name_raw, want) == 0]
            assert (found is None) == (not equal) and (found is None or found in equal), want
