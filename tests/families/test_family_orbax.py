"""Orbax family on a real ``CheckpointManager`` run on JAX's CPU backend
(``fixtures/families/orbax.py``), verified through tensorstore; ``CheckpointManager.restore`` is
the oracle for intact (in a child process: the kit never imports JAX)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from f2_build import built, copy, oracle

from ckptrescue.checkpoints.base import ProbeOptions, Verdict
from ckptrescue.checkpoints.families.orbax import OrbaxFamily


def codes(report) -> dict[str, list[list[str]]]:  # noqa: ANN001
    out: dict[str, list[list[str]]] = {}
    for f in report.findings:
        out.setdefault(f.code, []).append(list(f.details.get("ranks", [])))
    return out


@pytest.fixture(scope="module")
def run() -> Path:
    pytest.importorskip("tensorstore")
    return built("orbax") / "run"


@pytest.fixture
def mut(run: Path, tmp_path: Path) -> Path:
    return copy(run, tmp_path / "run")


def probe(path: Path):  # noqa: ANN201
    return OrbaxFamily.probe(path, ProbeOptions())


RESTORE = ("import sys; from pathlib import Path; from fixtures.families.orbax import restore;"
           "a = restore(Path(sys.argv[1]), int(sys.argv[2])); print('restored', sorted(a))")


def _big_data_file(item: Path) -> Path:
    return max((item / "ocdbt.process_0" / "d").iterdir(), key=lambda p: p.stat().st_size)


def test_committed_steps_intact_and_tmp_never_resumable(run: Path) -> None:
    roots = OrbaxFamily.claim(run)
    assert [r.name for r in roots] == ["1", "2", "3", "4.orbax-checkpoint-tmp"]
    report = probe(run / "3")
    assert report.verdict is Verdict.INTACT, report.findings
    assert {t.name for t in report.tensors} == {"default/params.w", "default/params.b",
                                                "default/opt.mu", "default/step"}
    assert all(t.status == "ok" for t in report.tensors)
    res = oracle(RESTORE, str(run), "3")
    assert res.returncode == 0 and "restored" in res.stdout, res.stderr[-2000:]
    tmp = probe(run / "4.orbax-checkpoint-tmp")
    assert tmp.verdict is Verdict.INCOMPLETE and "FM080" in codes(tmp)
    res = oracle(RESTORE, str(run), "4")
    assert res.returncode != 0  # Orbax itself does not see step 4


def test_rank_resumes_from_newest_committed(run: Path) -> None:
    from ckptrescue.checkpoints.rank import rank

    result = rank(run)
    assert Path(result.resume_from or "").name == "3"


def test_missing_data_file(mut: Path) -> None:
    _big_data_file(mut / "3" / "default").unlink()
    report = probe(mut / "3")
    assert report.verdict is Verdict.DAMAGED
    assert ["default"] in codes(report)["FM083"]
    assert report.damaged_tensors


def test_torn_data_file(mut: Path) -> None:
    f = _big_data_file(mut / "2" / "default")
    os.truncate(f, 100)
    report = probe(mut / "2")
    assert report.verdict is Verdict.DAMAGED and ["default"] in codes(report)["FM083"]
    res = oracle(RESTORE, str(mut), "2")
    assert res.returncode != 0


def test_missing_manifest_and_item_metadata(mut: Path) -> None:
    (mut / "1" / "default" / "manifest.ocdbt").unlink()
    report = probe(mut / "1")
    assert report.verdict is not Verdict.INTACT and ["default"] in codes(report)["FM082"]
    (mut / "2" / "default" / "_METADATA").unlink()
    report = probe(mut / "2")
    assert ["default"] in codes(report)["FM081"]


def test_item_from_another_step_is_missing_item(mut: Path) -> None:
    shutil.rmtree(mut / "3" / "default")
    report = probe(mut / "3")
    assert report.verdict is Verdict.INCOMPLETE and ["default"] in codes(report)["FM086"]
