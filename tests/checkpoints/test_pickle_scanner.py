"""The pickle scanner sees exactly what CPython's unpickler sees.

Oracle: a *recording* ``pickle.Unpickler`` whose ``find_class`` records the name and returns an
inert stub class (nothing is imported, nothing real is called), fed through ``io.BytesIO`` as
``torch.load`` feeds ``data.pkl``. On generated streams (valid, truncated, bit-flipped, with
FRAMEs that ops overrun) the globals the scanner reports equal the ones the unpickler asks for,
up to its first error. Also differential against ``pickletools.genops`` on well-formed pickles.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import struct
import time

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.formats import pickle_ops, pickle_scan

from .conftest import probe1


class _StubMeta(type):
    def __getattr__(cls, name):  # noqa: N805
        return cls

    def __setitem__(cls, key, value):  # noqa: N805
        pass


class _Stub(metaclass=_StubMeta):
    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Stub()

    def __getattr__(self, name):
        return _Stub()

    def __setitem__(self, key, value):
        pass

    def __setstate__(self, *state):
        pass

    def append(self, *a):
        pass

    def extend(self, *a):
        pass

    def add(self, *a):
        pass


class Recorder(pickle.Unpickler):
    """Records every find_class; returns a fresh stub class (never imports)."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.seen: list[tuple[str, str]] = []

    def find_class(self, module, name):  # noqa: D102
        self.seen.append((module, name))
        return type("S", (_Stub,), {})

    def persistent_load(self, pid):  # noqa: D102
        return _Stub()


MEMO_CAP = 1 << 16


def _huge_memo(data: bytes) -> bool:
    """CPython's C unpickler grows its memo *array* to the largest index it is given (8 bytes
    an entry, zero-filled): a random LONG_BINPUT index makes the oracle itself allocate tens of
    GiB. Such streams are left out of the differential tests (the scanner's memo is a dict, as
    torch's weights-only unpickler's is)."""
    try:
        for op, arg, _pos in pickletools.genops(data):
            if op.name in {"LONG_BINPUT", "LONG_BINGET", "PUT", "GET"} and \
                    isinstance(arg, int) and arg > MEMO_CAP:
                return True
    except Exception:  # noqa: BLE001, S110 - only the prefix that parses matters
        pass
    return False


def recorded(data: bytes) -> tuple[list[tuple[str, str]], bool]:
    u = Recorder(data)
    try:
        u.load()
        ok = True
    except Exception:  # noqa: BLE001 - any error: the oracle stops there
        ok = False
    return u.seen, ok


def scanned(data: bytes) -> tuple[list[tuple[str, str]], bool]:
    scan = pickle_scan.scan_pickle(data, partial=True, encoding="ASCII", ext_registered=False)
    return scan.raw_globals, scan.error is None


def u8(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


# -- a grammar of opcodes ---------------------------------------------------------------------
NAMES = st.sampled_from(["os", "system", "torch", "a.b", "builtins", "eval", "x"])
OP = st.one_of(
    st.builds(lambda m, n: b"c" + m.encode() + b"\n" + n.encode() + b"\n", NAMES, NAMES),
    st.builds(lambda m, n: u8(m) + u8(n) + b"\x93", NAMES, NAMES),
    st.builds(lambda m, n: b"(" + b"i" + m.encode() + b"\n" + n.encode() + b"\n", NAMES, NAMES),
    st.builds(u8, NAMES),
    st.builds(lambda n: b"K" + bytes([n]), st.integers(0, 255)),
    st.builds(lambda n: b"q" + bytes([n]), st.integers(0, 4)),
    st.builds(lambda n: b"h" + bytes([n]), st.integers(0, 4)),
    st.builds(lambda n: b"B" + struct.pack("<I", n), st.integers(0, 12)),
    st.sampled_from([b"(", b"t", b"l", b"d", b"]", b"}", b")", b"N", b"R", b"b", b"a", b"e",
                     b"s", b"u", b"0", b"1", b"2", b"\x85", b"\x86", b"\x87", b"\x94", b"\x81",
                     b"o", b"\x8f", b"\x90", b"\x91", b"Q", b"\x88", b"\x89", b"x"]),
    st.builds(lambda n: b"\x95" + struct.pack("<Q", n), st.integers(0, 16)),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OP, max_size=30), st.sampled_from([b"\x80\x02", b"\x80\x04", b""]),
       st.booleans())
def test_globals_equal_the_recording_unpicklers(ops, proto, stop):
    data = proto + b"".join(ops) + (b"." if stop else b"")
    assume(not _huge_memo(data))
    want, ok = recorded(data)
    got, parsed = scanned(data)
    assert got == want, (data, got, want)
    assert parsed == ok, (data, parsed, ok)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_globals_equal_on_arbitrary_bytes(data):
    assume(not _huge_memo(data))
    want, _ = recorded(data)
    got, _ = scanned(data)
    assert got == want, (data, got, want)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.integers() | st.text(max_size=5) | st.binary(max_size=5)
                    | st.floats(allow_nan=False),
                    lambda c: st.lists(c, max_size=4) | st.tuples(c, c)
                    | st.dictionaries(st.text(max_size=3), c, max_size=3), max_leaves=20),
       st.integers(0, 5))
def test_opcodes_equal_pickletools_on_well_formed_pickles(obj, proto):
    data = pickle.dumps(obj, protocol=proto)
    want = [(op.name, pos) for op, _arg, pos in pickletools.genops(data)]
    got = [(name, pos) for name, _arg, pos in pickle_ops.read_ops(data)]
    assert got == want
    assert pickle_scan.scan_pickle(data).error is None


def test_binbytes_overrunning_its_frame_is_read_as_the_unpickler_reads_it():
    """``BINBYTES`` uses ``_Unpickler_ReadInto`` (contiguous); a ``BINUNICODE`` overrunning its
    frame reads fresh bytes after the frame (``_Unpickler_Read``): the frame's tail is skipped.
    A payload hidden in the skipped/overrun bytes is found either way."""
    inner = b"X" + struct.pack("<I", 9) + b"ABCD"  # 5 of 9 bytes in the frame
    after = b"EFGHI" + b"0" + b"cos\nsystem\n" + b"0N."
    data = b"\x80\x04\x95" + struct.pack("<Q", len(inner)) + inner + after
    want, _ = recorded(data)  # BytesIO: the frame's tail is skipped, the payload never named
    scan = pickle_scan.scan_pickle(data, partial=True)
    assert scan.raw_globals == want == []
    assert "os.system" in scan.globals  # read contiguously (pickle.loads) it runs: kept
    assert scan.frame_violations


def test_payload_before_a_parse_error_is_kept_and_unsafe(tmp_path):
    data = b"\x80\x02cos\nsystem\nX\x05\x00\x00\x00touchR0" + b"\xff\xff"
    scan = pickle_scan.scan_pickle(data, partial=True)
    assert scan.error and scan.globals == ["os.system"]
    try:
        pickle_scan.scan_pickle(data)
    except pickle_scan.PickleError as exc:
        assert exc.partial is not None and exc.partial.globals == ["os.system"]
    path = tmp_path / "optimizer.pkl"
    path.write_bytes(data)
    assert probe1(path).verdict is Verdict.UNSAFE


def test_stack_global_through_memo_gets():
    data = (b"\x80\x04" + u8("os") + b"\x94" + u8("system") + b"\x94" + b"0" + b"0"
            + b"h\x00h\x01\x93" + u8("id") + b"\x85R.")
    assert recorded(data)[0] == [("os", "system")]
    assert pickle_scan.scan_pickle(data).globals == ["os.system"]


def test_hostile_sizes_are_bounded_and_never_intact(tmp_path, monkeypatch):
    n = pickle_scan.MAX_MARKS + 1000
    marks = b"\x80\x02" + b"(" * n + b"l" * n + b"."
    t = time.perf_counter()
    scan = pickle_scan.scan_pickle(marks, partial=True)
    assert time.perf_counter() - t < 30
    assert scan.limit and "MARK" in scan.limit
    # many objects within the bounds: STOP takes the top of the stack, as the unpickler does
    lists = b"\x80\x02" + b"]" * 300_000 + b"."
    scan = pickle_scan.scan_pickle(lists, partial=True)
    assert scan.limit is None and scan.error is None and isinstance(scan.root, list)
    # past the bound on objects (lowered here: the real one is 4,000,000), the scan stops
    monkeypatch.setattr(pickle_scan, "MAX_OBJECTS", 10_000)
    scan = pickle_scan.scan_pickle(b"\x80\x02" + b"]" * 20_000 + b".", partial=True)
    assert scan.limit and "objects" in scan.limit
    monkeypatch.undo()
    for blob in (b"\x80\x04\x8d" + struct.pack("<Q", 1 << 62) + b".",
                 b"\x80\x02\x8b" + struct.pack("<i", 1 << 30) + b".",
                 b"\x80\x02r\xff\xff\xff\xff" + b".", b"\x80\x02N" + b"r\xff\xff\xff\xff."):
        scan = pickle_scan.scan_pickle(blob, partial=True)
        assert scan.error or scan.root is None
    path = tmp_path / "deep.pkl"
    path.write_bytes(marks)
    assert probe1(path).verdict is not Verdict.INTACT


def test_ext_codes_are_unsafe(tmp_path):
    path = tmp_path / "ext.pkl"
    path.write_bytes(b"\x80\x02\x82\x07N\x85R.")
    r = probe1(path)
    assert r.verdict is Verdict.UNSAFE


def test_accelerate_random_states_are_fine(tmp_path):
    import random

    import numpy as np
    import torch

    run = tmp_path / "run"
    run.mkdir()
    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    states = {"step": 3, "random_state": random.getstate(),
              "numpy_random_seed": np.random.get_state(),
              "torch_manual_seed": torch.get_rng_state()}
    torch.save(states, run / "random_states_0.pkl")
    with open(run / "scaler.pkl", "wb") as fh:
        pickle.dump({"scale": 2.0 ** 16, "growth": 2.0}, fh)
    with open(run / "optimizer.pkl", "wb") as fh:
        fh.write(b"\x80\x04cposix\nsystem\nX\x04\x00\x00\x00trueR.")
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths

    verdicts = {r.path.rsplit("/", 1)[-1]: r.verdict for r in probe_paths([run])}
    assert verdicts["random_states_0.pkl"] is Verdict.INTACT, verdicts
    assert verdicts["scaler.pkl"] is Verdict.INTACT
    assert verdicts["optimizer.pkl"] is Verdict.UNSAFE


@pytest.mark.parametrize("op", [b"e", b"u", b"\x90"])
def test_a_mark_with_nothing_below_it_is_an_underflow_as_in_cpython(op: bytes) -> None:
    """``(e``: APPENDS (SETITEMS, ADDITEMS) with no target under the MARK fails in CPython's
    unpickler even with no items; the scanner must not call such a stream well formed (found by
    hypothesis: ``\\x80\\x02(e\\x8c\\x02os.``)."""
    data = b"\x80\x02(" + op + b"\x8c\x02os."
    want, ok = recorded(data)
    got, parsed = scanned(data)
    assert (got, parsed) == (want, ok) == ([], False)
