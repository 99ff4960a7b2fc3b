"""``probe --load`` on family steps: every rank file through ``torch.load(weights_only=True)`` in the
sandbox child with exactly the family's globals registered as safe by qualified name, without
importing the training library (``sandbox_children/safe_globals.py``). Fixtures: the DeepSpeed
and Megatron steps the real libraries wrote (``f1_build``). The oracle for "loads" is torch.load
with the REAL classes registered (the library imported, in a child process)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from f1_build import built, codes, copy, oracle

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.probes.checkpoints import probe_paths

pytest.importorskip("torch")
OPT0 = "zero_pp_rank_0_mp_rank_00_optim_states.pt"
ORACLE = """
import json, sys, torch
from deepspeed.runtime.fp16.loss_scaler import LossScaler, DynamicLossScaler
from deepspeed.runtime.zero.config import ZeroStageEnum
from deepspeed.utils.tensor_fragment import fragment_address
torch.serialization.add_safe_globals([LossScaler, DynamicLossScaler, ZeroStageEnum,
                                      fragment_address])
out = {}
for f in sys.argv[1:]:
    try:
        torch.load(f, weights_only=True)
        out[f] = "ok"
    except Exception as exc:
        out[f] = type(exc).__name__ + ": " + str(exc)[:200]
print("ORACLE" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def ds() -> Path:
    pytest.importorskip("deepspeed")
    return built("deepspeed")


def run_oracle(files: list[Path]) -> dict[str, str]:
    proc = oracle(ORACLE, *map(str, files))
    line = next((x for x in proc.stdout.splitlines() if x.startswith("ORACLE")), None)
    assert line is not None, proc.stderr[-2000:]
    return json.loads(line[len("ORACLE"):])


def ld(report) -> dict[str, list]:  # noqa: ANN001
    return codes(report, "LD")


def test_deepspeed_step_loads_with_its_exact_globals(ds: Path) -> None:
    step = ds / "zero2" / "global_step2"
    assert set(run_oracle(sorted(step.glob("*.pt"))).values()) == {"ok"}
    r = probe_paths([step], load=True)[0]
    if r.load and r.load.get("status") == "sandbox-unavailable":
        pytest.skip(f"sandbox unavailable: {r.load}")
    assert r.load["status"] == "ok", r.load
    assert "LD001" in ld(r) and r.verdict is Verdict.INTACT
    f = next(f for f in r.findings if f.code == "LD001")
    assert f.details["rank_files"] == 3
    assert f.details["registered"] == sorted(
        __import__("ckptrescue.checkpoints.families.deepspeed", fromlist=["x"]).DeepSpeedFamily
        .allowed_globals)


def test_megatron_step_loads(tmp_path: Path) -> None:
    pytest.importorskip("megatron.core")
    meg = built("megatron")
    r = probe_paths([meg / "legacy" / "iter_0000002"], load=True)[0]
    assert r.load["status"] == "ok", r.load
    assert "LD001" in ld(r) and r.verdict is Verdict.INTACT


def _patch_pickle_byte(path: Path, old: bytes, new: bytes) -> None:
    """Replace ``old`` by ``new`` (same length) inside the zip's data.pkl and fix its CRC-32 in
    the local header and the central directory (a rank file that is a valid zip)."""
    import zipfile

    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("data.pkl"))
    nlen, xlen = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + nlen + xlen
    blob = bytes(data[start:start + info.compress_size])
    assert blob.count(old) == 1
    blob = blob.replace(old, new)
    data[start:start + len(blob)] = blob
    crc = struct.pack("<I", zlib.crc32(blob))
    data[info.header_offset + 14:info.header_offset + 18] = crc
    pos = data.find(b"PK\x01\x02")
    while pos >= 0:
        name_len = struct.unpack("<H", data[pos + 28:pos + 30])[0]
        if bytes(data[pos + 46:pos + 46 + name_len]).endswith(b"data.pkl"):
            data[pos + 16:pos + 20] = crc
            break
        pos = data.find(b"PK\x01\x02", pos + 4)
    assert pos >= 0
    path.write_bytes(bytes(data))


def test_rank_the_real_loader_refuses_is_named(ds: Path, tmp_path: Path) -> None:
    step = copy(ds / "zero2" / "global_step2", tmp_path / "global_step2")
    # ZeroStageEnum(2) -> ZeroStageEnum(7): a value the real enum (and its stand-in) refuses
    raw = (step / OPT0).read_bytes()
    i = raw.find(b"ZeroStageEnum")
    j = raw.find(b"K\x02\x85", i)  # BININT1 2, TUPLE1 (then REDUCE)
    assert 0 < j - i < 64
    _patch_pickle_byte(step / OPT0, raw[j - 4:j + 3], raw[j - 4:j] + b"K\x07\x85")
    assert "ZeroStageEnum" in run_oracle([step / OPT0])[str(step / OPT0)]
    r = probe_paths([step], load=True)[0]
    assert r.load["status"] == "error", r.load
    ld2 = [f for f in r.findings if f.code == "LD002"]
    assert [f.details["ranks"] for f in ld2] == [["zero_pp_rank_0_mp_rank_00"]]
    assert "ZeroStageEnum" in ld2[0].title
    assert "zero_pp_rank_0_mp_rank_00" in r.extra["family"]["bad_ranks"]
    assert r.extra["family"]["load_refused"] == ["zero_pp_rank_0_mp_rank_00"]
    assert r.verdict is not Verdict.INTACT


def test_library_missing_in_sandbox_skips_never_widens(ds: Path) -> None:
    from ckptrescue.checkpoints.families.deepspeed import DeepSpeedFamily
    from ckptrescue.checkpoints.probes.family_load import load_family_step

    class Unknown(DeepSpeedFamily):
        allowed_globals = DeepSpeedFamily.allowed_globals | {"nosuchlib_f3.mod.Thing"}

    r = probe_paths([ds / "zero2" / "global_step1"])[0]
    load_family_step(r, Unknown)
    assert r.load["status"] == "skipped", r.load
    assert "nosuchlib_f3 is not installed in the sandbox" in r.load["reason"]
    assert "LD004" in ld(r) and r.verdict is Verdict.INTACT and "LD001" not in ld(r)


def test_stand_ins_match_the_real_classes_without_importing_them() -> None:
    """Every family list entry resolves without importing its library; Enum stand-ins have the
    real members and values (the real library is imported in a child to compare)."""
    code = """
import gc, json, sys
gc.disable()  # a short-lived oracle: the libraries it imports are most of what it makes
from ckptrescue.checkpoints.families import families
from ckptrescue.sandbox_children.safe_globals import resolve
out = {}
for fam in families():
    pairs, missing = resolve(sorted(fam.allowed_globals))
    assert not missing, missing
    for obj, name in pairs:
        members = getattr(obj, "__members__", None)
        out[name] = {k: v.value for k, v in members.items()} if members else None
libs = sorted({m.split(".")[0] for m in sys.modules} & {"deepspeed", "megatron", "lightning",
                                                         "accelerate"})
print("RESULT" + json.dumps({"enums": out, "imported": libs}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parents[2])
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT"))
    data = json.loads(line[len("RESULT"):])
    assert data["imported"] == []
    import importlib

    for name, members in data["enums"].items():
        if members is None or name.split(".")[0] in ("torch", "numpy", "argparse"):
            continue
        module, _, cls = name.rpartition(".")
        try:
            real = getattr(importlib.import_module(module), cls)
        except ImportError:
            pytest.skip(f"{module} not installed")
        assert {k: v.value for k, v in real.__members__.items()} == members, name
