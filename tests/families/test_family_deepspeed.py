"""DeepSpeed family on checkpoints DeepSpeed's own engine wrote on CPU (ZeRO 1, 2, 3 and the bf16
optimizer, 2 gloo ranks; ``fixtures/families/deepspeed.py``). Intact is asserted where DeepSpeed's
own consolidation (``zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint``) loads the same step;
each failure is a mutation of a real step, asserted by code and the named rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from f1_build import built, codes, copy, oracle

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.probes.checkpoints import probe_paths

pytest.importorskip("deepspeed")

RUNS = ("zero1", "zero2", "zero3", "zero1_bf16")
ORACLE = """
import json, sys
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint as get
out = {}
for run, tag in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        sd = get(run, tag=tag)
        out[run + "/" + tag] = {k: list(v.shape) for k, v in sd.items()}
    except BaseException as exc:
        out[run + "/" + tag] = "error: " + type(exc).__name__
print("ORACLE" + json.dumps(out))
"""
SHAPES = {"0.weight": [16, 8], "0.bias": [16], "2.weight": [4, 16], "2.bias": [4]}


def run_oracle(*steps: Path) -> dict[str, object]:
    args = [a for s in steps for a in (str(s.parent), s.name)]
    proc = oracle(ORACLE, *args)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("ORACLE")), None)
    assert line is not None, proc.stderr[-2000:]
    return json.loads(line[len("ORACLE"):])


@pytest.fixture(scope="module")
def ds() -> Path:
    return built("deepspeed")


def one(path: Path):  # noqa: ANN201
    reports = probe_paths([path])
    assert len(reports) == 1
    return reports[0]


def test_intact_where_deepspeed_consolidates_the_same_step(ds: Path) -> None:
    steps = [ds / run / f"global_step{n}" for run in RUNS for n in (1, 3)]
    loaded = run_oracle(*steps)
    for step in steps:
        assert loaded[f"{step.parent}/{step.name}"] == SHAPES, step
    for run in RUNS:
        reports = probe_paths([ds / run])
        assert [r.format for r in reports] == ["deepspeed"] * 3
        for r in reports:
            assert r.verdict is Verdict.INTACT, (r.path, [f.title for f in r.findings])
            assert r.extra["family"]["bad_ranks"] == []
            assert r.extra["family"]["world"]["dp"] == 2
        # the step each rank's own metadata records
        assert [r.extra["family"]["steps_recorded"] for r in reports] == [[1], [2], [3]]
    z3 = one(ds / "zero3" / "global_step3")
    assert z3.extra["family"]["world"] == {"dp": 2, "mp": 1, "zero_stage": 3}
    assert z3.extra["family"]["expected"] == 4  # 2 model + 2 optim rank files (ZeRO 3)


def test_missing_optimizer_rank(ds: Path, tmp_path: Path) -> None:
    step = copy(ds / "zero2" / "global_step3", tmp_path / "global_step3")
    (step / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    r = one(step)
    assert r.verdict is Verdict.INCOMPLETE
    assert codes(r)["FM001"] == [["zero_pp_rank_1_mp_rank_00"]]
    assert r.extra["family"]["ranks"]["zero_pp_rank_1_mp_rank_00"] == "missing"
    assert str(run_oracle(step)[f"{tmp_path}/global_step3"]).startswith("error")


def test_missing_zero3_model_rank(ds: Path, tmp_path: Path) -> None:
    step = copy(ds / "zero3" / "global_step2", tmp_path / "global_step2")
    (step / "zero_pp_rank_0_mp_rank_00_model_states.pt").unlink()
    r = one(step)
    assert r.verdict is Verdict.INCOMPLETE
    assert codes(r)["FM001"] == [["zero_pp_rank_0_mp_rank_00"]]


def test_rank_from_another_step(ds: Path, tmp_path: Path) -> None:
    step = copy(ds / "zero2" / "global_step3", tmp_path / "global_step3")
    copy(ds / "zero2" / "global_step1" / "zero_pp_rank_0_mp_rank_00_optim_states.pt",
         step / "zero_pp_rank_0_mp_rank_00_optim_states.pt.tmp")
    (step / "zero_pp_rank_0_mp_rank_00_optim_states.pt.tmp").replace(
        step / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    r = one(step)
    assert r.verdict is Verdict.DAMAGED
    assert codes(r)["FM002"] == [["zero_pp_rank_0_mp_rank_00"]]
    f = next(f for f in r.findings if f.code == "FM002")
    assert f.details["recorded"] == [1] and f.details["expected"] == 3

    step2 = copy(ds / "zero1" / "global_step3", tmp_path / "z1" / "global_step3")
    (step2 / "mp_rank_00_model_states.pt").unlink()
    copy(ds / "zero1" / "global_step2" / "mp_rank_00_model_states.pt",
         step2 / "mp_rank_00_model_states.pt")
    r2 = one(step2)
    assert ["mp_rank_00"] in codes(r2)["FM002"]
    assert r2.verdict is Verdict.DAMAGED


def test_rank_from_another_run(ds: Path, tmp_path: Path) -> None:
    step = copy(ds / "zero1" / "global_step3", tmp_path / "global_step3")
    (step / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    copy(ds / "zero2" / "global_step3" / "zero_pp_rank_1_mp_rank_00_optim_states.pt",
         step / "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    r = one(step)
    assert ["zero_pp_rank_1_mp_rank_00"] in codes(r)["FM003"]  # another ds_config
    assert ["zero_pp_rank_1_mp_rank_00"] in codes(r)["FM032"]  # zero_stage 2 in a stage-1 step
    assert r.verdict is Verdict.DAMAGED


def test_torn_rank_file(ds: Path, tmp_path: Path) -> None:
    step = copy(ds / "zero3" / "global_step3", tmp_path / "global_step3")
    victim = step / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    with open(victim, "r+b") as fh:
        fh.truncate(victim.stat().st_size // 2)
    r = one(step)
    assert r.verdict is Verdict.TRUNCATED
    assert codes(r)["FM007"] == [["zero_pp_rank_1_mp_rank_00"]]
    assert r.extra["family"]["bad_ranks"] == ["zero_pp_rank_1_mp_rank_00"]
    assert str(run_oracle(step)[f"{tmp_path}/global_step3"]).startswith("error")


def test_off_list_global_is_still_unsafe(ds: Path, tmp_path: Path) -> None:
    step = copy(ds / "zero2" / "global_step2", tmp_path / "global_step2")
    victim = step / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    data = victim.read_bytes()
    assert data.count(b"LossScaler") == 1
    victim.write_bytes(data.replace(b"LossScaler", b"LossScalar"))  # same length, off the list
    r = one(step)
    assert r.verdict is Verdict.UNSAFE
    pk = [f for f in r.findings if f.code == "PK001"]
    assert pk and "deepspeed.runtime.fp16.loss_scaler.LossScalar" in pk[0].details["globals"]


def test_jobs_and_progress(ds: Path) -> None:
    seen: list[tuple[str, str, str]] = []
    serial = probe_paths([ds / "zero3"])
    parallel = probe_paths([ds / "zero3"], jobs=2, progress=lambda *a: seen.append(a))
    assert [(r.path, r.verdict, r.extra["family"]) for r in serial] == \
        [(r.path, r.verdict, r.extra["family"]) for r in parallel]
    assert len(seen) == 12 and {v for _s, _r, v in seen} == {"intact"}
    assert sorted({t.name for t in serial[0].tensors}) == sorted(
        {t.name for t in parallel[0].tensors})
