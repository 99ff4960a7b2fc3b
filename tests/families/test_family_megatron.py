"""Megatron-LM family: ``torch_dist`` iterations written by megatron-core 0.16.1's own
``dist_checkpointing.save`` (2 gloo ranks on CPU) and legacy ``mp_rank_TT_PPP`` iterations built
from Megatron-LM's documented per-rank dict (``fixtures/families/megatron.py``). Intact is
asserted where megatron-core's own readers load the same step (``load_plain_tensors`` +
``load_common_state_dict``; for the legacy layout ``torch.load(weights_only=True)`` with the safe
globals megatron-core registers); each failure is a mutation of a real step, by code and rank."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from f1_build import built, codes, copy, oracle

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.probes.checkpoints import probe_paths

# found, not imported: the tests run megatron-core only in child processes, and importing it
# here cost every pytest-xdist worker ~2 s of its collection
if importlib.util.find_spec("megatron.core") is None:
    pytest.skip("megatron-core is not installed (the fixtures extra)", allow_module_level=True)

DIST_ORACLE = """
import json, sys, tempfile, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
torch.cuda.current_device = lambda: "cpu"  # CPU-only torch (see fixtures/families/megatron.py)
from megatron.core import dist_checkpointing as dc
out = {}
for d in sys.argv[1:]:
    try:
        t = dc.load_plain_tensors(d)
        c = dc.load_common_state_dict(d)
        shapes = {k: list(v.shape) for k, v in t.items() if hasattr(v, "shape")}
        out[d] = {"tensors": shapes, "iteration": c["iteration"]}
    except BaseException as exc:
        out[d] = "error: " + type(exc).__name__
print("ORACLE" + json.dumps(out))
"""
LEGACY_ORACLE = """
import json, sys, torch
import megatron.core  # registers megatron's safe globals with torch.serialization
out = {}
for f in sys.argv[1:]:
    try:
        sd = torch.load(f, map_location="cpu", weights_only=True)
        out[f] = {"iteration": sd["iteration"], "tp": sd["args"].tensor_model_parallel_size,
                  "model": {k: list(v.shape) for k, v in sd["model"].items()}}
    except BaseException as exc:
        out[f] = "error: " + type(exc).__name__
print("ORACLE" + json.dumps(out))
"""


def run(code: str, *args: Path) -> dict[str, object]:
    proc = oracle(code, *map(str, args))
    line = next((x for x in proc.stdout.splitlines() if x.startswith("ORACLE")), None)
    assert line is not None, proc.stderr[-2000:]
    return json.loads(line[len("ORACLE"):])


@pytest.fixture(scope="module")
def mg() -> Path:
    return built("megatron")


def one(path: Path):  # noqa: ANN201
    reports = probe_paths([path])
    assert len(reports) == 1
    return reports[0]


def test_torch_dist_intact_where_megatron_core_loads_it(mg: Path) -> None:
    steps = sorted((mg / "dist").glob("iter_*"))
    loaded = run(DIST_ORACLE, *steps)
    for step in steps:
        got = loaded[str(step)]
        assert isinstance(got, dict), got
        assert got["tensors"]["decoder.layers.0.self_attention.linear_qkv.weight"] == [24, 8]
        r = one(step)
        assert r.format == "megatron-dist" and r.verdict is Verdict.INTACT, r.findings
        assert r.extra["family"]["steps_recorded"] == [got["iteration"]]


def test_legacy_intact_where_megatron_loads_every_rank(mg: Path) -> None:
    files = sorted((mg / "legacy").glob("iter_*/mp_rank_*/model_optim_rng.pt"))
    assert len(files) == 8
    loaded = run(LEGACY_ORACLE, *files)
    assert all(isinstance(v, dict) and v["tp"] == 2 for v in loaded.values()), loaded
    reports = probe_paths([mg / "legacy"])
    assert [r.format for r in reports] == ["megatron", "megatron"]
    for r in reports:
        assert r.verdict is Verdict.INTACT, [(f.code, f.title) for f in r.findings]
        assert r.extra["family"]["world"] == {"tp": 2, "pp": 2}


def test_missing_mp_rank(mg: Path, tmp_path: Path) -> None:
    step = copy(mg / "legacy" / "iter_0000002", tmp_path / "iter_0000002")
    (step / "mp_rank_01_001" / "model_optim_rng.pt").unlink()
    (step / "mp_rank_01_001").rmdir()
    r = one(step)
    assert r.verdict is Verdict.INCOMPLETE
    assert codes(r)["FM001"] == [["mp_rank_01_001"]]
    assert codes(r)["FM040"] == [["mp_rank_01_001"]]


def test_rank_from_another_iteration(mg: Path, tmp_path: Path) -> None:
    step = copy(mg / "legacy" / "iter_0000002", tmp_path / "iter_0000002")
    copy(mg / "legacy" / "iter_0000001" / "mp_rank_00_001" / "model_optim_rng.pt",
         tmp_path / "old.pt").replace(step / "mp_rank_00_001" / "model_optim_rng.pt")
    r = one(step)
    assert r.verdict is Verdict.DAMAGED
    assert codes(r)["FM002"] == [["mp_rank_00_001"]]


def test_tp_shard_with_a_wrong_shape(mg: Path, tmp_path: Path) -> None:
    import torch

    step = copy(mg / "legacy" / "iter_0000002", tmp_path / "iter_0000002")
    victim = step / "mp_rank_01_000" / "model_optim_rng.pt"
    sd = torch.load(victim, weights_only=False)
    w = sd["model"]["decoder.layers.0.self_attention.linear_qkv.weight"]
    sd["model"]["decoder.layers.0.self_attention.linear_qkv.weight"] = w[:10].clone()
    torch.save(sd, victim)
    r = one(step)
    assert r.verdict is Verdict.DAMAGED
    assert codes(r)["FM005"] == [["mp_rank_01_000"]]
    f = next(f for f in r.findings if f.code == "FM005")
    assert "mp_rank_01_000/decoder.layers.0.self_attention.linear_qkv.weight" in f.tensors


def test_replicated_norm_differs(mg: Path, tmp_path: Path) -> None:
    import torch

    step = copy(mg / "legacy" / "iter_0000001", tmp_path / "iter_0000001")
    victim = step / "mp_rank_01_001" / "model_optim_rng.pt"
    sd = torch.load(victim, weights_only=False)
    sd["model"]["decoder.final_layernorm.weight"] = sd["model"][
        "decoder.final_layernorm.weight"] * 2
    torch.save(sd, victim)
    r = one(step)
    # two TP ranks: no majority says which copy is right, both are named
    assert codes(r)["FM006"] == [["mp_rank_00_001"], ["mp_rank_01_001"]]
    assert r.verdict is Verdict.DAMAGED


def test_torn_torch_dist_data_file(mg: Path, tmp_path: Path) -> None:
    step = copy(mg / "dist" / "iter_0000002", tmp_path / "iter_0000002")
    victim = step / "__1_0.distcp"
    with open(victim, "r+b") as fh:
        fh.truncate(victim.stat().st_size // 2)
    r = one(step)
    assert r.verdict is not Verdict.INTACT
    assert codes(r)["FM007"] == [["dcp"]]
    assert not isinstance(run(DIST_ORACLE, step)[str(step)], dict)  # megatron-core fails too


def test_torch_dist_missing_common(mg: Path, tmp_path: Path) -> None:
    step = copy(mg / "dist" / "iter_0000001", tmp_path / "iter_0000001")
    (step / "common.pt").unlink()
    r = one(step)
    assert r.verdict is Verdict.INCOMPLETE
    assert codes(r)["FM042"] == [["common"]]


STRICT_STAGE0 = """
import json, sys, torch
import megatron.core  # registers megatron's safe globals with torch.serialization
reference, candidate = sys.argv[1:3]
ref = torch.load(reference, map_location="cpu", weights_only=True)["model"]
module = torch.nn.Module()
for i, (name, value) in enumerate(ref.items()):  # stage 0's parameters, as the model builds them
    module.register_parameter(f"p{i}", torch.nn.Parameter(torch.empty_like(value)))
names = {f"p{i}": name for i, name in enumerate(ref)}
sd = torch.load(candidate, map_location="cpu", weights_only=True)["model"]
try:
    module.load_state_dict({k: sd[v] for k, v in names.items()}, strict=True)
    print("ORACLE" + json.dumps("ok"))
except BaseException as exc:
    print("ORACLE" + json.dumps("error: " + type(exc).__name__))
"""


def test_legacy_pipeline_stages_swapped_by_name(mg: Path, tmp_path: Path) -> None:
    """mp_rank_00_000 <-> mp_rank_00_001: torch.load reads both, a strict load of stage 0 fails;
    the probe names both files and the stage each really holds (FM048)."""
    run_dir = copy(mg / "legacy", tmp_path / "legacy")
    step = run_dir / "iter_0000002"
    a = step / "mp_rank_00_000" / "model_optim_rng.pt"
    b = step / "mp_rank_00_001" / "model_optim_rng.pt"
    tmp = step / "swap.pt"
    a.replace(tmp)
    b.replace(a)
    tmp.replace(b)
    loaded = run(LEGACY_ORACLE, a, b)
    assert all(isinstance(v, dict) for v in loaded.values())  # the loader itself says nothing
    reference = mg / "legacy" / "iter_0000001" / "mp_rank_00_000" / "model_optim_rng.pt"
    assert json.loads(oracle(STRICT_STAGE0, str(reference), str(reference)).stdout.split(
        "ORACLE")[1]) == "ok"
    assert json.loads(oracle(STRICT_STAGE0, str(reference), str(a)).stdout.split(
        "ORACLE")[1]).startswith("error")
    r = probe_paths([step])[0]
    assert r.verdict is Verdict.DAMAGED
    assert sorted(codes(r)["FM048"]) == [["mp_rank_00_000"], ["mp_rank_00_001"]]
    holds = {f.details["stage"]: f.details["holds_stage"] for f in r.findings
             if f.code == "FM048"}
    assert holds == {0: 1, 1: 0}
    from ckptrescue.checkpoints.rank import rank

    assert rank(run_dir).resume_from == str(run_dir / "iter_0000001")
    # the intact steps raise no FM048
    assert all("FM048" not in codes(x) for x in probe_paths([mg / "legacy"]))
