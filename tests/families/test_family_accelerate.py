"""Accelerate family on ``save_state`` directories a real 2-process CPU run wrote
(``fixtures/families/accelerate.py``); ``Accelerator.load_state`` is the oracle for intact."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from f2_build import built, copy, oracle

from ckptrescue.checkpoints.base import ProbeOptions, Verdict
from ckptrescue.checkpoints.families.accelerate import AccelerateFamily


def codes(report) -> dict[str, list[list[str]]]:  # noqa: ANN001
    out: dict[str, list[list[str]]] = {}
    for f in report.findings:
        out.setdefault(f.code, []).append(list(f.details.get("ranks", [])))
    return out


@pytest.fixture(scope="module")
def run() -> Path:
    return built("accelerate") / "checkpoints"


@pytest.fixture
def mut(run: Path, tmp_path: Path) -> Path:
    return copy(run, tmp_path / "checkpoints")


def probe(path: Path):  # noqa: ANN201
    return AccelerateFamily.probe(path, ProbeOptions())


LOAD = ("import sys, warnings; warnings.simplefilter('ignore');"
        "from accelerate import Accelerator;"
        "from fixtures.families.accelerate import Counter, make_objects;"
        "acc = Accelerator(cpu=True); m, o, s, d = make_objects(); c = Counter();"
        "acc.register_for_checkpointing(c); m, o, d, s = acc.prepare(m, o, d, s);"
        "acc.load_state(sys.argv[1]); print('loaded', c.seen, acc.step)")


def test_intact_two_processes(run: Path) -> None:
    step = run / "checkpoint_2"
    assert AccelerateFamily.claim(run) == sorted(run.iterdir())
    report = probe(step)
    assert report.format == "accelerate" and report.verdict is Verdict.INTACT, report.findings
    fam = report.extra["family"]
    assert fam["world"] == {"processes": 2} and fam["steps_recorded"] == [3]
    assert {"rank0", "rank1", "model", "optimizer", "scheduler"} <= set(fam["ranks"])
    res = oracle(LOAD, str(step))
    assert res.returncode == 0 and "loaded 6" in res.stdout, res.stderr[-2000:]


def test_missing_rng_rank(mut: Path) -> None:
    (mut / "checkpoint_2" / "random_states_1.pkl").unlink()
    report = probe(mut / "checkpoint_2")
    assert report.verdict is Verdict.INCOMPLETE
    assert ["rank1"] in codes(report)["FM001"]
    assert report.extra["family"]["bad_ranks"] == ["rank1"]


def test_missing_rng_rank_without_siblings(mut: Path, tmp_path: Path) -> None:
    alone = copy(mut / "checkpoint_2", tmp_path / "alone" / "checkpoint_2")
    (alone / "random_states_1.pkl").unlink()
    report = probe(alone)  # scheduler.last_epoch 6 = step 3 x 2 processes
    assert report.verdict is Verdict.INCOMPLETE
    assert ["rank1"] in codes(report)["FM001"] and "FM072" in codes(report)


def test_rng_file_from_another_step(mut: Path) -> None:
    shutil.copy2(mut / "checkpoint_1" / "random_states_1.pkl",
                 mut / "checkpoint_2" / "random_states_1.pkl")
    report = probe(mut / "checkpoint_2")
    assert report.verdict is Verdict.DAMAGED
    assert codes(report)["FM002"] == [["rank1"]]


def test_scheduler_from_another_step(mut: Path) -> None:
    shutil.copy2(mut / "checkpoint_0" / "scheduler.bin", mut / "checkpoint_2" / "scheduler.bin")
    report = probe(mut / "checkpoint_2")
    assert report.verdict is Verdict.DAMAGED
    assert codes(report)["FM071"] == [["optimizer", "scheduler"]]


def test_torn_optimizer(mut: Path) -> None:
    opt = mut / "checkpoint_2" / "optimizer.bin"
    os.truncate(opt, opt.stat().st_size - 700)
    report = probe(mut / "checkpoint_2")
    assert report.verdict not in (Verdict.INTACT, Verdict.SUSPECT)
    assert ["optimizer"] in codes(report)["FM007"]
    res = oracle(LOAD, str(mut / "checkpoint_2"))
    assert res.returncode != 0
