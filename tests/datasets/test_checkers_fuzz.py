"""Every container checker, on arbitrary bytes, returns an outcome and never raises."""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptrescue.datasets.verify import CHECKERS
from fixtures.datasets import write_webdataset_tar


@pytest.mark.parametrize("fmt", sorted(CHECKERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.one_of(
    st.binary(max_size=3000),
    st.binary(max_size=300).map(lambda b: b"\x93NUMPY" + b),  # .npy magic, random rest
    st.binary(max_size=300).map(lambda b: b"\x93NUMPY\x01\x00\x10\x00{'descr': " + b),
    st.binary(max_size=300).map(lambda b: b"PAR1" + b + b"PAR1"),
    st.binary(max_size=300).map(lambda b: b"PK\x03\x04" + b),
    st.binary(max_size=300).map(lambda b: bytes(100) + b),
))
def test_arbitrary_bytes_give_an_outcome(fmt: str, data: bytes) -> None:
    outcome = CHECKERS[fmt](io.BufferedReader(io.BytesIO(data)), len(data))  # type: ignore[arg-type]
    assert outcome.records >= 0
    for bad in outcome.bad:
        assert bad.problem


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(min_value=0, max_value=9000), flip=st.integers(min_value=0, max_value=8999))
def test_damaged_real_tar_gives_an_outcome(tmp_path_factory, cut: int, flip: int) -> None:
    path = tmp_path_factory.mktemp("t") / "s.tar"
    write_webdataset_tar(path, samples=3)
    data = bytearray(path.read_bytes())
    if flip < len(data):
        data[flip] ^= 0x55
    data = data[:cut]
    outcome = CHECKERS["tar"](io.BufferedReader(io.BytesIO(bytes(data))), len(data))  # type: ignore[arg-type]
    assert outcome.records <= 6
