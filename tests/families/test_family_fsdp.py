"""FSDP/DCP family on steps 4 real gloo ranks wrote with FSDP2 on CPU
(``fixtures/families/dcp.py``); ``torch.distributed.checkpoint.load`` is the oracle."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from f2_build import built, copy, oracle

from ckptrescue.checkpoints.base import ProbeOptions, Verdict
from ckptrescue.checkpoints.families.fsdp import FsdpDcpFamily


def codes(report) -> dict[str, list[list[str]]]:  # noqa: ANN001
    out: dict[str, list[list[str]]] = {}
    for f in report.findings:
        out.setdefault(f.code, []).append(list(f.details.get("ranks", [])))
    return out


@pytest.fixture(scope="module")
def fx() -> Path:
    return built("dcp")


@pytest.fixture
def mut(fx: Path, tmp_path: Path) -> Path:
    return copy(fx / "sharded", tmp_path / "sharded")


def probe(path: Path):  # noqa: ANN201
    return FsdpDcpFamily.probe(path, ProbeOptions())


LOAD = ("import sys, warnings; warnings.simplefilter('ignore');"
        "import torch.distributed.checkpoint as dcp;"
        "from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner;"
        "from torch.distributed.checkpoint.state_dict_loader import _load_state_dict;"
        "sd = {}; _load_state_dict(sd, storage_reader=dcp.FileSystemReader(sys.argv[1]),"
        " planner=_EmptyStateDictLoadPlanner(), no_dist=True);"
        "print('loaded', sd['optimizer']['state']['0.weight']['step'].item())")


def test_intact_four_ranks(fx: Path) -> None:
    step = fx / "sharded" / "step-3"
    assert FsdpDcpFamily.claim(fx / "sharded") == sorted((fx / "sharded").iterdir())
    report = probe(step)
    assert report.format == "fsdp-dcp" and report.verdict is Verdict.INTACT, report.findings
    fam = report.extra["family"]
    assert fam["world"] == {"ranks": 4} and fam["steps_recorded"] == [3]
    res = oracle(LOAD, str(step))
    assert res.returncode == 0 and "loaded 3.0" in res.stdout, res.stderr[-2000:]


def test_missing_rank_file(mut: Path) -> None:
    (mut / "step-1" / "__2_0.distcp").unlink()
    report = probe(mut / "step-1")
    assert report.verdict is Verdict.INCOMPLETE
    assert codes(report)["FM050"] == [["rank2"]]
    assert report.extra["family"]["bad_ranks"] == ["rank2"]


def test_rank_file_from_another_step(mut: Path) -> None:
    shutil.copy2(mut / "step-2" / "__1_0.distcp", mut / "step-3" / "__1_0.distcp")
    report = probe(mut / "step-3")
    assert report.verdict is Verdict.DAMAGED
    assert codes(report)["FM002"] == [["rank1"]]
    res = oracle(LOAD, str(mut / "step-3"))  # DCP itself loads the mixed step without a word
    assert res.returncode == 0


def test_torn_rank_file(mut: Path) -> None:
    f = mut / "step-2" / "__3_0.distcp"
    os.truncate(f, f.stat().st_size - 2000)
    report = probe(mut / "step-2")
    assert report.verdict not in (Verdict.INTACT, Verdict.SUSPECT)
    assert codes(report)["FM052"] == [["rank3"]]


def test_uncommitted_step(mut: Path) -> None:
    (mut / "step-3" / ".metadata").unlink()
    report = probe(mut / "step-3")
    assert report.verdict is Verdict.INCOMPLETE and "FM053" in codes(report)


def test_rank_picks_newest_complete_step(mut: Path) -> None:
    from ckptrescue.checkpoints.rank import rank

    (mut / "step-3" / "__0_0.distcp").unlink()
    assert Path(rank(mut).resume_from or "").name == "step-2"
