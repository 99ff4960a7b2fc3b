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


@pytest.mark.parametrize("how", ["deleted", "symlink loop", "/dev/zero"])
def test_custom_checkpoint_gone_or_not_a_file(mut: Path, how: str) -> None:
    """custom_checkpoint_0.pkl deleted, a symlink loop or /dev/zero: load_state refuses it; the
    step is not intact (the other steps of the run say the file belongs there)."""
    step = mut / "checkpoint_2"
    victim = step / "custom_checkpoint_0.pkl"
    victim.unlink()
    if how == "symlink loop":
        victim.symlink_to(victim.name)
    elif how == "/dev/zero":
        victim.symlink_to("/dev/zero")
    res = oracle(LOAD, str(step))
    assert res.returncode != 0 and "loaded" not in res.stdout
    report = probe(step)
    assert report.verdict not in (Verdict.INTACT, Verdict.SUSPECT), report.findings
    assert "custom_0" in report.extra["family"]["bad_ranks"]
    found = codes(report)
    if how == "deleted":
        assert ["custom_0"] in found["FM001"]
    else:
        assert ["custom_0"] in found["FM007"]
        if how == "/dev/zero":
            assert "IO002" in found


def test_missing_scheduler(mut: Path, tmp_path: Path) -> None:
    step = mut / "checkpoint_2"
    (step / "scheduler.bin").unlink()
    res = oracle(LOAD, str(step))
    assert res.returncode != 0 and "loaded" not in res.stdout
    report = probe(step)
    assert report.verdict is Verdict.INCOMPLETE
    assert ["scheduler"] in codes(report)["FM001"]
    # a step alone: the optimizer's param groups say a scheduler drove it (initial_lr)
    alone = copy(step, tmp_path / "alone" / "checkpoint_2")
    report = probe(alone)
    assert report.verdict is Verdict.INCOMPLETE
    assert codes(report)["FM073"] == [["scheduler"]]
    assert "FM073" not in codes(probe(mut / "checkpoint_1"))


@pytest.mark.parametrize("source", ["random_states_1.pkl", "../checkpoint_0/random_states_0.pkl"])
def test_extra_rng_file_is_ignored_as_the_loader_ignores_it(mut: Path, tmp_path: Path,
                                                            source: str) -> None:
    """random_states_5.pkl beside a 2-process step: load_state reads
    random_states_<process_index>.pkl only; the step stays intact, with a warning."""
    step = mut / "checkpoint_2"
    shutil.copy2(step / source, step / "random_states_5.pkl")
    res = oracle(LOAD, str(step))
    assert res.returncode == 0 and "loaded 6" in res.stdout, res.stderr[-2000:]
    report = probe(step)
    assert report.verdict is Verdict.INTACT, report.findings
    assert codes(report)["FM010"] == [["rank5"]]
    assert report.extra["family"]["world"] == {"processes": 2}
    alone = copy(step, tmp_path / "alone" / "checkpoint_2")  # scheduler: 6 / 3 = 2 processes
    report = probe(alone)
    assert report.verdict is Verdict.INTACT and codes(report)["FM010"] == [["rank5"]]


def test_rng_file_beyond_the_scheduler_world_is_extra(mut: Path, tmp_path: Path) -> None:
    """random_states_0, _1 and _3 where the scheduler says 2 processes: rank 3 is extra."""
    alone = copy(mut / "checkpoint_2", tmp_path / "alone" / "checkpoint_1")
    # step 3 x 4 processes would be last_epoch 12; this run's is 6 = 3 x 2: rank 3 is extra
    shutil.copy2(alone / "random_states_1.pkl", alone / "random_states_3.pkl")
    report = probe(alone)
    assert report.verdict is Verdict.INTACT and codes(report)["FM010"] == [["rank3"]]
