"""Every checkpoint is named by the evidence item it came from and its path inside it; two
images holding the same path stay apart; scratch paths stay in the commands section."""

from __future__ import annotations

from pathlib import Path

from conftest_cases import add_step

from ckptrescue.engine.answer import answer_line
from ckptrescue.record.case import Case
from ckptrescue.record.provenance import index
from ckptrescue.report import model as report_model
from ckptrescue.report.render import render


def _two_images(tmp_path: Path) -> Case:
    case = Case.create(tmp_path / "case", title="two disks")
    work = case.root / "work"
    for n, name in ((1, "a.img"), (2, "b.img")):
        case.add_evidence(kind="image", source=f"/evidence/{name}", size=4096,
                          sha256=f"{n:02d}" * 32, acquired_how="ddrescue")
        add_step(case, "mount", {"mountpoint": f"{work}/mnt-{n}", "target": f"/evidence/{name}",
                                 "backing_file": f"/evidence/{name}", "fstype": "xfs",
                                 "partition_start": 1048576, "uuid": f"uuid-{n}"}, f"mount-{n}")
    add_step(case, "probe", {"checkpoints": [
        {"path": f"{work}/mnt-{n}/run/step-100.pt", "format": "torch-zip", "verdict": v,
         "tensors_total": 2, "damaged_tensors": ["w"] if v == "damaged" else [],
         "suspect_tensors": [], "missing_tensors": [], "findings": []}
        for n, v in ((1, "damaged"), (2, "intact"))]}, "probe")
    case.log("tool.run", {"argv": ["mount", "-o", "ro", "/dev/loop0", f"{work}/mnt-1"],
                          "returncode": 0})
    return case


def test_each_checkpoint_carries_its_evidence_item_and_inner_path(tmp_path: Path) -> None:
    case = _two_images(tmp_path)
    where = index(case)
    found = where.locate(f"{case.root}/work/mnt-1/run/step-100.pt")
    assert found is not None and found.to_json() == {
        "evidence_id": "E001", "kind": "image", "source": "/evidence/a.img",
        "sha256": "01" * 32, "inner_path": "run/step-100.pt", "filesystem": "xfs",
        "partition_start": 1048576, "fs_uuid": "uuid-1", "label": "E001:run/step-100.pt"}
    model = report_model.build(case)
    assert [(c["path"], c["verdict"]) for c in model["checkpoints"]] == [
        ("E001:run/step-100.pt", "damaged"), ("E002:run/step-100.pt", "intact")]
    assert [e["id"] for e in model["evidence_refs"]] == ["E001", "E002"]


def test_the_answer_names_the_evidence_item_when_there_are_several(tmp_path: Path) -> None:
    assert "E001:run/step-100.pt damaged" in answer_line(_two_images(tmp_path))


def test_scratch_paths_appear_only_in_the_commands_section(tmp_path: Path) -> None:
    case = _two_images(tmp_path)
    html = render(case, "html")
    commands = html.split('<section id="commands">', 1)
    assert "/work/mnt-1" not in commands[0]
    assert "/work/mnt-1" in commands[1]  # what ran, as it ran
