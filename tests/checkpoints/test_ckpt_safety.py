"""Malicious pickles: verdict ``unsafe`` naming the globals, and the payload never runs.

Fixtures: real ``torch.save`` (zip and legacy) of a dict holding an object whose ``__reduce__``
is ``os.system("touch MARKER")``. The marker must never appear: probe, rank, salvage, --load.
"""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.formats import pickle_scan
from fixtures import checkpoints as fx

from .conftest import probe1, tree_hash


@pytest.mark.parametrize("legacy", [False, True])
def test_os_system_payload_is_unsafe_and_inert(tmp_path, legacy):
    marker = tmp_path / "PWNED"
    run = tmp_path / "run"
    run.mkdir()
    evil = fx.save_payload(run / "step_5.pt", marker, legacy=legacy)
    before = tree_hash(run)
    r = probe1(evil)
    assert r.verdict is Verdict.UNSAFE
    assert r.extra["unsafe_globals"] == ["posix.system"]
    pk = [f for f in r.findings if f.code == "PK001"]
    assert pk and "posix.system" in pk[0].title
    assert not marker.exists()

    from ckptrescue.checkpoints.rank import rank

    res = rank(run)
    assert res.to_json() == {"checkpoints": [{"path": str(run / "step_5.pt"),
                                              "verdict": "unsafe"}], "resume_from": None}
    assert not marker.exists()

    from ckptrescue.checkpoints.salvage import salvage

    out = salvage(evil, tmp_path / "out")
    assert out.recovered == ["model.w"] and out.source_verdict == "unsafe"
    assert not marker.exists()

    r = probe1(evil, load=True)
    assert r.load["status"] == "skipped"
    assert "LD004" in [f.code for f in r.findings]
    assert not marker.exists()
    assert tree_hash(run) == before


def test_cli_probe_of_payload_exits_1_and_never_runs_it(tmp_path):
    from ckptrescue.effects.runner import SubprocessRunner

    marker = tmp_path / "PWNED"
    evil = fx.save_payload(tmp_path / "evil.pt", marker)
    res = SubprocessRunner(None).run_internal(
        [sys.executable, "-m", "ckptrescue", "probe", "--json", "--load", str(evil)],
        purpose="test", timeout_s=120)
    assert res.returncode == 1
    data = json.loads(res.stdout)
    assert data["checkpoints"][0]["verdict"] == "unsafe"
    assert not marker.exists()


def test_torch_globals_are_allowed():
    assert pickle_scan.weights_only_allowed("torch._utils._rebuild_tensor_v2")
    assert pickle_scan.weights_only_allowed("torch.FloatStorage")
    assert pickle_scan.weights_only_allowed("collections.OrderedDict")
    assert not pickle_scan.weights_only_allowed("posix.system")
    assert not pickle_scan.weights_only_allowed("builtins.eval")
    assert not pickle_scan.weights_only_allowed("torch.load")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_scan_arbitrary_bytes_only_parses_or_raises_pickle_error(data):
    try:
        pickle_scan.scan_pickle(data)
    except pickle_scan.PickleError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=2000), st.integers(min_value=0, max_value=7))
def test_scan_of_bit_flipped_torch_pickle_never_raises_other_errors(pos, bit):
    import io
    import zipfile

    import torch

    buf = io.BytesIO()
    torch.save({"a": torch.ones(2), "b": [torch.zeros(3)]}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zf:
        raw = bytearray(zf.read(next(n for n in zf.namelist() if n.endswith("data.pkl"))))
    pos %= len(raw)
    raw[pos] ^= 1 << bit
    try:
        pickle_scan.scan_pickle(bytes(raw))
    except pickle_scan.PickleError:
        pass


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400), st.sampled_from([b"", b"PK\x03\x04", b"\x80\x02\x8a\x0a"]))
def test_probe_arbitrary_files_never_crashes(tmp_path_factory, data, head):
    path = tmp_path_factory.mktemp("fuzz") / "x.pt"
    path.write_bytes(head + data)
    r = probe1(path)
    assert r.verdict in set(Verdict)


def test_dcp_metadata_with_payload_is_unsafe(base, tmp_path):
    import pickle

    marker = tmp_path / "PWNED"
    d = fx.copy(base["dcp"], tmp_path / "dcp")
    with open(d / ".metadata", "wb") as fh:
        pickle.dump(fx._Payload(f"touch {marker}"), fh)
    r = probe1(d, load=True)
    assert r.verdict is Verdict.UNSAFE and r.load["status"] == "skipped"
    assert "posix.system" in r.extra["unsafe_globals"]
    assert not marker.exists()


def test_hostile_pickle_shapes_are_bounded():
    import pickle
    import time

    n = 100_000  # nested lists built with opcodes (pickle.dumps itself would recurse)
    deep_bytes = b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b"."
    laughs: list = ["x"]
    for _ in range(40):  # 2**40 paths through shared lists
        laughs = [laughs, laughs]
    for data in (deep_bytes, pickle.dumps(laughs, protocol=2)):
        t = time.perf_counter()
        scan = pickle_scan.scan_pickle(data)
        list(pickle_scan.iter_named(scan.root))
        assert time.perf_counter() - t < 30
