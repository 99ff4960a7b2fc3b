"""Numerical health and --reference: exponent flips with flip-back, NaN/Inf, invariants,
and tensors that differ from the previous checkpoint by single bits.

Fixtures: real saves of the small training state; values are changed in copies at byte
offsets computed with Python's zipfile / the safetensors header (not with ckptrescue).
"""

from __future__ import annotations

import json
import math
import struct
import sys

import pytest

from ckptrescue.checkpoints.base import Verdict
from fixtures import checkpoints as fx

from .conftest import probe1


def st_offset(path, name):
    n = struct.unpack("<Q", path.read_bytes()[:8])[0]
    hdr = json.loads(path.read_bytes()[8:8 + n])
    return 8 + n + hdr[name]["data_offsets"][0]


def test_exponent_flip_is_suspect_with_flip_back(base, tmp_path):
    src = base["safetensors"]
    bad = fx.copy(src, tmp_path / "exp.safetensors")
    off = st_offset(bad, "0.weight") + 4 * 7
    orig = struct.unpack("<f", src.read_bytes()[off:off + 4])[0]
    fx.flip_bit(bad, off + 3, 6)  # bit 30 of element 7
    r = probe1(bad)
    assert r.verdict is Verdict.SUSPECT
    assert r.suspect_tensors == ["0.weight"]
    nm = [f for f in r.findings if f.code == "NM002"]
    assert len(nm) == 1 and nm[0].offset == off
    assert nm[0].details["index"] == 7 and nm[0].details["flip_bit"] == 30
    assert nm[0].details["repaired"] == pytest.approx(orig)


def test_exponent_flip_in_wide_zip_tensor(base, tmp_path):
    src = base["wide"]
    bad = fx.copy(src, tmp_path / "exp.pt")
    off, _ = fx.zip_data_offset(src, fx.zip_member(src, "data/0"))
    fx.flip_bit(bad, off + 4 * 1000 + 3, 6)
    r = probe1(bad)
    assert r.verdict is Verdict.DAMAGED  # the CRC catches it too
    nm = [f for f in r.findings if f.code == "NM002"]
    assert nm and nm[0].tensors == ("model.0.weight",) and nm[0].details["flip_bit"] == 30


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_nan_inf(base, tmp_path, value):
    bad = fx.copy(base["safetensors"], tmp_path / "nan.safetensors")
    fx.set_float(bad, st_offset(bad, "3.weight") + 8, value)
    r = probe1(bad)
    assert r.verdict is Verdict.SUSPECT and r.suspect_tensors == ["3.weight"]
    f = next(f for f in r.findings if f.code == "NM001")
    assert f.details["nan" if math.isnan(value) else "inf"] == 1


def test_invariants_from_names(base, tmp_path):
    import torch

    state = fx.training_state()
    state["optimizer"]["state"][0]["exp_avg_sq"][0, 0] = -1.0
    state["model"]["1.running_var"][3] = 0.0
    path = fx.save_zip(tmp_path / "inv.pt", state)
    r = probe1(path)
    assert r.verdict is Verdict.SUSPECT
    assert set(r.suspect_tensors) == {"optimizer.state.0.exp_avg_sq", "model.1.running_var"}
    assert {"NM004", "NM005"} <= {f.code for f in r.findings}
    assert torch.load(path, weights_only=True)  # the file itself is structurally fine


def test_reference_single_bit_difference(base, tmp_path):
    src = base["safetensors"]
    bad = fx.copy(src, tmp_path / "low.safetensors")
    off = st_offset(bad, "1.weight") + 4 * 2
    fx.flip_bit(bad, off, 1)  # mantissa bit 1: invisible numerically, no checksum exists
    assert probe1(bad).verdict is Verdict.INTACT
    r = probe1(bad, reference=src)
    assert r.verdict is Verdict.SUSPECT and r.suspect_tensors == ["1.weight"]
    f = next(f for f in r.findings if f.code == "RF004")
    assert f.details["examples"][0]["bit"] == 1 and f.offset == off
    assert r.extra["reference"]["identical"] == r.tensors_total - 1


def test_reference_missing_added_changed(base, tmp_path):
    flat = fx.flatten(base["state"]["model"])
    del flat["3.bias"]
    flat["extra"] = flat["0.bias"].clone()
    flat["0.weight"] = flat["0.weight"].double()
    path = fx.save_safetensors(tmp_path / "other.safetensors", flat)
    r = probe1(path, reference=base["safetensors"])
    got = {f.code: f.tensors for f in r.findings if f.code.startswith("RF")}
    assert got["RF001"] == ("3.bias",) and got["RF002"] == ("extra",)
    assert got["RF003"] == ("0.weight",)


def test_no_false_alarms_on_plausible_tensors(tmp_path):
    import torch

    from fixtures.checkpoints import exact_heavy_tailed, exact_tensor

    emb_sq = torch.full((4096,), 1e-20)
    emb_sq[:5] = 1e-3  # sparse Adam state: a few rows updated, legitimately large
    state = {"emb.weight": exact_tensor(2048, 8, seed=3), "ln.weight": torch.ones(2048),
             "ln.bias": torch.zeros(4096), "opt.exp_avg_sq": emb_sq,
             "heavy": exact_heavy_tailed(4096, seed=4)}
    path = fx.save_safetensors(tmp_path / "plausible.safetensors", state)
    r = probe1(path)
    assert [f.code for f in r.findings if f.code.startswith("NM")] == []
    assert r.verdict is Verdict.INTACT


def test_bit_flip_in_pickle(base, tmp_path):
    bad = fx.copy(base["zip"], tmp_path / "pkl.pt")
    off, size = fx.zip_data_offset(bad, fx.zip_member(bad, "data.pkl"))
    fx.flip_bit(bad, off + size // 2, 4)
    r = probe1(bad)
    assert r.verdict is Verdict.DAMAGED
    f = next(f for f in r.findings if f.code == "TZ002")
    assert f.offset == off and f.length == size


@pytest.mark.parametrize(("dtype", "bit"), [("bfloat16", 14), ("float16", 14), ("float64", 62)])
def test_exponent_flip_other_float_types(tmp_path, dtype, bit):
    import torch

    from fixtures.checkpoints import exact_tensor

    t = exact_tensor(512, seed=1, scale_log2=-15).to(getattr(torch, dtype))
    path = fx.save_safetensors(tmp_path / "x.safetensors", {"w": t, "b": t.clone()})
    off = st_offset(path, "w") + t.element_size() * 100
    fx.flip_bit(path, off + t.element_size() - 1, bit % 8)
    r = probe1(path)
    nm = [f for f in r.findings if f.code == "NM002"]
    assert r.suspect_tensors == ["w"] and len(nm) == 1
    assert nm[0].details["index"] == 100 and nm[0].details["flip_bit"] == bit
    assert nm[0].details["repaired"] == pytest.approx(float(t[100]), rel=1e-3)


def test_peak_memory_does_not_grow_with_size(tmp_path):
    """Probe an 8 MiB and a 96 MiB checkpoint in child processes; compare peak RSS (VmHWM)."""
    import torch

    from ckptrescue.effects.runner import SubprocessRunner
    from fixtures.checkpoints import exact_tensor

    code = ("import sys;from pathlib import Path;"
            "from ckptrescue.checkpoints.probes.checkpoints import probe_paths, formats;formats();"
            "import numpy\n"
            "def hwm():\n"
            "    return int(next(l for l in open('/proc/self/status') "
            "if l.startswith('VmHWM')).split()[1])\n"
            "b=hwm();r=probe_paths([Path(sys.argv[1])])[0];print(hwm()-b, r.verdict)")
    peaks = []
    for mib in (8, 96):
        path = tmp_path / f"{mib}.pt"
        torch.save({f"w{i}": exact_tensor(1024 * 1024, seed=i) for i in range(mib // 4)}, path)
        res = SubprocessRunner(None).run_internal([sys.executable, "-c", code, str(path)],
                                                  purpose="test", timeout_s=120)
        grow, verdict = res.stdout.split()
        assert verdict == "intact"
        peaks.append(int(grow))
        path.unlink()
    assert peaks[1] - peaks[0] < 16 * 1024, peaks  # KiB: no growth with the file size
