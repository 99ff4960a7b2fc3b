"""Which rank a DeepSpeed file belongs to, and how many there must be, judged as DeepSpeed's own
consolidation (``zero_to_fp32``) judges the same step written by DeepSpeed's engine
(``fixtures/families/deepspeed.py``):

* optimizer files swapped by name consolidate WITHOUT an error into other weights: the probe
  reads each partition's own fragment mapping and fp32 master weights and names the swap (FM034);
* without ``mp_rank_00_model_states.pt`` zero_to_fp32 refuses the step: it is incomplete (FM030,
  FM001) and never the one to resume from;
* an optimizer file beyond the world size (``zero_pp_rank_7_...`` with dp = 2; ZeRO-3; bf16)
  makes zero_to_fp32 refuse the step (it counts the files): FM033, damaged; a model-states file
  beyond it is read by neither loader (zero_to_fp32 consolidates): a warning only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from f1_build import built, codes, copy, oracle

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.probes.checkpoints import probe_paths
from ckptrescue.checkpoints.rank import rank

pytest.importorskip("deepspeed")

# zero_to_fp32's consolidation of each step, compared with the model states' own weights
ORACLE = """
import glob, json, sys, torch
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint as get
out = {}
for run, tag in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        sd = get(run, tag=tag)
    except BaseException as exc:
        out[tag] = "error: " + type(exc).__name__
        continue
    model = glob.glob(f"{run}/{tag}/mp_rank_*_model_states.pt")
    if not model:  # ZeRO-3: the model states hold no weights to compare with
        out[tag] = "consolidated"
        continue
    module = torch.load(model[0], map_location="cpu", weights_only=False)["module"]
    out[tag] = "same" if all(torch.equal(sd[k].float(), module[k].float()) for k in module) \\
        else "other weights"
print("ORACLE" + json.dumps(out))
"""


def consolidate(step: Path) -> str:
    proc = oracle(ORACLE, str(step.parent), step.name)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("ORACLE")), None)
    assert line is not None, proc.stderr[-2000:]
    return json.loads(line[len("ORACLE"):])[step.name]


@pytest.fixture(scope="module")
def ds() -> Path:
    return built("deepspeed")


def one(path: Path):  # noqa: ANN201
    (report,) = probe_paths([path])
    return report


def swap(a: Path, b: Path) -> None:
    tmp = a.with_name(a.name + ".swap")
    a.replace(tmp)
    b.replace(a)
    tmp.replace(b)


@pytest.mark.parametrize(("run", "prefix"), [("zero1", ""), ("zero2", ""),
                                             ("zero1_bf16", "bf16_")])
def test_optimizer_files_swapped_by_name(ds: Path, tmp_path: Path, run: str, prefix: str) -> None:
    run_dir = copy(ds / run, tmp_path / run)
    step = run_dir / "global_step3"
    assert consolidate(step) == "same"
    swap(step / f"{prefix}zero_pp_rank_0_mp_rank_00_optim_states.pt",
         step / f"{prefix}zero_pp_rank_1_mp_rank_00_optim_states.pt")
    # DeepSpeed consolidates the swapped step without a word, into other weights
    assert consolidate(step) == "other weights"
    r = one(step)
    assert r.verdict is Verdict.DAMAGED
    assert sorted(codes(r)["FM034"]) == [["zero_pp_rank_0_mp_rank_00"],
                                         ["zero_pp_rank_1_mp_rank_00"]]
    found = {f.details["claimed_rank"]: f for f in r.findings if f.code == "FM034"}
    assert found[0].details["holds_rank"] == 1 and found[1].details["holds_rank"] == 0
    for f in found.values():  # both the mapping and the master weights say so
        assert any("fragment mapping" in x for x in f.details["reasons"]), f.details
        assert any("master weights" in x for x in f.details["reasons"]), f.details
    assert rank(run_dir).resume_from == str(run_dir / "global_step2")


def test_zero3_swap_is_not_claimed_detectable(ds: Path, tmp_path: Path) -> None:
    """ZeRO-3 partitions carry nothing rank-specific: the probe makes no FM034 claim either way
    on the intact step (no false alarm from the partition check)."""
    r = one(ds / "zero3" / "global_step3")
    assert r.verdict is Verdict.INTACT and "FM034" not in codes(r)


@pytest.mark.parametrize("run", ["zero1", "zero2", "zero1_bf16"])
def test_step_without_its_only_model_states_file(ds: Path, tmp_path: Path, run: str) -> None:
    run_dir = copy(ds / run, tmp_path / run)
    step = run_dir / "global_step3"
    (step / "mp_rank_00_model_states.pt").unlink()
    assert consolidate(step).startswith("error: FileNotFoundError")
    r = one(step)
    assert r.verdict is Verdict.INCOMPLETE
    assert codes(r)["FM030"] == [["mp_rank_00"]]
    assert codes(r)["FM001"] == [["mp_rank_00"]]
    assert r.extra["family"]["ranks"]["mp_rank_00"] == "missing"
    assert r.extra["family"]["world"] == {"dp": 2, "mp": 1,
                                          "zero_stage": 1 if run != "zero2" else 2}
    assert rank(run_dir).resume_from == str(run_dir / "global_step2")


@pytest.mark.parametrize(("run", "prefix"), [("zero2", ""), ("zero3", ""),
                                             ("zero1_bf16", "bf16_")])
def test_optimizer_file_beyond_the_world_size(ds: Path, tmp_path: Path, run: str,
                                              prefix: str) -> None:
    run_dir = copy(ds / run, tmp_path / run)
    step = run_dir / "global_step3"
    shutil.copy2(step / f"{prefix}zero_pp_rank_1_mp_rank_00_optim_states.pt",
                 step / f"{prefix}zero_pp_rank_7_mp_rank_00_optim_states.pt")
    assert consolidate(step) == "error: ValueError"  # "Expected 2 ... but found 3 files"
    r = one(step)
    assert r.verdict is Verdict.DAMAGED
    assert codes(r)["FM033"] == [["zero_pp_rank_7_mp_rank_00"]]
    assert "zero_pp_rank_7_mp_rank_00" in r.extra["family"]["bad_ranks"]
    assert rank(run_dir).resume_from == str(run_dir / "global_step2")


def test_second_set_of_optimizer_files_in_a_bf16_step(ds: Path, tmp_path: Path) -> None:
    """A bf16 step holding also un-prefixed optimizer files (from another run's config)."""
    step = copy(ds / "zero1_bf16" / "global_step3", tmp_path / "global_step3")
    for r in (0, 1):
        shutil.copy2(ds / "zero1" / "global_step3" / f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt",
                     step / f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt")
    assert consolidate(step).startswith("error")
    r = one(step)
    assert r.verdict is Verdict.DAMAGED
    extra = next(f for f in r.findings if f.code == "FM033")
    assert sorted(extra.details["extra"]) == ["zero_pp_rank_0_mp_rank_00_optim_states.pt",
                                              "zero_pp_rank_1_mp_rank_00_optim_states.pt"]


def test_model_states_file_beyond_the_world_size_is_a_warning(ds: Path, tmp_path: Path) -> None:
    step = copy(ds / "zero3" / "global_step3", tmp_path / "global_step3")
    shutil.copy2(step / "zero_pp_rank_1_mp_rank_00_model_states.pt",
                 step / "zero_pp_rank_5_mp_rank_00_model_states.pt")
    assert consolidate(step) == "consolidated"
    r = one(step)
    assert r.verdict is Verdict.INTACT
    assert codes(r)["FM010"] == [["zero_pp_rank_5_mp_rank_00"]]
