"""``resume world-size``: whether a verified step loads at N ranks, and how, on steps the real
libraries wrote. Oracles: DeepSpeed's own ``ds_to_universal`` run with exactly the files the kit
names (and failing without one of them), then a DeepSpeed engine at ONE rank loading the
universal checkpoint a 2-rank ZeRO-2 run saved; ``torch.distributed.checkpoint.load`` reading a
4-rank FSDP2 save in a single process."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_helpers import invoke
from f1_build import built, oracle
from f2_build import built as built2

from ckptrescue.checkpoints.world_size import plan_world_size
from ckptrescue.record.case import Case

LOAD_UNIVERSAL = """
import json, os, sys, warnings
warnings.simplefilter("ignore")
os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": sys.argv[3]})
import gc
gc.disable()  # what the imports make lives to the end: no collection walks it
import deepspeed, torch
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint as full
from fixtures.families.deepspeed import make_model, config, init_gloo
gc.freeze()
gc.enable()
init_gloo()  # deepspeed.init_distributed(dist_backend="gloo"), no JIT-compiled kernel
cfg = config(2, False)
cfg.update({"train_batch_size": 1, "checkpoint": {"load_universal": True}})
model = make_model()
with torch.no_grad():
    for p in model.parameters():
        p.zero_()
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
path, _ = engine.load_checkpoint(sys.argv[1], tag=sys.argv[2])
want = full(sys.argv[4], tag=sys.argv[5])
got = {k: v.float() for k, v in engine.module.state_dict().items()}
print("ORACLE" + json.dumps({"loaded": path is not None,
                              "equal": all(torch.equal(got[k], want[k].float()) for k in want),
                              "world": torch.distributed.get_world_size()}))
"""
# ``python -m deepspeed.checkpoint.ds_to_universal ARGS`` (its worker pool pickles the module's
# functions by name, so it runs as the module, not as __main__)
DS_TO_UNIVERSAL = ("import sys; from deepspeed.checkpoint import ds_to_universal as m; "
                   "sys.argv = ['ds_to_universal', *sys.argv[1:]]; m.main(m.parse_arguments())")
DCP_LOAD = """
import json, sys, torch
import torch.distributed.checkpoint as dcp
from fixtures.families.dcp import make_model
model = make_model()
sd = {"model": {k: torch.zeros_like(v) for k, v in model.state_dict().items()}}
dcp.load(sd, checkpoint_id=sys.argv[1])
print("ORACLE" + json.dumps({k: torch.equal(v, model.state_dict()[k])
                              for k, v in sd["model"].items()}))
"""


def run(code: str, *args: str) -> object:
    proc = oracle(code, *args)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("ORACLE")), None)
    assert line is not None, proc.stderr[-3000:]
    return json.loads(line[len("ORACLE"):])


def test_deepspeed_needs_ds_to_universal_with_exactly_these_files(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    src = built("deepspeed") / "zero2" / "global_step3"
    same = plan_world_size(str(src), 2)
    assert same.loads == "as-saved" and {f.code for f in same.findings()} == {"WS001"}
    result = plan_world_size(str(src), 1)
    assert result.loads == "after-conversion"
    assert result.config == {"checkpoint": {"load_universal": True}}
    assert {f.code for f in result.findings()} == {"WS002"}
    (command,) = result.commands
    assert command.startswith("python -m deepspeed.checkpoint.ds_to_universal --input_folder ")
    assert command.endswith("--inject_missing_state")
    # the files named, and nothing else, into a fresh step folder
    step = tmp_path / "named" / src.name
    step.mkdir(parents=True)
    for f in result.files_needed:
        shutil.copy2(f, step / Path(f).name)
    dest = tmp_path / "dest"
    argv = command.replace(str(src), str(step)).replace("DEST", str(dest)).split()
    assert argv[:3] == ["python", "-m", "deepspeed.checkpoint.ds_to_universal"]
    conv = oracle(DS_TO_UNIVERSAL, *argv[3:])
    assert conv.returncode == 0, conv.stderr[-2000:]
    universal = dest / f"{src.name}_universal"
    assert (universal / "zero").is_dir()
    # without one of the named files the conversion fails
    lacking = tmp_path / "lacking" / src.name
    shutil.copytree(step, lacking)
    (lacking / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    bad = oracle(DS_TO_UNIVERSAL, "--input_folder", str(lacking), "--output_folder",
                 str(tmp_path / "dest2" / "u"), "--inject_missing_state")
    assert bad.returncode != 0
    # and DeepSpeed at ONE rank loads what the 2-rank run saved, equal to the consolidation
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    got = run(LOAD_UNIVERSAL, str(dest), universal.name, port, str(src.parent), src.name)
    assert got == {"loaded": True, "equal": True, "world": 1}


def test_dcp_reshards_where_dcp_load_agrees() -> None:
    step = built2("dcp") / "sharded" / "step-3"
    result = plan_world_size(str(step), 1)
    assert result.family == "fsdp-dcp" and result.loads == "reshards"
    assert result.commands == []
    loaded = run(DCP_LOAD, str(step))
    assert loaded and all(loaded.values()), loaded  # 4 ranks' shards read by one process


def test_megatron_legacy_needs_matching_tp_pp() -> None:
    pytest.importorskip("megatron.core")
    step = next(iter(sorted(built("megatron").glob("legacy/iter_*"))))
    ok = plan_world_size(str(step), 8)
    assert ok.saved_world == {"tp": 2, "pp": 2} and ok.loads == "as-saved"
    assert "data-parallel size 2" in ok.how
    no = plan_world_size(str(step), 6)
    assert no.loads == "after-conversion"
    assert "--target-tensor-parallel-size" in no.commands[0]
    dist = next(iter(sorted(built("megatron").glob("dist/iter_*"))))
    assert plan_world_size(str(dist), 6).loads == "reshards"


def test_unverified_step_cli_case_report(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    step = tmp_path / "global_step3"
    shutil.copytree(built("deepspeed") / "zero2" / "global_step3", step)
    (step / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    case_dir = tmp_path / "case"
    Case.create(case_dir, title="world size")
    res = invoke("resume", "world-size", str(step), "--ranks", "4", "--case", str(case_dir),
                 "--json")
    assert res.returncode == 1, res.stderr
    data = json.loads(res.stdout)
    assert data["loads"] == "not-verified" and data["verdict"] == "incomplete"
    human = invoke("resume", "world-size", str(built("deepspeed") / "zero2" / "global_step3"),
                   "--ranks", "4", "--case", str(case_dir))
    assert "ds_to_universal" in human.stdout and human.returncode == 1
    md = invoke("report", str(case_dir), "--format", "md", "-o", str(tmp_path / "r.md"))
    assert md.returncode == 0, md.stderr
    assert "## Another world size" in (tmp_path / "r.md").read_text()
    missing = invoke("resume", "world-size", str(tmp_path / "nope"), "--ranks", "2")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    assert os.listdir(step)  # the evidence is still there


def test_world_size_step_in_the_playbook(tmp_path: Path) -> None:
    step = built2("dcp") / "sharded" / "step-2"
    res = invoke("playbook", "run", "resume-checks", "--case", str(tmp_path / "case"), "--yes",
                 "--json", "-p", f"run_dir={step}", "-p", "ranks=3")
    assert res.returncode in (0, 1), res.stderr
    answer = json.loads(res.stdout)["answer"]
    assert "step-2 loads at 3 ranks (reshards)" in answer
    assert "safe globals" not in answer, "DCP shards are not torch.load files"
    steps = {r["details"]["step"]: r["details"]["status"]
             for r in Case.open(tmp_path / "case").records("step.finished")}
    assert steps["world-size"] == "ok"
