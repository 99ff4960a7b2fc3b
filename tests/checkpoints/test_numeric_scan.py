"""The numeric scan's counts and extremes are exact whatever the values, its per-element follow-up
is bounded and says so, and a storage read in parallel segments gives the sequential answer.

Values come from numpy's seeded integer generator (exact in every float type); the reference
answers are computed here with plain numpy over the whole array (sort, isnan), not with the
scan's own arithmetic.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.formats import numeric, streaming
from ckptrescue.checkpoints.formats.crc32 import crc32_combine, crc32_combine_py
from ckptrescue.checkpoints.formats.crc32c import crc32c, crc32c_combine
from fixtures import checkpoints as fx

from .conftest import probe1

FLOATS = {"float16": np.float16, "float32": np.float32, "float64": np.float64}
CHUNK = 1 << 16


def _values(kind: str, n: int, dtype: type) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(kind.encode()) % 1000)  # the same values every run
    if kind == "normal":
        v = rng.integers(-1024, 1024, (4, n)).sum(axis=0) * 2.0 ** -12
    elif kind == "integer":
        v = rng.integers(-500, 500, n).astype(np.float64)
    elif kind == "arange":
        v = np.arange(n, dtype=np.float64)
    elif kind == "zero":
        v = np.zeros(n)
    elif kind == "subnormal":
        v = rng.integers(-100, 100, n) * (2.0 ** -1070 if dtype is np.float64 else 2.0 ** -20)
    else:  # "nonfinite": three quarters NaN / +Inf / -Inf
        v = rng.integers(-1024, 1024, n) * 2.0 ** -12
        k = rng.integers(0, 4, n)
        v[k == 0], v[k == 1], v[k == 2] = np.nan, np.inf, -np.inf
    with np.errstate(over="ignore"):
        return v.astype(dtype)


def _scan(arr: np.ndarray, dtype: str, *, start: int = 64, names=("w",)) -> numeric.StorageScan:
    data = arr.tobytes()
    scan = numeric.StorageScan(dtype, start=start, length=len(data), names=list(names))
    pos = start
    while pos < start + len(data):  # chunked as the CRC pass chunks (absolute multiples)
        step = min(CHUNK - pos % CHUNK, start + len(data) - pos)
        scan.feed(pos, memoryview(data)[pos - start:pos - start + step])
        pos += step
    return scan


@pytest.mark.parametrize("dtype", sorted(FLOATS))
@pytest.mark.parametrize("kind", ["normal", "integer", "arange", "zero", "subnormal",
                                  "nonfinite"])
def test_counts_and_top_magnitudes_are_exact_for_every_distribution(dtype, kind):
    arr = _values(kind, 70_001, FLOATS[dtype])
    scan = _scan(arr, dtype, names=("exp_avg_sq",))
    top = list(scan._top)  # before finish, the running top three (magnitude bits, index, raw)
    s = scan.finish()
    bits = arr.view(f"u{arr.itemsize}")
    finite = np.isfinite(arr)
    assert s.count == arr.size
    assert s.nan == int(np.isnan(arr).sum()) and s.inf == int(np.isinf(arr).sum())
    assert s.zeros == int((arr == 0).sum())
    tiny = np.finfo(FLOATS[dtype]).tiny
    assert s.subnormals == int(((np.abs(arr) < tiny) & (arr != 0)).sum())
    assert s.negatives == int((np.signbit(arr) & (arr != 0)).sum() + 0)
    assert len(s.nonfinite_examples) == min(numeric.EXAMPLES, int((~finite).sum()))
    mag = (bits & ((1 << (8 * arr.itemsize - 1)) - 1))[finite]
    want = sorted(mag.tolist(), reverse=True)[:3]
    assert [m for m, _, _ in top] == want
    for m, index, raw in top:  # each kept element is really at its index
        assert int(bits[index]) == raw and raw & ((1 << (8 * arr.itemsize - 1)) - 1) == m


@pytest.mark.parametrize("width", [1, 2, 4, 8])
def test_the_magnitude_range_from_four_reductions_is_the_sign_cleared_range(width):
    """A chunk's smallest and largest magnitude come from the unsigned and signed views
    without writing the magnitudes: the same as clearing the sign bit and reducing, for
    chunks of one sign, of the other, of both, and of one element, at the edges of the
    range (+0, -0, the largest bit patterns)."""
    rng = np.random.default_rng(width)
    ucode = f"u{width}"
    sign = 8 * width - 1
    top, full = 1 << sign, (1 << 8 * width) - 1
    raw = rng.integers(0, full, 5000, dtype=ucode, endpoint=True)
    chunks = {"mixed": raw, "positive": raw & (top - 1), "negative": raw | top,
              "one": raw[:1], "one negative": raw[:1] | top,
              "edges": np.array([0, top, top - 1, full], dtype=ucode),
              "zeros both signs": np.array([top, 0, top], dtype=ucode),
              "largest only": np.array([full, full], dtype=ucode)}
    for name, u in chunks.items():
        mag = u & (top - 1)
        assert numeric._magnitude_range(u, sign) == (int(mag.min()), int(mag.max())), name


@pytest.mark.parametrize("name,code", [
    ("model/bn/moving_variance/.ATTRIBUTES/VARIABLE_VALUE", "NM005"),
    ("optimizer/velocity/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE", "NM004"),
    ("bn.running_var", "NM005"), ("opt.state.0.exp_avg_sq", "NM004"),
    ("model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE", None)])
def test_a_named_tensor_counts_signs_only_where_its_name_carries_an_invariant(name, code):
    """TensorFlow's and Keras' scans take the variable's name: a moving variance with a value
    <= 0 or a second moment with a negative value is flagged as on a scan without a name,
    and a kernel's scan does not count signs at all (its negative values are expected)."""
    from ckptrescue.checkpoints.formats.tf_findings import numeric_findings, numeric_scan

    values = np.arange(1, 4097, dtype=np.float32) * np.float32(2.0 ** -10)
    values[4000] = -values[4000]
    data = values.tobytes()
    named = numeric_scan("float32", 0, len(data), name=name)
    assert named is not None
    named.feed(0, data)
    found = [f.code for f in numeric_findings(named, name, evidence=None)]
    assert found == ([code] if code else [])
    assert named.scan.invariants == (code is not None)
    unnamed = numeric_scan("float32", 0, len(data))
    assert unnamed is not None
    unnamed.feed(0, data)
    assert unnamed.scan.invariants and [f.code for f in numeric_findings(
        unnamed, name, evidence=None)] == found


def test_nonfinite_examples_are_bounded_and_say_so():
    arr = _values("nonfinite", 50_000, np.float32)
    s = _scan(arr, "float32").finish()
    found = numeric.judge(s, ["w"])
    nm1 = next(f for f in found if f.code == "NM001")
    assert nm1.details["nan"] + nm1.details["inf"] == int((~np.isfinite(arr)).sum())
    assert len(nm1.details["examples"]) == numeric.EXAMPLES == nm1.details["examples_limit"]
    first = np.flatnonzero(~np.isfinite(arr))[:numeric.EXAMPLES].tolist()
    assert [e["index"] for e in nm1.details["examples"]] == first


def test_zero_pages_are_all_counted_and_a_bounded_list_kept():
    arr = _values("normal", 400_000, np.float32)  # 1.6 MB, ~390 pages, no zero page
    arr[1024 * 10:1024 * 110] = 0  # 100 whole 4 KiB pages (start 0 is page-aligned)
    s = _scan(arr, "float32", start=0).finish()
    found = [f for f in numeric.judge(s, ["w"]) if f.code == "NM003"]
    assert s.zero_page_count == 100 and len(s.zero_pages) == numeric.PAGES_KEPT
    assert s.zero_pages[0] == 4096 * 10
    assert found and found[0].length == 100 * 4096
    assert found[0].details["pages_limit"] == numeric.PAGES_KEPT


@pytest.mark.parametrize("kind", ["normal", "nonfinite", "zero"])
def test_a_range_scanned_in_segments_and_merged_equals_one_pass(kind):
    arr = _values(kind, 300_000, np.float32)
    arr[123_456] = np.float32(3.0e30)  # an exponent outlier in a later segment
    data = arr.tobytes()
    start = 64
    rng = streaming.ByteRange(start, len(data), itemsize=4)
    whole = _scan(arr, "float32", start=start).finish()
    merged = None
    for seg_start, seg_len in rng.cuts(4 * CHUNK):
        part = numeric.StorageScan("float32", start=seg_start, length=seg_len, names=["w"])
        pos = seg_start
        while pos < seg_start + seg_len:
            step = min(CHUNK - pos % CHUNK, seg_start + seg_len - pos)
            part.feed(pos, memoryview(data)[pos - start:pos - start + step])
            pos += step
        if merged is None:
            merged = part
        else:
            merged.merge(part)
    assert merged is not None
    got = merged.finish()
    assert numeric.judge(got, ["w"]) == numeric.judge(whole, ["w"])
    assert (got.count, got.nan, got.inf, got.zeros, got.zero_page_count) == \
        (whole.count, whole.nan, whole.inf, whole.zeros, whole.zero_page_count)


def test_crc_of_parts_combines_to_the_crc_of_the_whole():
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    for cut in (0, 1, 4096, 123_457, len(data)):
        a, b = data[:cut], data[cut:]
        for combine in (crc32_combine, crc32_combine_py):
            assert combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(data)
        assert crc32c_combine(crc32c(a), crc32c(bytearray(b)), len(b)) == crc32c(data)


def test_one_large_storage_read_in_parallel_segments_matches_the_sequential_read(
        tmp_path, monkeypatch):
    import torch

    n = 3 * (1 << 20)  # 12 MiB: six segments of 2 MiB
    flat = _values("normal", n, np.float32)
    path = fx.save_zip(tmp_path / "one.pt", {"w": torch.from_numpy(flat)})
    off, _ = fx.zip_data_offset(path, fx.zip_member(path, "data/0"))
    elem = (5 << 20) // 4 + 7  # inside the third segment
    fx.flip_bit(path, off + 4 * elem + 3, 6)  # bit 30: an exponent flip, and a CRC mismatch
    reports = {}
    for threads, segment in (("1", 1 << 40), ("3", 2 << 20)):  # one pass; six segments
        monkeypatch.setattr(streaming, "SEGMENT", segment)
        monkeypatch.setenv("CKPTRESCUE_THREADS", threads)
        reports[threads] = probe1(path)
    one, many = reports["1"], reports["3"]
    assert one.verdict is many.verdict is Verdict.DAMAGED
    assert [(f.code, f.offset, f.details) for f in one.findings] == \
        [(f.code, f.offset, f.details) for f in many.findings]
    nm2 = next(f for f in many.findings if f.code == "NM002")
    assert nm2.details["index"] == elem and nm2.details["flip_bit"] == 30
    assert any(f.code == "TZ002" for f in many.findings)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_bits_decode_as_torch_decodes_them(dtype):
    import torch

    values = torch.arange(256, dtype=torch.uint8).view(getattr(torch, dtype)).float().tolist()
    for bits, want in enumerate(values):
        got = numeric.from_bits(bits, dtype)
        assert (np.isnan(got) and np.isnan(want)) or got == want, (dtype, bits)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_tensors_are_scanned_nan_inf_and_flips_found(tmp_path, dtype):
    import torch

    rng = np.random.default_rng(5)
    # ordinary values: exponents 5..8 (|x| in [2^-2, 2^2) for e4m3fn, [2^-10, 2^-6) for e5m2)
    exp = rng.integers(5, 9, 20_000, dtype=np.uint8)
    shift = 3 if dtype == "float8_e4m3fn" else 2
    raw = (exp << shift) | rng.integers(0, 1 << shift, 20_000, dtype=np.uint8)
    raw[1234] |= 0x40  # the top exponent bit flipped: x 2^8 for e4m3fn, 2^16 for e5m2
    raw[777] = 0x7F  # NaN (e4m3fn) / NaN (e5m2: exponent all ones, mantissa 3)
    tensor = torch.from_numpy(raw.copy()).view(getattr(torch, dtype))
    path = fx.save_zip(tmp_path / "fp8.pt", {"w": tensor})
    r = probe1(path)
    codes = {f.code for f in r.findings}
    assert "NM007" not in codes and r.verdict is Verdict.SUSPECT
    nm1 = next(f for f in r.findings if f.code == "NM001")
    assert nm1.details["nan"] == 1 and nm1.details["inf"] == 0
    assert nm1.details["examples"][0]["index"] == 777
    nm2 = next(f for f in r.findings if f.code == "NM002")
    assert nm2.details["index"] == 1234 and nm2.details["flip_bit"] == 6
    assert nm2.details["repaired"] == tensor[1234].float().item() / 2.0 ** (
        8 if dtype == "float8_e4m3fn" else 16)
