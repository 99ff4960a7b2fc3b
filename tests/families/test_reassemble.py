"""``resume reassemble``: steps DeepSpeed and Megatron really wrote, with rank files scattered the
way a crashed save scatters them (the file only in the trainer's staging directory, a stale copy
of another step beside it, a damaged copy, a FIFO, a symlink). The oracle for DeepSpeed is its
own consolidation (``zero_to_fp32``): it refuses the step as found, and loads the directory the
printed plan builds. The evidence is hashed before and after: nothing is moved."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_helpers import invoke
from f1_build import built, oracle

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.probes.checkpoints import probe_paths
from ckptrescue.checkpoints.reassemble import reassemble
from ckptrescue.record.case import Case

OPTIM1 = "zero_pp_rank_1_mp_rank_00_optim_states.pt"
ZERO_TO_FP32 = """
import json, sys
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint as get
try:
    sd = get(sys.argv[1], tag=sys.argv[2])
    print("ORACLE" + json.dumps({k: list(v.shape) for k, v in sd.items()}))
except BaseException as exc:
    print("ORACLE" + json.dumps("error: " + type(exc).__name__))
"""
SHAPES = {"0.weight": [16, 8], "0.bias": [16], "2.weight": [4, 16], "2.bias": [4]}


def consolidate(step: Path) -> object:
    proc = oracle(ZERO_TO_FP32, str(step.parent), step.name)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("ORACLE")), None)
    assert line is not None, proc.stderr[-2000:]
    return json.loads(line[len("ORACLE"):])


def digest(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p)] = "-> " + os.readlink(p)
        elif p.is_file():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def scattered(tmp_path: Path) -> Path:
    """A Hugging Face Trainer-style run whose DeepSpeed save of step 3 crashed: rank 1's
    optimizer partition made it only into tmp-checkpoint-3; old-checkpoint-3 holds rank 1's
    partition of step 2 (a stale copy), bak-checkpoint-3 a truncated one."""
    pytest.importorskip("deepspeed")
    ds = built("deepspeed") / "zero2"
    run = tmp_path / "run"
    shutil.copytree(ds / "global_step3", run / "checkpoint-3" / "global_step3")
    staged = run / "tmp-checkpoint-3" / "global_step3"
    staged.mkdir(parents=True)
    (run / "checkpoint-3" / "global_step3" / OPTIM1).rename(staged / OPTIM1)
    stale = run / "old-checkpoint-3" / "global_step3"
    stale.mkdir(parents=True)
    shutil.copy2(ds / "global_step2" / OPTIM1, stale / OPTIM1)
    cut = run / "bak-checkpoint-3" / "global_step3"
    cut.mkdir(parents=True)
    data = (staged / OPTIM1).read_bytes()
    (cut / OPTIM1).write_bytes(data[: len(data) // 2])
    return run


def test_deepspeed_step_reassembled_where_zero_to_fp32_agrees(scattered: Path,
                                                               tmp_path: Path) -> None:
    step = scattered / "checkpoint-3" / "global_step3"
    before = digest(scattered)
    assert str(consolidate(step)).startswith("error")
    plan = tmp_path / "case-out" / "reassemble.json"
    result = reassemble(step, plan=plan)
    assert result.reassemblable, result.answer()
    row = next(r for r in result.ranks if r.rank == "zero_pp_rank_1_mp_rank_00")
    assert row.status == "replaced"
    assert row.source == str(scattered / "tmp-checkpoint-3" / "global_step3" / OPTIM1)
    outcomes = {Path(t.path).parts[-3]: t.outcome for t in row.tried}
    assert outcomes["bak-checkpoint-3"].startswith("truncated")
    assert "records optimizer step 2" in outcomes["old-checkpoint-3"]
    assert {f.code for f in result.findings()} >= {"RA001", "RA003"}
    assert digest(scattered) == before, "nothing in the evidence moved"
    # the operator runs the plan: a new directory DeepSpeed consolidates
    done = subprocess.run(["bash", str(result.plan_script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    built_step = Path(result.dest)
    assert consolidate(built_step) == SHAPES
    assert digest(scattered) == before
    again = subprocess.run(["bash", str(result.plan_script)], capture_output=True, text=True,
                           timeout=120)
    assert again.returncode != 0 and "refusing" in again.stderr


def test_megatron_iteration_missing_a_tensor_parallel_rank(tmp_path: Path) -> None:
    pytest.importorskip("megatron.core")
    src = next(iter(sorted(built("megatron").glob("legacy/iter_*"))))
    run = tmp_path / "run"
    shutil.copytree(src, run / src.name)
    ranks = sorted(p.name for p in (run / src.name).iterdir() if p.name.startswith("mp_rank"))
    gone = ranks[-1]
    partial = run / f"{src.name}_partial" / gone
    partial.mkdir(parents=True)
    (run / src.name / gone / "model_optim_rng.pt").rename(partial / "model_optim_rng.pt")
    (run / src.name / gone).rmdir()
    result = reassemble(run / src.name, plan=tmp_path / "plan.json")
    assert result.reassemblable, result.answer()
    assert [r.rank for r in result.ranks if r.status == "replaced"] == [gone]
    subprocess.run(["bash", str(result.plan_script)], check=True, capture_output=True,
                   timeout=120)
    reports = probe_paths([Path(result.dest)], numeric=False)
    assert [r.verdict for r in reports] == [Verdict.INTACT]


def test_not_reassemblable_and_hostile_candidates(scattered: Path, tmp_path: Path) -> None:
    step = scattered / "checkpoint-3" / "global_step3"
    staged = scattered / "tmp-checkpoint-3" / "global_step3" / OPTIM1
    staged.unlink()
    os.mkfifo(staged)  # a FIFO where the copy was: never opened
    link = scattered / "link-checkpoint-3" / "global_step3"
    link.mkdir(parents=True)
    os.symlink(scattered / "old-checkpoint-3" / "global_step3" / OPTIM1, link / OPTIM1)
    case_dir = tmp_path / "case"
    Case.create(case_dir, title="reassemble")
    res = invoke("resume", "reassemble", str(step), "--plan", str(tmp_path / "p.json"),
                 "--case", str(case_dir), "--json")
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    data = json.loads(res.stdout)
    assert data["reassemblable"] is False and data["plan_file"] is None
    assert not (tmp_path / "p.json").exists()
    row = next(r for r in data["ranks"] if r["rank"] == "zero_pp_rank_1_mp_rank_00")
    why = {Path(t["path"]).parts[-3]: t["outcome"] for t in row["tried"]}
    assert why["tmp-checkpoint-3"] == "not a regular file (never opened)"
    assert why["link-checkpoint-3"] == "a symlink (not followed)"
    assert "RA002" in {f.code for f in Case.open(case_dir).findings()}
    md = invoke("report", str(case_dir), "--format", "md", "-o", str(tmp_path / "r.md"))
    assert md.returncode == 0, md.stderr
    assert "## Scattered and half-written ranks" in (tmp_path / "r.md").read_text()
    not_a_step = invoke("resume", "reassemble", str(tmp_path))
    assert not_a_step.returncode == 2 and "not a step directory" in not_a_step.stderr


def test_plan_in_the_playbook(scattered: Path, tmp_path: Path) -> None:
    step = scattered / "checkpoint-3" / "global_step3"
    res = invoke("playbook", "run", "resume-checks", "--case", str(tmp_path / "case"), "--yes",
                 "--json", "-p", f"run_dir={step}", "-p", f"step_dir={step}", "-p",
                 f"reassembly_plan={tmp_path / 'plan.json'}")
    assert res.returncode in (0, 1), res.stderr
    assert "global_step3 can be reassembled" in json.loads(res.stdout)["answer"]
    assert (tmp_path / "plan.sh").is_file()


def test_a_destination_under_a_file_is_refused_when_planned(scattered: Path,
                                                            tmp_path: Path) -> None:
    """--dest under a regular file: the plan's script could only fail at its mkdir, when the
    responder runs it; the plan is refused now, and nothing is written."""
    from ckptrescue.errors import UsageError

    step = scattered / "checkpoint-3" / "global_step3"
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    with pytest.raises(UsageError, match="not a directory"):
        reassemble(step, plan=tmp_path / "p.json", dest=a_file / "out")
    assert not (tmp_path / "p.json").exists()
