"""Run-level answers on real DeepSpeed and Megatron runs: a ``latest`` /
``latest_checkpointed_iteration.txt`` pointer past the newest complete step, to an incomplete
step, to an older step; ``rank`` names the newest step whose every rank verifies and the exact
pointer value to write (never written by the kit)."""

from __future__ import annotations

from pathlib import Path

import pytest
from f1_build import built, copy

from ckptrescue.checkpoints.probes.checkpoints import probe_paths
from ckptrescue.checkpoints.rank import rank


def pointer_findings(run: Path) -> list:  # noqa: ANN201
    return [f for r in probe_paths([run]) for f in r.findings if f.code in
            ("FM020", "FM021", "FM022", "FM023")]


@pytest.fixture
def ds_run(tmp_path: Path) -> Path:
    pytest.importorskip("deepspeed")
    return copy(built("deepspeed") / "zero2", tmp_path / "run")


def test_correct_pointer_no_finding(ds_run: Path) -> None:
    assert pointer_findings(ds_run) == []
    result = rank(ds_run)
    assert result.resume_from == str(ds_run / "global_step3")
    assert result.family == "deepspeed" and result.pointer_fix is None


def test_pointer_to_an_incomplete_step(ds_run: Path) -> None:
    (ds_run / "global_step3" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    before = (ds_run / "latest").read_bytes()
    [f] = pointer_findings(ds_run)
    assert f.code == "FM021" and f.details["write"] == "global_step2"
    assert f.details["pointer"] == str(ds_run / "latest")
    result = rank(ds_run)
    assert result.resume_from == str(ds_run / "global_step2")
    assert result.pointer_fix == {"pointer": str(ds_run / "latest"), "current": "global_step3",
                                  "family": "deepspeed", "write": "global_step2",
                                  "target": str(ds_run / "global_step2")}
    newest = result.checkpoints[0]
    assert newest.bad_ranks == ["zero_pp_rank_1_mp_rank_00"]
    js = result.to_json()
    assert js["checkpoints"][0]["bad_ranks"] == ["zero_pp_rank_1_mp_rank_00"]
    assert js["pointer_fix"]["write"] == "global_step2"
    assert (ds_run / "latest").read_bytes() == before  # never written


def test_pointer_past_the_newest_step(ds_run: Path) -> None:
    (ds_run / "latest").write_text("global_step9")
    [f] = pointer_findings(ds_run)
    assert f.code == "FM020" and f.details["write"] == "global_step3"


def test_pointer_to_an_older_step(ds_run: Path) -> None:
    (ds_run / "latest").write_text("global_step1")
    [f] = pointer_findings(ds_run)
    assert f.code == "FM022" and f.details["write"] == "global_step3"
    assert rank(ds_run).pointer_fix["write"] == "global_step3"


def test_pointer_not_a_step(ds_run: Path) -> None:
    (ds_run / "latest").write_bytes(b"\x00\x00garbage")
    [f] = pointer_findings(ds_run)
    assert f.code == "FM023"


def test_megatron_iteration_pointer(tmp_path: Path) -> None:
    pytest.importorskip("megatron.core")
    run = copy(built("megatron") / "legacy", tmp_path / "run")
    assert pointer_findings(run) == []
    (run / "iter_0000002" / "mp_rank_00_000" / "model_optim_rng.pt").unlink()
    [f] = pointer_findings(run)
    assert f.code == "FM021" and f.details["write"] == "1"
    result = rank(run)
    assert result.resume_from == str(run / "iter_0000001")
    assert result.family == "megatron"
    assert result.pointer_fix["pointer"] == str(run / "latest_checkpointed_iteration.txt")
    assert result.pointer_fix["current"] == "2" and result.pointer_fix["write"] == "1"
    (run / "latest_checkpointed_iteration.txt").write_text("7")
    assert [f.code for f in pointer_findings(run)] == ["FM020"]
