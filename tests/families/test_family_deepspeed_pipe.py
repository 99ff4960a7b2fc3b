"""DeepSpeed pipeline-parallel layer files (``layer_XX[-model_YY]-model_states.pt``) on steps built
from DeepSpeed's documented layout with ``torch.save`` (``fixtures/families/deepspeed_pipe.py``).
Oracle for intact: ``torch.load(weights_only=True)`` of every file of the step (DeepSpeed's own
``PipelineModule.load_state_dir`` needs a pipeline process grid). Completeness: every layer index
0..max that any mp rank saved, for every mp rank."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from f1_build import codes

from ckptrescue.checkpoints.base import Verdict
from ckptrescue.checkpoints.probes.checkpoints import probe_paths
from fixtures.families import deepspeed_pipe as writer

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return writer.build(tmp_path_factory.mktemp("dspipe"))


def loads(step: Path) -> bool:
    for f in sorted(step.glob("*.pt")):
        torch.load(f, weights_only=True, map_location="cpu")
    return True


def one(path: Path):  # noqa: ANN201
    reports = probe_paths([path])
    assert len(reports) == 1
    return reports[0]


@pytest.mark.parametrize("run", ["pipe_tp2", "pipe"])
def test_intact_layer_files(built: dict[str, Path], run: str) -> None:
    step = built[run]
    assert loads(step)
    r = one(step)
    assert r.format == "deepspeed" and r.verdict is Verdict.INTACT, [f.title for f in r.findings]
    labels = sorted(r.extra["family"]["ranks"])
    if run == "pipe_tp2":
        assert [x for x in labels if x.startswith("layer_")] == [
            f"layer_{i:02d}-model_{t:02d}" for i in (0, 2, 3) for t in (0, 1)]
        assert "layer_02-model_01/attention.dense.weight" in {t.name for t in r.tensors}
    else:
        assert [x for x in labels if x.startswith("layer_")] == ["layer_00", "layer_02",
                                                                 "layer_03"]
    # layer 1 (a function in the specs) has no file on any rank: a warning, not incomplete
    f = next(f for f in r.findings if f.code == "FM012")
    assert f.details["indices"] == [1] and f.severity == "warning"


def test_missing_layer_file_of_one_mp_rank(built: dict[str, Path], tmp_path: Path) -> None:
    step = Path(shutil.copytree(built["pipe_tp2"], tmp_path / "global_step2"))
    (step / "layer_02-model_01-model_states.pt").unlink()
    r = one(step)
    assert r.verdict is Verdict.INCOMPLETE
    assert codes(r)["FM001"] == [["layer_02-model_01"]]
    assert r.extra["family"]["ranks"]["layer_02-model_01"] == "missing"


def test_missing_layer_of_no_model_axis_run(built: dict[str, Path], tmp_path: Path) -> None:
    step = Path(shutil.copytree(built["pipe"], tmp_path / "global_step2"))
    (step / "layer_00-model_states.pt").unlink()
    r = one(step)
    # index 0 now absent on every rank: indistinguishable from a function layer -> FM012 only
    assert "FM012" in codes(r) and r.findings
    assert next(f for f in r.findings if f.code == "FM012").details["indices"] == [0, 1]


def test_layer_shard_with_wrong_shape(built: dict[str, Path], tmp_path: Path) -> None:
    step = Path(shutil.copytree(built["pipe_tp2"], tmp_path / "global_step2"))
    victim = step / "layer_02-model_01-model_states.pt"
    sd = torch.load(victim, weights_only=True)
    sd["attention.query_key_value.weight"] = sd["attention.query_key_value.weight"][:-1].clone()
    torch.save(sd, victim)
    r = one(step)
    assert r.verdict is Verdict.DAMAGED
    assert codes(r)["FM005"] == [["layer_02-model_01"]]
    f = next(f for f in r.findings if f.code == "FM005")
    assert f.tensors == ("layer_02-model_01/attention.query_key_value.weight",)


def test_torn_layer_file(built: dict[str, Path], tmp_path: Path) -> None:
    step = Path(shutil.copytree(built["pipe_tp2"], tmp_path / "global_step2"))
    victim = step / "layer_03-model_00-model_states.pt"
    with open(victim, "r+b") as fh:
        fh.truncate(victim.stat().st_size // 2)
    r = one(step)
    assert r.verdict is Verdict.TRUNCATED
    assert codes(r)["FM007"] == [["layer_03-model_00"]]
    with pytest.raises(Exception):  # noqa: B017 - the oracle refuses it too
        loads(step)
