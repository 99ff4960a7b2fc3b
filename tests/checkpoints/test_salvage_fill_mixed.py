"""``salvage --fill-from`` (issue 28): a filled checkpoint is mixed, never clean; the JSON, the
answer and the report say which tensors came from which step; ``--torch-save`` writes a file
``torch.load(weights_only=True)`` reads back with the original key structure.

The run is written by ``torch.save`` (integer tensors); step-300 gets one flipped byte in one
tensor. The output is loaded by the real loader in a child process (it is the kit's own output,
but the rule stands: no torch.load here).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ckptrescue.checkpoints.base import Verdict

from .conftest import probe1, tree_hash

LOAD = r"""
import json, sys, torch
def flat(o, pre=""):
    if isinstance(o, dict):
        for k, v in o.items():
            yield from flat(v, f"{pre}{k}.")
    elif isinstance(o, (list, tuple)):
        for i, v in enumerate(o):
            yield from flat(v, f"{pre}{i}.")
    elif isinstance(o, torch.Tensor):
        yield pre.rstrip("."), [str(o.dtype), list(o.shape), o.reshape(-1).tolist()]
    else:
        yield pre.rstrip("."), repr(o)
obj = torch.load(sys.argv[1], weights_only=True)
print(json.dumps({"type": type(obj["model"]).__name__, "flat": dict(flat(obj))}))
"""


def _state(step: int) -> dict:
    import collections

    import torch

    model = collections.OrderedDict([
        ("layer.weight", torch.arange(12, dtype=torch.float32).reshape(3, 4) + step),
        ("layer.bias", torch.arange(3, dtype=torch.float32) + step)])
    return {"model": model, "optimizer": {"state": {0: {"step": torch.tensor(float(step)),
                                                        "exp_avg": torch.arange(3.0) * step}},
                                          "param_groups": [{"lr": 0.5, "params": [0, 1]}]},
            "step": step, "name": "run-a"}


@pytest.fixture
def run(tmp_path: Path) -> Path:
    import torch

    d = tmp_path / "run"
    d.mkdir()
    for step in (200, 300):
        torch.save(_state(step), d / f"step-{step}.pt")
    data = bytearray((d / "step-300.pt").read_bytes())
    needle = (torch.arange(12, dtype=torch.float32) + 300).numpy().tobytes()[8:16]
    data[data.find(needle)] ^= 0x40
    (d / "step-300.pt").write_bytes(bytes(data))
    return d


def test_fill_from_is_mixed_not_clean_and_says_where_each_tensor_came_from(run, tmp_path):
    from ckptrescue.checkpoints.salvage import salvage

    assert probe1(run / "step-300.pt").verdict is Verdict.DAMAGED
    before = tree_hash(run)
    res = salvage(run / "step-300.pt", tmp_path / "out", fill_from=run / "step-200.pt",
                  torch_save=True)
    assert tree_hash(run) == before
    assert res.filled == ["model.layer.weight"]
    assert res.mixed and not res.clean and not res.lost
    out = res.to_json()
    assert out["clean"] is False and out["mixed"] is True
    assert out["sources"][str(run / "step-200.pt")] == ["model.layer.weight"]
    assert "model.layer.weight" not in out["sources"][str(run / "step-300.pt")]
    meta = json.loads((tmp_path / "out" / "salvage.json").read_text())
    assert meta["sources"] == out["sources"]

    proc = subprocess.run([sys.executable, "-c", LOAD, res.torch_save_output],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    assert loaded["type"] == "OrderedDict"  # the original key structure
    flat = loaded["flat"]
    assert set(flat) == {"model.layer.weight", "model.layer.bias", "optimizer.state.0.step",
                         "optimizer.state.0.exp_avg", "optimizer.param_groups.0.lr",
                         "optimizer.param_groups.0.params.0",
                         "optimizer.param_groups.0.params.1", "step", "name"}
    assert flat["model.layer.weight"][2] == [float(i + 200) for i in range(12)]  # step 200
    assert flat["model.layer.bias"][2] == [float(i + 300) for i in range(3)]  # step 300
    assert flat["optimizer.state.0.exp_avg"][2] == [0.0, 300.0, 600.0]
    assert flat["step"] == "300" and flat["name"] == "'run-a'"


def test_torch_save_refused_while_a_tensor_is_lost(run, tmp_path):
    from ckptrescue.checkpoints.salvage import salvage
    from ckptrescue.errors import UsageError

    with pytest.raises(UsageError, match="every tensor recovered or filled"):
        salvage(run / "step-300.pt", tmp_path / "out", torch_save=True)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_answer_and_report_name_the_mix(run, tmp_path):
    from ckptrescue.engine.answer import answer_line
    from ckptrescue.record.case import Case
    from tests.cli_helpers import run_cli

    case = tmp_path / "case"
    assert run_cli("case", "new", str(case)).returncode == 0
    assert run_cli("probe", str(run), "--case", str(case)).returncode == 1
    sal = run_cli("salvage", str(run / "step-300.pt"), str(tmp_path / "out"), "--fill-from",
                  str(run / "step-200.pt"), "--case", str(case))
    assert sal.returncode == 1, sal.stdout + sal.stderr  # mixed: not clean
    answer = answer_line(Case.open(case))
    assert "step-300.pt damaged: salvage mixed, 1 tensor from step-200.pt" in answer
    md = tmp_path / "r.md"
    assert run_cli("report", str(case), "--format", "md", "-o", str(md)).returncode == 0
    text = md.read_text()
    assert "Mixed:" in text and "`model.layer.weight`" in text and "step-200.pt" in text
