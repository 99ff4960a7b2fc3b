"""``ckptrescue trainstate`` and ``ckptrescue gate`` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import invoke

from fixtures.trainstate import write_run

pytest.importorskip("torch")


def test_trainstate_names_the_incident_and_exits_1(tmp_path: Path) -> None:
    write_run(tmp_path / "run", incident="lr-zero")
    result = invoke("trainstate", str(tmp_path / "run"), "--json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert [f["code"] for f in data["findings"]] == ["TS004"]
    assert [c["step"] for c in data["checkpoints"]] == [100, 200, 300, 400]


def test_trainstate_on_a_healthy_run_exits_0_and_is_recorded_in_the_case(tmp_path: Path
                                                                         ) -> None:
    from ckptrescue.datasets.outputs import TrainStateOutput
    from ckptrescue.engine.answer import outputs_of
    from ckptrescue.record.case import Case

    write_run(tmp_path / "run")
    case = tmp_path / "case"
    assert invoke("case", "new", str(case), "--title", "t").returncode == 0
    result = invoke("trainstate", str(tmp_path / "run"), "--case", str(case))
    assert result.returncode == 0, result.stderr
    assert "the run trained" in result.stdout
    [out] = outputs_of(Case.open(case), TrainStateOutput)
    assert len(out.checkpoints) == 4 and not out.findings


def test_trainstate_needs_two_checkpoints(tmp_path: Path) -> None:
    write_run(tmp_path / "run", steps=(100,))
    result = invoke("trainstate", str(tmp_path / "run"))
    assert result.returncode == 2
    assert "at least two checkpoints" in result.stderr and "Traceback" not in result.stderr


def test_gate_a_checkpoint_from_the_command_line(tmp_path: Path) -> None:
    paths = write_run(tmp_path / "run", steps=(100, 200))
    assert invoke("gate", str(paths[0])).returncode == 0
    data = bytearray(paths[1].read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside a tensor record: its CRC no longer matches
    paths[1].write_bytes(bytes(data))
    result = invoke("gate", str(paths[1]), "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["passed"] is False
